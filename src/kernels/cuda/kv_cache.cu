// Scatter of new keys and values into the paged KV cache [num_blocks, num_kv_heads,
// block_tokens, head_dim], converting to the cache's dtype (f32, f16, bf16 or fp8 e4m3).
#include <string>

#include "kernels/cuda/act_access.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/kernels.h"
#include "kernels/cuda/launch.h"

namespace ferry::cuda {
namespace {

using namespace kernels_internal;  // NOLINT(google-build-using-namespace)

constexpr int kMaxThreads = 256;

// One block per token: 2 * num_kv_heads * head_dim / V vector moves. V divides head_dim.
template <typename T, typename C, int V>
__global__ void WriteKvKernel(const T* k, const T* v, const int32_t* slots, int64_t tokens, int num_kv_heads,
                              int head_dim, int block_tokens, C* k_cache, C* v_cache) {
  AwaitPriorGrids();
  const int per_head = head_dim / V;
  const int per_token = num_kv_heads * per_head;
  for (int64_t t = blockIdx.x; t < tokens; t += gridDim.x) {
    const int32_t slot = slots[t];
    if (slot < 0) continue;  // padding row
    const int64_t block = slot / block_tokens, offset = slot % block_tokens;
    const int64_t cache_token = (block * num_kv_heads * block_tokens + offset) * head_dim;
    for (int w = threadIdx.x; w < 2 * per_token; w += blockDim.x) {
      const bool is_v = w >= per_token;
      const int hw = is_v ? w - per_token : w;
      const int h = hw / per_head;
      const int i0 = (hw % per_head) * V;
      float a[V];
      LoadF32<T, V>((is_v ? v : k) + (t * num_kv_heads + h) * head_dim + i0, a);
      StoreF32<C, V>((is_v ? v_cache : k_cache) + cache_token + static_cast<int64_t>(h) * block_tokens * head_dim + i0,
                     a);
    }
  }
}

}  // namespace

Status WriteKv(const void* k, const void* v, const int32_t* slots, int64_t tokens, int num_kv_heads, int head_dim,
               int block_tokens, void* k_cache, void* v_cache, DType act, DType cache_dtype, cudaStream_t stream) {
  if (tokens < 0) return InvalidArgument("WriteKv: negative token count");
  if (num_kv_heads <= 0 || head_dim <= 0 || block_tokens <= 0) {
    return InvalidArgument("WriteKv: num_kv_heads, head_dim and block_tokens must be positive, got " +
                           std::to_string(num_kv_heads) + ", " + std::to_string(head_dim) + ", " +
                           std::to_string(block_tokens));
  }
  if (tokens == 0) return Status::Ok();
  if (k == nullptr || v == nullptr || slots == nullptr || k_cache == nullptr || v_cache == nullptr) {
    return InvalidArgument("WriteKv: null pointer");
  }
  return DispatchAct(act, "WriteKv", [&](auto act_tag) -> Status {
    using T = decltype(act_tag);
    return DispatchStorage(cache_dtype, "WriteKv cache", [&](auto cache_tag) -> Status {
      using C = decltype(cache_tag);
      constexpr int V = kVec16<T>;
      const T* kt = static_cast<const T*>(k);
      const T* vt = static_cast<const T*>(v);
      C* kc = static_cast<C*>(k_cache);
      C* vc = static_cast<C*>(v_cache);
      const int blocks = static_cast<int>(tokens < (1 << 20) ? tokens : (1 << 20));
      const bool vec = head_dim % V == 0 && Aligned(k, 16) && Aligned(v, 16) && Aligned(k_cache, V * sizeof(C)) &&
                       Aligned(v_cache, V * sizeof(C));
      if (vec) {
        const int threads = RowThreads(2 * static_cast<int64_t>(num_kv_heads) * (head_dim / V), kMaxThreads);
        LaunchKernel(WriteKvKernel<T, C, V>, blocks, threads, 0, stream, kt, vt, slots, tokens, num_kv_heads,
                     head_dim, block_tokens, kc, vc);
      } else {
        const int threads = RowThreads(2 * static_cast<int64_t>(num_kv_heads) * head_dim, kMaxThreads);
        LaunchKernel(WriteKvKernel<T, C, 1>, blocks, threads, 0, stream, kt, vt, slots, tokens, num_kv_heads,
                     head_dim, block_tokens, kc, vc);
      }
      FERRY_CUDA_RETURN_IF_LAUNCH_FAILED();
      return Status::Ok();
    });
  });
}

}  // namespace ferry::cuda
