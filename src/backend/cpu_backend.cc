#include "backend/cpu_backend.h"

#include <new>
#include <string>

#include "core/thread_pool.h"
#include "kernels/cpu/activations.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/bf16_gemm.h"
#include "kernels/cpu/embedding.h"
#include "kernels/cpu/kv_write.h"
#include "kernels/cpu/norm.h"
#include "kernels/cpu/packed_weight.h"
#include "kernels/cpu/packed_weight_io.h"
#include "kernels/cpu/rope.h"

namespace ferry::backend {

namespace cpu = ::ferry::kernels::cpu;

namespace {

// The host array behind an index tensor (null for an undefined one, which the kernels
// refuse), checked to hold `n` ids.
Result<const int32_t*> HostIds(const Tensor& t, int64_t n, const char* op, const char* what) {
  if (!t.defined()) return static_cast<const int32_t*>(nullptr);
  if (t.dtype() != DType::kI32 || !t.device().is_cpu() || t.rank() != 1 || t.numel() != n) {
    return InvalidArgument(std::string(op) + ": " + what + " " + t.DebugString() + " are not " + std::to_string(n) +
                           " host i32 values");
  }
  return t.data<const int32_t>();
}

// int4-wo on the CPU: the groups (the checkpoint's, or `weight` quantized now) expanded back
// to the f32 matrix they stand for, which the f32 kernels then run. The numbers are the
// GPU's; there is no 4-bit CPU kernel, so neither memory nor time shrinks.
Status ExpandInt4(LinearWeight& w) {
  std::shared_ptr<const kernels::Int4Groups> g = w.int4;
  if (g == nullptr) {
    if (!w.weight.defined() || w.weight.rank() != 2) {
      return InvalidArgument("PrepareLinear: an int4 weight needs [out, in] floats or 4-bit groups");
    }
    const Tensor f = w.weight.ToF32();
    const int64_t group = kernels::DefaultInt4GroupSize(f.dim(1));
    w.format = WeightFormat::kF32;
    if (group == 0) {  // no group size fits this width: the layer stays in floating point
      w.weight = f;
      return Status::Ok();
    }
    FERRY_ASSIGN_OR_RETURN(kernels::Int4Groups q, kernels::QuantizeInt4(f.data<float>(), f.dim(0), f.dim(1), group));
    g = std::make_shared<const kernels::Int4Groups>(std::move(q));
  }
  Tensor f = Tensor::Empty({g->out, g->in}, DType::kF32);
  kernels::DequantizeInt4(*g, f.data<float>());
  w.weight = std::move(f);
  w.format = WeightFormat::kF32;
  w.int4.reset();
  return Status::Ok();
}

}  // namespace

Result<Tensor> CpuBackend::Allocate(const Shape& shape, DType dtype) {
  try {
    const size_t bytes = static_cast<size_t>(NumElements(shape)) * DTypeSize(dtype);
    if (bytes >= kLargeAllocation) {
      std::shared_ptr<void> block = pool_->Get(bytes);
      void* data = block.get();
      return Tensor::FromBorrowed(data, shape, dtype, std::move(block));
    }
    return Tensor::Empty(shape, dtype);
  } catch (const std::bad_alloc&) {
    return ResourceExhausted("out of host memory for " + std::string(DTypeName(dtype)) + ShapeToString(shape) + " (" +
                             std::to_string(NumElements(shape) * static_cast<int64_t>(DTypeSize(dtype))) +
                             " bytes) on cpu");
  }
}

Status CpuBackend::PrepareLinear(LinearWeight& w) {
  if (w.format == WeightFormat::kInt4) FERRY_RETURN_IF_ERROR(ExpandInt4(w));
  std::shared_ptr<cpu::PackedWeight> packed;
  if (w.int8_blocks != nullptr) {
    if (w.format != WeightFormat::kInt8) {
      return InvalidArgument("PrepareLinear: int8 blocks are an int8-wo weight, not " +
                             std::string(WeightFormatName(w.format)));
    }
    FERRY_ASSIGN_OR_RETURN(packed,
                           cpu::PackInt8Blocks(w.int8_blocks->q, w.int8_blocks->scales, w.int8_blocks->block_size));
    w.int8_blocks.reset();
  } else {
    FERRY_ASSIGN_OR_RETURN(packed, cpu::PackWeight(w.weight, w.format, w.smooth));
  }
  if (w.bias.defined()) {
    if (w.bias.numel() != packed->n || !w.bias.device().is_cpu()) {
      return InvalidArgument("PrepareLinear: bias " + w.bias.DebugString() + " does not have " +
                             std::to_string(packed->n) + " elements");
    }
    // Converted once here rather than on every call.
    if (w.bias.dtype() != DType::kF32 || !w.bias.is_contiguous()) w.bias = w.bias.ToF32();
  }
  w.out = packed->n;
  w.in = packed->k;
  w.block_size = packed->block_size;
  w.packed = std::move(packed);
  return Status::Ok();
}

Result<SerializedLinear> CpuBackend::SerializeLinear(const LinearWeight& w) {
  const cpu::PackedWeight* pw = cpu::AsPackedWeight(w.packed);
  if (pw == nullptr) return FailedPrecondition("SerializeLinear: the weight has not been prepared by the CPU backend");
  return cpu::SerializePackedWeight(*pw, w.bias);
}

Result<LinearWeight> CpuBackend::DeserializeLinear(const SerializedLinear& s) {
  FERRY_ASSIGN_OR_RETURN(cpu::PackedLinear p, cpu::DeserializePackedWeight(s));
  LinearWeight w;
  w.bias = std::move(p.bias);
  w.format = p.packed->format;
  w.smooth = p.packed->smooth;
  w.out = p.packed->n;
  w.in = p.packed->k;
  w.block_size = p.packed->block_size;
  w.packed = std::move(p.packed);
  return w;
}

Status CpuBackend::Linear(const Tensor& x, const LinearWeight& w, Tensor& y) { return LinearWith(x, w, y, false); }

Status CpuBackend::GeluFeedForward(const Tensor& x, const LinearWeight& w_in, Tensor& mid, const LinearWeight& w_out,
                                   Tensor& y) {
  FERRY_RETURN_IF_ERROR(LinearWith(x, w_in, mid, true));
  return LinearWith(mid, w_out, y, false);
}

bool CpuBackend::RoundsInputToBf16(const LinearWeight& w) const {
  if (!options_.linear.bf16_activations) return false;
  const cpu::PackedWeight* pw = cpu::AsPackedWeight(w.packed);
  if (pw != nullptr) return cpu::Bf16DotTakesWeight(*pw);
  return w.format == WeightFormat::kBF16 || (w.format == WeightFormat::kInt8 && w.int8_blocks == nullptr);
}

Status CpuBackend::LinearWith(const Tensor& x, const LinearWeight& w, Tensor& y, bool gelu) {
  const cpu::PackedWeight* pw = cpu::AsPackedWeight(w.packed);
  // A pack remembers the tensor it was made from; if the weight still has data and it is
  // other data (the LinearWeight was copied and its weight replaced), the pack is stale.
  const bool stale = pw != nullptr && pw->source != nullptr && w.weight.raw() != nullptr &&
                     pw->source != w.weight.raw();
  std::shared_ptr<cpu::PackedWeight> temporary;
  if (pw == nullptr || stale) {
    if (!w.weight.defined()) return FailedPrecondition("Linear: the weight is neither prepared nor present");
    LinearWeight expanded = w;
    if (expanded.format == WeightFormat::kInt4) FERRY_RETURN_IF_ERROR(ExpandInt4(expanded));
    FERRY_ASSIGN_OR_RETURN(temporary, cpu::PackWeight(expanded.weight, expanded.format, expanded.smooth));
    pw = temporary.get();
  }
  if ((w.out != 0 && w.out != pw->n) || (w.in != 0 && w.in != pw->k)) {
    return InvalidArgument("Linear: the packed weight is [" + std::to_string(pw->n) + ", " + std::to_string(pw->k) +
                           "] but the layer says [" + std::to_string(w.out) + ", " + std::to_string(w.in) + "]");
  }
  cpu::LinearConfig config = options_.linear;
  config.gelu = gelu;
  if (w.small_m_max != 0) {
    // The engine builder timed both kernels for this weight's shape and recorded where the
    // one-pass decode kernel stops winning.
    config.gemv_max_rows = std::max(w.small_m_max, 0);  // negative: never the small-M kernel
  }
  return cpu::Linear(x, *pw, w.bias, y, config);
}

Status CpuBackend::Embedding(const Tensor& table, const Tensor& ids, Tensor& out) {
  FERRY_ASSIGN_OR_RETURN(const int32_t* host_ids, HostIds(ids, ids.numel(), "Embedding", "ids"));
  return cpu::Embedding(table, host_ids, ids.numel(), out);
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

Status CpuBackend::Rope(Tensor& q, Tensor& k, int num_heads, int num_kv_heads, const Tensor& positions,
                        const RopeTable& table) {
  if (table.head_dim != (table.long_factors ? 1 : 2) * static_cast<int>(table.inv_freq.size())) {
    return InvalidArgument("Rope: table head_dim " + std::to_string(table.head_dim) + " does not match its " +
                           std::to_string(table.inv_freq.size()) + " frequencies");
  }
  if (num_heads <= 0 || q.rank() != 2 || q.dim(1) != static_cast<int64_t>(num_heads) * table.head_dim) {
    return InvalidArgument("Rope: q " + q.DebugString() + " is not [tokens, " + std::to_string(num_heads) + " * " +
                           std::to_string(table.head_dim) + "] for the table's head_dim");
  }
  FERRY_ASSIGN_OR_RETURN(const int32_t* pos, HostIds(positions, q.dim(0), "Rope", "positions"));
  return cpu::Rope(q, k, num_heads, num_kv_heads, pos, table.inv_freq, table.long_factors);
}

Status CpuBackend::SiluMul(const Tensor& gate_up, Tensor& out) { return cpu::SiluMul(gate_up, out); }
Status CpuBackend::Gelu(Tensor& x) { return cpu::Gelu(x); }
Status CpuBackend::Tanh(Tensor& x) { return cpu::Tanh(x); }
Status CpuBackend::GeluTanhMul(const Tensor& gate_up, Tensor& out) { return cpu::GeluTanhMul(gate_up, out); }
Status CpuBackend::GeluMul(const Tensor& gate_up, Tensor& out) { return cpu::GeluMul(gate_up, out); }
Status CpuBackend::Scale(Tensor& x, float s) { return cpu::Scale(x, s); }
Status CpuBackend::SoftCap(Tensor& x, float cap) { return cpu::SoftCap(x, cap); }
Status CpuBackend::HeadRmsNorm(Tensor& x, int64_t col_begin, int heads, int head_dim, const Tensor& gamma,
                               float eps) {
  return cpu::HeadRmsNorm(x, col_begin, heads, head_dim, gamma, eps);
}
Status CpuBackend::Add(Tensor& x, const Tensor& y) { return cpu::Add(x, y); }

Status CpuBackend::WriteKv(const Tensor& k, const Tensor& v, const Tensor& slots, KvLayer& layer) {
  FERRY_ASSIGN_OR_RETURN(const int32_t* host_slots, HostIds(slots, k.rank() == 2 ? k.dim(0) : 0, "WriteKv", "slots"));
  return cpu::WriteKv(k, v, host_slots, layer.k, layer.v, layer.block_tokens);
}

Status CpuBackend::PagedAttention(const Tensor& q, const KvLayer& layer, const AttentionBatch& batch,
                                  const AttentionParams& params, Tensor& out) {
  return cpu::PagedAttention(q, layer.k, layer.v, layer.block_tokens, batch.spans, params, out);
}

Status CpuBackend::DenseAttention(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionBatch& batch,
                                  const AttentionParams& params, Tensor& out) {
  return cpu::DenseAttention(q, k, v, batch.spans, params, out);
}

Status CpuBackend::DenseAttentionQkv(const Tensor& qkv, const AttentionBatch& batch, const AttentionParams& params,
                                     Tensor& out) {
  return cpu::DenseAttentionQkv(qkv, batch.spans, params, out);
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

void CpuBackend::BindComputeThreads() {
  const int n = threads();
  if (n > 0 && ComputeThreads() != n) SetComputeThreads(n);
}

std::unique_ptr<Backend> MakeCpuBackend(CpuBackendOptions options) {
  return std::make_unique<CpuBackend>(options);
}

std::unique_ptr<Backend> MakeCpuBackend() { return MakeCpuBackend(CpuBackendOptions()); }

}  // namespace ferry::backend
