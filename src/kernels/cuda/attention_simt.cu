// The f32 SIMT attention kernel's launches: f32 activations (paged or dense), f32 caches,
// and 16-bit activations over a cache of the other 16-bit dtype.
#include <cstdint>

#include "kernels/cuda/attention_kernels.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/launch.h"

namespace ferry::cuda::attention_detail {
namespace {

template <typename A, typename KvT, int HD, Mode kMode>
Status LaunchSimtKernel(const Params& p, int num_tokens, cudaStream_t stream) {
  // One CTA per query row slot (spans never hold more rows than q has) and KV head.
  const dim3 grid(static_cast<unsigned>(num_tokens), static_cast<unsigned>(p.num_kv_heads));
  LaunchKernel(SimtAttentionKernel<A, KvT, HD, kMode>, grid, dim3(128), 0, stream, p);
  FERRY_CUDA_RETURN_IF_LAUNCH_FAILED();
  return Status::Ok();
}

template <typename A, int HD>
Status ForCache(const Params& p, bool dense, DType kv, int num_tokens, cudaStream_t stream) {
  if (dense) return LaunchSimtKernel<A, A, HD, Mode::kDense>(p, num_tokens, stream);
  switch (kv) {
    case DType::kBF16: return LaunchSimtKernel<A, Bf16, HD, Mode::kPrefill>(p, num_tokens, stream);
    case DType::kF16: return LaunchSimtKernel<A, Half, HD, Mode::kPrefill>(p, num_tokens, stream);
    case DType::kF8E4M3: return LaunchSimtKernel<A, Fp8, HD, Mode::kPrefill>(p, num_tokens, stream);
    case DType::kF32: return LaunchSimtKernel<A, float, HD, Mode::kPrefill>(p, num_tokens, stream);
    default: return InvalidArgument("attention: unsupported cache dtype");
  }
}

}  // namespace

Status LaunchSimt(const Params& p, bool dense, DType act, DType kv, int head_dim, int num_tokens,
                  cudaStream_t stream) {
  return WithHeadDim(dense ? "DenseAttention" : "PagedAttention", head_dim, [&](auto hd) -> Status {
    constexpr int HD = decltype(hd)::value;
    switch (act) {
      case DType::kF32: return ForCache<float, HD>(p, dense, kv, num_tokens, stream);
      case DType::kBF16: return ForCache<Bf16, HD>(p, dense, kv, num_tokens, stream);
      case DType::kF16: return ForCache<Half, HD>(p, dense, kv, num_tokens, stream);
      default: return InvalidArgument("attention: unsupported activation dtype");
    }
  });
}

}  // namespace ferry::cuda::attention_detail
