#include "backend/backend.h"

#include <algorithm>
#include <cstring>


namespace ferry::backend {

// The ops only some architectures need: a backend without them says so instead of running
// a model wrongly.
Status Backend::GeluLinear(Tensor& x, const LinearWeight& w, Tensor& y) {
  FERRY_RETURN_IF_ERROR(Gelu(x));
  return Linear(x, w, y);
}
Status Backend::GeluFeedForward(const Tensor& x, const LinearWeight& w_in, Tensor& mid, const LinearWeight& w_out,
                                Tensor& y) {
  FERRY_RETURN_IF_ERROR(Linear(x, w_in, mid));
  return GeluLinear(mid, w_out, y);
}
Status Backend::GatedLinear(const Tensor& gate_up, bool gelu_tanh, Tensor& mlp, const LinearWeight& w, Tensor& y) {
  FERRY_RETURN_IF_ERROR(gelu_tanh ? GeluTanhMul(gate_up, mlp) : SiluMul(gate_up, mlp));
  return Linear(mlp, w, y);
}
Status Backend::NormLinear(Tensor& residual, const Tensor* delta, const Tensor& gamma, float eps, Tensor& h,
                           const LinearWeight& w, Tensor& y) {
  FERRY_RETURN_IF_ERROR(delta != nullptr ? AddRmsNorm(residual, *delta, gamma, eps, h) : RmsNorm(residual, gamma, eps, h));
  return Linear(h, w, y);
}
Status Backend::LayerNormLinear(const Tensor& x, const Tensor& delta, const Tensor& gamma, const Tensor& beta,
                                float eps, Tensor& out, const LinearWeight& w, Tensor& y) {
  FERRY_RETURN_IF_ERROR(LayerNorm(x, delta, gamma, beta, eps, out));
  return Linear(out, w, y);
}
Status Backend::GeluTanhMul(const Tensor&, Tensor&) { return Unimplemented(Name() + " backend has no GeluTanhMul"); }
Status Backend::GeluMul(const Tensor&, Tensor&) { return Unimplemented(Name() + " backend has no GeluMul"); }
Status Backend::Scale(Tensor&, float) { return Unimplemented(Name() + " backend has no Scale"); }
Status Backend::SoftCap(Tensor&, float) { return Unimplemented(Name() + " backend has no SoftCap"); }
Status Backend::HeadRmsNorm(Tensor&, int64_t, int, int, const Tensor&, float) {
  return Unimplemented(Name() + " backend has no HeadRmsNorm");
}

Status Backend::PrepareLinearParts(const std::vector<Tensor>& parts, LinearWeight& w) {
  if (parts.empty()) return InvalidArgument("PrepareLinearParts: no parts");
  if (parts.size() == 1) {
    w.weight = parts[0];
    return PrepareLinear(w);
  }
  const int64_t cols = parts[0].dim(1);
  const DType dtype = parts[0].dtype();
  int64_t rows = 0;
  for (const Tensor& p : parts) {
    if (p.rank() != 2 || p.dim(1) != cols || p.dtype() != dtype || !p.is_contiguous()) {
      return InvalidArgument("PrepareLinearParts: parts disagree on columns or dtype (" + p.DebugString() + " vs " +
                             parts[0].DebugString() + ")");
    }
    rows += p.dim(0);
  }
  Tensor fused = Tensor::Empty({rows, cols}, dtype);
  char* dst = fused.data<char>();
  for (const Tensor& p : parts) {
    std::memcpy(dst, p.raw(), p.nbytes());
    dst += p.nbytes();
  }
  w.weight = std::move(fused);
  return PrepareLinear(w);
}

Status Backend::CopyColumns(const Tensor& src, int64_t col_begin, Tensor& dst) {
  if (src.rank() != 2 || dst.rank() != 2 || src.dim(0) != dst.dim(0) || src.dtype() != dst.dtype() ||
      col_begin < 0 || col_begin + dst.dim(1) > src.dim(1)) {
    return InvalidArgument("CopyColumns: cannot copy columns [" + std::to_string(col_begin) + ", +" +
                           std::to_string(dst.dim(1)) + ") of " + src.DebugString() + " into " + dst.DebugString());
  }
  const size_t elem = DTypeSize(src.dtype());
  const size_t row_bytes = static_cast<size_t>(dst.dim(1)) * elem;
  const char* s = static_cast<const char*>(src.raw()) + col_begin * elem;
  char* d = static_cast<char*>(dst.raw());
  for (int64_t r = 0; r < src.dim(0); ++r) {
    std::memcpy(d + r * row_bytes, s + r * src.strides()[0] * elem, row_bytes);
  }
  return Status::Ok();
}

Status Backend::PoolRows(const Tensor& x, const AttentionBatch& batch, PoolMode mode, Tensor& out) {
  const std::span<const SeqSpan> spans = batch.spans;
  if (x.dtype() != DType::kF32 || out.dtype() != DType::kF32 || !x.device().is_cpu() || x.rank() != 2 ||
      out.rank() != 2 || out.dim(0) != static_cast<int64_t>(spans.size()) || out.dim(1) != x.dim(1)) {
    return InvalidArgument("PoolRows: cannot pool " + x.DebugString() + " into " + out.DebugString());
  }
  const int64_t H = x.dim(1);
  for (size_t s = 0; s < spans.size(); ++s) {
    const SeqSpan& sp = spans[s];
    if (sp.q_begin < 0 || sp.q_len <= 0 || sp.q_begin + sp.q_len > x.dim(0)) {
      return InvalidArgument("PoolRows: span outside the rows");
    }
    float* dst = out.data<float>() + static_cast<int64_t>(s) * H;
    const float* src = x.data<float>() + static_cast<int64_t>(sp.q_begin) * H;
    switch (mode) {
      case PoolMode::kFirst:
        std::memcpy(dst, src, static_cast<size_t>(H) * sizeof(float));
        break;
      case PoolMode::kLast:
        std::memcpy(dst, src + static_cast<int64_t>(sp.q_len - 1) * H, static_cast<size_t>(H) * sizeof(float));
        break;
      case PoolMode::kMean:
        std::fill(dst, dst + H, 0.0f);
        for (int32_t t = 0; t < sp.q_len; ++t)
          for (int64_t j = 0; j < H; ++j) dst[j] += src[t * H + j];
        for (int64_t j = 0; j < H; ++j) dst[j] /= static_cast<float>(sp.q_len);
        break;
      case PoolMode::kMax:
        std::memcpy(dst, src, static_cast<size_t>(H) * sizeof(float));
        for (int32_t t = 1; t < sp.q_len; ++t)
          for (int64_t j = 0; j < H; ++j) dst[j] = std::max(dst[j], src[t * H + j]);
        break;
    }
  }
  return Status::Ok();
}

Status Backend::DenseAttentionQkv(const Tensor& qkv, const AttentionBatch& batch, const AttentionParams& params,
                                  Tensor& out) {
  const int64_t q_dim = static_cast<int64_t>(params.num_heads) * params.head_dim;
  const int64_t kv_dim = static_cast<int64_t>(params.num_kv_heads) * params.head_dim;
  if (qkv.rank() != 2 || qkv.dim(1) != q_dim + 2 * kv_dim) {
    return InvalidArgument("DenseAttentionQkv: " + qkv.DebugString() + " is not a fused QKV projection of this shape");
  }
  const int64_t rows = qkv.dim(0);
  FERRY_ASSIGN_OR_RETURN(Tensor q, Allocate({rows, q_dim}, qkv.dtype()));
  FERRY_ASSIGN_OR_RETURN(Tensor k, Allocate({rows, kv_dim}, qkv.dtype()));
  FERRY_ASSIGN_OR_RETURN(Tensor v, Allocate({rows, kv_dim}, qkv.dtype()));
  FERRY_RETURN_IF_ERROR(CopyColumns(qkv, 0, q));
  FERRY_RETURN_IF_ERROR(CopyColumns(qkv, q.dim(1), k));
  FERRY_RETURN_IF_ERROR(CopyColumns(qkv, q.dim(1) + k.dim(1), v));
  return DenseAttention(q, k, v, batch, params, out);
}

Status Backend::RopeQkvWriteKv(const Tensor& qkv, int num_heads, int num_kv_heads, const Tensor& positions,
                               const RopeTable& table, const Tensor& slots, KvLayer& layer, Tensor& q, Tensor& k,
                               Tensor& v) {
  const int64_t q_dim = q.dim(1), kv_dim = k.dim(1);
  FERRY_RETURN_IF_ERROR(CopyColumns(qkv, 0, q));
  FERRY_RETURN_IF_ERROR(CopyColumns(qkv, q_dim, k));
  FERRY_RETURN_IF_ERROR(CopyColumns(qkv, q_dim + kv_dim, v));
  FERRY_RETURN_IF_ERROR(Rope(q, k, num_heads, num_kv_heads, positions, table));
  return WriteKv(k, v, slots, layer);
}

}  // namespace ferry::backend
