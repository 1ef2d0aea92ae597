// Prefill rows of PagedAttention and all of DenseAttention: the tensor-core FlashAttention
// kernel in its prefill shape (64 packed query rows per CTA, 4 warps of 16 rows sharing
// 64-key tiles), over a flat grid of (query tile, KV head) that each CTA maps to its sequence.
#include <cstdint>
#include <string>

#include "kernels/cuda/attention.h"
#include "kernels/cuda/attention_kernels.cuh"
#include "kernels/cuda/cuda_check.h"

namespace ferry::cuda {
namespace attention_detail {
namespace {

constexpr int kPrefillKeyTile = 64;
constexpr int kPrefillRows = 64;

// Tiles of kPrefillRows packed rows, summed over sequences, never exceed this bound
// (each sequence wastes less than one tile).
Result<unsigned> TileBound(int num_tokens, int group, int num_seqs) {
  const int64_t bound = (static_cast<int64_t>(num_tokens) * group + kPrefillRows - 1) / kPrefillRows + num_seqs;
  if (bound > 0x7fffffff) return InvalidArgument("attention: too many query rows for one launch");
  return static_cast<unsigned>(bound);
}

// 64-row CTAs of 4 warps. CTAs of 8 warps (128 rows sharing each K/V tile) measured the same
// on bert-base's 512-token windows (H200), so one shape serves every caller.
template <typename T, typename KvT, int HD, Mode kMode>
Status LaunchPrefillKernel(const Params& p, int num_tokens, int num_seqs, cudaStream_t stream) {
  using C = FlashConfig<T, KvT, HD, 4, 1, kPrefillKeyTile>;
  static_assert(C::kRows == kPrefillRows);
  FERRY_ASSIGN_OR_RETURN(const unsigned tiles, TileBound(num_tokens, p.group, num_seqs));
  const dim3 grid(tiles, p.num_kv_heads);
  if (p.softcap > 0.0f) {
    return LaunchWithSmem<FlashAttentionKernel<T, KvT, HD, 4, 1, kPrefillKeyTile, kMode, true>>(
        grid, dim3(C::kThreads), C::kSmemBytes, stream, p);
  }
  return LaunchWithSmem<FlashAttentionKernel<T, KvT, HD, 4, 1, kPrefillKeyTile, kMode, false>>(
      grid, dim3(C::kThreads), C::kSmemBytes, stream, p);
}

}  // namespace

Status LaunchPagedPrefill(const Params& p, DType act, DType kv, int head_dim, int num_tokens, int num_seqs,
                          cudaStream_t stream) {
  return WithHeadDim("PagedAttention", head_dim, [&](auto hd) -> Status {
    constexpr int HD = decltype(hd)::value;
    if (act == DType::kBF16) {
      if (kv == DType::kF8E4M3) return LaunchPrefillKernel<Bf16, Fp8, HD, Mode::kPrefill>(p, num_tokens, num_seqs, stream);
      return LaunchPrefillKernel<Bf16, Bf16, HD, Mode::kPrefill>(p, num_tokens, num_seqs, stream);
    }
    if (kv == DType::kF8E4M3) return LaunchPrefillKernel<Half, Fp8, HD, Mode::kPrefill>(p, num_tokens, num_seqs, stream);
    return LaunchPrefillKernel<Half, Half, HD, Mode::kPrefill>(p, num_tokens, num_seqs, stream);
  });
}

Status LaunchDenseFlash(const Params& p, DType act, int head_dim, int num_tokens, cudaStream_t stream) {
  return WithHeadDim("DenseAttention", head_dim, [&](auto hd) -> Status {
    constexpr int HD = decltype(hd)::value;
    if (act == DType::kBF16) return LaunchPrefillKernel<Bf16, Bf16, HD, Mode::kDense>(p, num_tokens, p.num_seqs, stream);
    return LaunchPrefillKernel<Half, Half, HD, Mode::kDense>(p, num_tokens, p.num_seqs, stream);
  });
}

}  // namespace attention_detail

namespace {

using attention_detail::Aligned16;

Status CheckArgs(const DenseAttentionArgs& a) {
  auto bad = [](const std::string& what) { return InvalidArgument("DenseAttention: " + what); };
  if (a.num_seqs < 0 || a.num_tokens < 0) return bad("negative num_seqs or num_tokens");
  FERRY_RETURN_IF_ERROR(attention_detail::CheckHeads("DenseAttention", a.num_heads, a.num_kv_heads, a.head_dim));
  if (a.dtype != DType::kBF16 && a.dtype != DType::kF16 && a.dtype != DType::kF32) {
    return bad(std::string("dtype ") + std::string(DTypeName(a.dtype)) + " (bf16, f16 or f32)");
  }
  if (a.num_seqs == 0 || a.num_tokens == 0) return Status::Ok();
  if (!a.q || !a.k || !a.v || !a.out || !a.q_begin || !a.q_len) return bad("null q, k, v, out or batch array");
  if (!Aligned16(a.q) || !Aligned16(a.k) || !Aligned16(a.v) || !Aligned16(a.out)) {
    return bad("q, k, v and out must be 16-byte aligned");
  }
  const int64_t q_width = static_cast<int64_t>(a.num_heads) * a.head_dim;
  const int64_t kv_width = static_cast<int64_t>(a.num_kv_heads) * a.head_dim;
  const int64_t strides[3][2] = {{a.q_row_stride, q_width}, {a.out_row_stride, q_width}, {a.kv_row_stride, kv_width}};
  for (const auto& [stride, width] : strides) {
    if (stride != 0 && (stride < width || stride % 8 != 0)) {
      return bad("row stride " + std::to_string(stride) + " must be 0 or a multiple of 8 that is >= " +
                 std::to_string(width));
    }
  }
  return Status::Ok();
}

}  // namespace

Status DenseAttention(const DenseAttentionArgs& a, cudaStream_t stream) {
  FERRY_RETURN_IF_ERROR(CheckArgs(a));
  if (a.num_seqs == 0 || a.num_tokens == 0) return Status::Ok();
  attention_detail::Params p;
  p.q = a.q;
  p.out = a.out;
  p.k = a.k;
  p.v = a.v;
  p.q_stride = a.q_row_stride ? a.q_row_stride : static_cast<int64_t>(a.num_heads) * a.head_dim;
  p.out_stride = a.out_row_stride ? a.out_row_stride : static_cast<int64_t>(a.num_heads) * a.head_dim;
  p.kv_stride = a.kv_row_stride ? a.kv_row_stride : static_cast<int64_t>(a.num_kv_heads) * a.head_dim;
  p.q_begin = a.q_begin;
  p.q_len = a.q_len;
  p.num_seqs = a.num_seqs;
  p.num_heads = a.num_heads;
  p.num_kv_heads = a.num_kv_heads;
  p.group = a.num_heads / a.num_kv_heads;
  p.scale = a.scale;
  p.scale_log2 = a.scale * 1.4426950408889634f;
  p.causal = a.causal;
  p.softcap = a.softcap;
  if (a.window < 0) return InvalidArgument("DenseAttention: window must not be negative");
  if (a.window > 0) {
    p.window = a.causal ? a.window : a.window + 1;
    p.window_right = a.causal ? 0 : a.window + 1;
  }
  if (a.dtype == DType::kF32) {
    return attention_detail::LaunchSimt(p, true, a.dtype, a.dtype, a.head_dim, a.num_tokens, stream);
  }
  return attention_detail::LaunchDenseFlash(p, a.dtype, a.head_dim, a.num_tokens, stream);
}

}  // namespace ferry::cuda
