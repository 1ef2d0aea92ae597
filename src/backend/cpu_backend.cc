#include "backend/cpu_backend.h"

#include "kernels/cpu/activations.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/embedding.h"
#include "kernels/cpu/kv_write.h"
#include "kernels/cpu/norm.h"
#include "kernels/cpu/packed_weight.h"
#include "kernels/cpu/rope.h"

namespace ferry::backend {

namespace cpu = ::ferry::kernels::cpu;

Status CpuBackend::PrepareLinear(LinearWeight& w) {
  FERRY_ASSIGN_OR_RETURN(std::shared_ptr<cpu::PackedWeight> packed, cpu::PackWeight(w.weight));
  w.packed = std::move(packed);
  return Status::Ok();
}

Status CpuBackend::Linear(const Tensor& x, const LinearWeight& w, Tensor& y) {
  return cpu::Linear(x, w.weight, w.bias, w.packed, y, options_.linear);
}

Status CpuBackend::Embedding(const Tensor& table, const int32_t* ids, int64_t n, Tensor& out) {
  return cpu::Embedding(table, ids, n, out);
}

Status CpuBackend::RmsNorm(const Tensor& x, const Tensor& gamma, float eps, Tensor& out) {
  return cpu::RmsNorm(x, gamma, eps, out);
}

Status CpuBackend::AddRmsNorm(Tensor& residual, const Tensor& delta, const Tensor& gamma, float eps, Tensor& out) {
  return cpu::AddRmsNorm(residual, delta, gamma, eps, out);
}

Status CpuBackend::LayerNorm(const Tensor& x, const Tensor& delta, const Tensor& gamma, const Tensor& beta, float eps,
                             Tensor& out) {
  return cpu::LayerNorm(x, delta, gamma, beta, eps, out);
}

Status CpuBackend::Rope(Tensor& q, Tensor& k, int num_heads, int num_kv_heads, const int32_t* positions,
                        const RopeTable& table) {
  if (table.head_dim != 2 * static_cast<int>(table.inv_freq.size())) {
    return InvalidArgument("Rope: table head_dim " + std::to_string(table.head_dim) + " does not match its " +
                           std::to_string(table.inv_freq.size()) + " frequencies");
  }
  if (num_heads <= 0 || q.rank() != 2 || q.dim(1) != static_cast<int64_t>(num_heads) * table.head_dim) {
    return InvalidArgument("Rope: q " + q.DebugString() + " is not [tokens, " + std::to_string(num_heads) + " * " +
                           std::to_string(table.head_dim) + "] for the table's head_dim");
  }
  return cpu::Rope(q, k, num_heads, num_kv_heads, positions, table.inv_freq);
}

Status CpuBackend::SiluMul(const Tensor& gate_up, Tensor& out) { return cpu::SiluMul(gate_up, out); }
Status CpuBackend::Gelu(Tensor& x) { return cpu::Gelu(x); }
Status CpuBackend::Tanh(Tensor& x) { return cpu::Tanh(x); }
Status CpuBackend::Add(Tensor& x, const Tensor& y) { return cpu::Add(x, y); }

Status CpuBackend::WriteKv(const Tensor& k, const Tensor& v, const int32_t* slots, KvLayer& layer) {
  return cpu::WriteKv(k, v, slots, layer.k, layer.v, layer.block_tokens);
}

Status CpuBackend::PagedAttention(const Tensor& q, const KvLayer& layer, const std::vector<SeqSpan>& spans,
                                  const AttentionParams& params, Tensor& out) {
  return cpu::PagedAttention(q, layer.k, layer.v, layer.block_tokens, spans, params, out);
}

Status CpuBackend::DenseAttention(const Tensor& q, const Tensor& k, const Tensor& v, const std::vector<SeqSpan>& spans,
                                  const AttentionParams& params, Tensor& out) {
  return cpu::DenseAttention(q, k, v, spans, params, out);
}

Result<Tensor> CpuBackend::ToHost(const Tensor& t) {
  if (!t.device().is_cpu()) return InvalidArgument("ToHost: " + t.DebugString() + " is not a CPU tensor");
  if (t.dtype() == DType::kF32 && t.is_contiguous()) return t;
  switch (t.dtype()) {
    case DType::kF32:
    case DType::kF16:
    case DType::kBF16:
    case DType::kF8E4M3:
      return t.ToF32();
    default:
      // Integer tensors (token ids) are returned as they are, contiguous.
      return t.is_contiguous() ? t : t.Clone();
  }
}

std::unique_ptr<Backend> MakeCpuBackend(CpuBackendOptions options) {
  return std::make_unique<CpuBackend>(options);
}

std::unique_ptr<Backend> MakeCpuBackend() { return MakeCpuBackend(CpuBackendOptions()); }

}  // namespace ferry::backend
