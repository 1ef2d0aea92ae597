// Rotary position embedding (Hugging Face rotate_half pairing), in place on q and k, and
// its fusion with the paged KV-cache write: one block per token computes the token's
// cos/sin table once (in double, so large positions keep f32 accuracy) and rotates every
// head of q and k with it; the fused form also stores the rotated k and v into the cache
// while they are in registers.
#include <string>

#include "kernels/cuda/act_access.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/kernels.h"

namespace ferry::cuda {
namespace {

using namespace kernels_internal;  // NOLINT(google-build-using-namespace)

constexpr int kMaxThreads = 256;

// Per token t: element i of each head pairs with i + half and turns by
// positions[t] * inv_freq[i]. V consecutive pairs per thread step (V divides half).
// kWriteKv: the rotated k and the unrotated v also go to the caches at slots[t] (skipped
// when negative); C is the cache's element type.
template <typename T, typename C, int V, bool kWriteKv>
__global__ void RopeKernel(T* q, T* k, const T* v, int64_t tokens, int num_heads, int num_kv_heads, int head_dim,
                           const int32_t* positions, const float* inv_freq, const int32_t* slots, int block_tokens,
                           C* k_cache, C* v_cache) {
  extern __shared__ float table[];  // cos[half] then sin[half]
  const int half = head_dim / 2;
  const int nvec = half / V;
  const int heads = num_heads + (k != nullptr ? num_kv_heads : 0);
  for (int64_t t = blockIdx.x; t < tokens; t += gridDim.x) {
    __syncthreads();  // the previous token's readers of the table are done
    const double pos = static_cast<double>(positions[t]);
    for (int i = threadIdx.x; i < half; i += blockDim.x) {
      double s, c;
      sincos(pos * static_cast<double>(inv_freq[i]), &s, &c);
      table[i] = static_cast<float>(c);
      table[half + i] = static_cast<float>(s);
    }
    __syncthreads();
    int64_t cache_token = -1;  // element offset of (block, head 0, offset) in the cache
    if constexpr (kWriteKv) {
      const int32_t slot = slots[t];
      if (slot >= 0) {
        const int64_t block = slot / block_tokens, offset = slot % block_tokens;
        cache_token = (block * num_kv_heads * block_tokens + offset) * head_dim;
      }
    }
    for (int w = threadIdx.x; w < heads * nvec; w += blockDim.x) {
      const int h = w / nvec;
      const int i0 = (w % nvec) * V;
      T* head = h < num_heads ? q + (t * num_heads + h) * head_dim : k + (t * num_kv_heads + (h - num_heads)) * head_dim;
      float a[V], b[V];
      LoadF32<T, V>(head + i0, a);
      LoadF32<T, V>(head + half + i0, b);
#pragma unroll
      for (int j = 0; j < V; ++j) {
        const float c = table[i0 + j], s = table[half + i0 + j];
        const float x1 = fmaf(a[j], c, -(b[j] * s));
        const float x2 = fmaf(b[j], c, a[j] * s);
        a[j] = x1;
        b[j] = x2;
      }
      StoreF32<T, V>(head + i0, a);
      StoreF32<T, V>(head + half + i0, b);
      if constexpr (kWriteKv) {
        if (h >= num_heads && cache_token >= 0) {
          C* dst = k_cache + cache_token + static_cast<int64_t>(h - num_heads) * block_tokens * head_dim;
          // The cache holds what k now holds: the rotated values rounded to T.
          float ra[V], rb[V];
#pragma unroll
          for (int j = 0; j < V; ++j) {
            ra[j] = ToF32(FromF32<T>(a[j]));
            rb[j] = ToF32(FromF32<T>(b[j]));
          }
          StoreF32<C, V>(dst + i0, ra);
          StoreF32<C, V>(dst + half + i0, rb);
        }
      }
    }
    if constexpr (kWriteKv) {
      if (cache_token >= 0) {
        const int per_head = head_dim / V;
        for (int w = threadIdx.x; w < num_kv_heads * per_head; w += blockDim.x) {
          const int h = w / per_head;
          const int i0 = (w % per_head) * V;
          float a[V];
          LoadF32<T, V>(v + (t * num_kv_heads + h) * head_dim + i0, a);
          StoreF32<C, V>(v_cache + cache_token + static_cast<int64_t>(h) * block_tokens * head_dim + i0, a);
        }
      }
    }
  }
}

Status CheckRopeArgs(const char* what, const void* q, int64_t tokens, int num_heads, int num_kv_heads, int head_dim,
                     bool has_k, const int32_t* positions, const float* inv_freq) {
  if (tokens < 0) return InvalidArgument(std::string(what) + ": negative token count");
  if (num_heads <= 0 || head_dim <= 0 || head_dim % 2 != 0) {
    return InvalidArgument(std::string(what) + ": need num_heads > 0 and an even head_dim > 0, got " +
                           std::to_string(num_heads) + " heads of " + std::to_string(head_dim));
  }
  if (has_k && num_kv_heads <= 0) return InvalidArgument(std::string(what) + ": num_kv_heads must be positive");
  if (tokens > 0 && (q == nullptr || positions == nullptr || inv_freq == nullptr)) {
    return InvalidArgument(std::string(what) + ": null pointer");
  }
  return Status::Ok();
}

int RopeThreads(int heads, int head_dim, int vec) {
  return RowThreads(static_cast<int64_t>(heads) * (head_dim / 2 / vec), kMaxThreads);
}

int TokenBlocks(int64_t tokens) { return static_cast<int>(tokens < (1 << 20) ? tokens : (1 << 20)); }

}  // namespace

Status Rope(void* q, void* k, int64_t tokens, int num_heads, int num_kv_heads, int head_dim, const int32_t* positions,
            const float* inv_freq, DType act, cudaStream_t stream) {
  FERRY_RETURN_IF_ERROR(
      CheckRopeArgs("Rope", q, tokens, num_heads, num_kv_heads, head_dim, k != nullptr, positions, inv_freq));
  if (tokens == 0) return Status::Ok();
  return DispatchAct(act, "Rope", [&](auto tag) -> Status {
    using T = decltype(tag);
    constexpr int V = kVec16<T>;
    T* qt = static_cast<T*>(q);
    T* kt = static_cast<T*>(k);
    const int heads = num_heads + (k != nullptr ? num_kv_heads : 0);
    const size_t smem = static_cast<size_t>(head_dim) * sizeof(float);
    if ((head_dim / 2) % V == 0 && Aligned(q, 16) && (k == nullptr || Aligned(k, 16))) {
      RopeKernel<T, T, V, false><<<TokenBlocks(tokens), RopeThreads(heads, head_dim, V), smem, stream>>>(
          qt, kt, nullptr, tokens, num_heads, num_kv_heads, head_dim, positions, inv_freq, nullptr, 1, nullptr,
          nullptr);
    } else {
      RopeKernel<T, T, 1, false><<<TokenBlocks(tokens), RopeThreads(heads, head_dim, 1), smem, stream>>>(
          qt, kt, nullptr, tokens, num_heads, num_kv_heads, head_dim, positions, inv_freq, nullptr, 1, nullptr,
          nullptr);
    }
    FERRY_CUDA_RETURN_IF_LAUNCH_FAILED();
    return Status::Ok();
  });
}

Status RopeWriteKv(void* q, void* k, const void* v, int64_t tokens, int num_heads, int num_kv_heads, int head_dim,
                   const int32_t* positions, const float* inv_freq, const int32_t* slots, int block_tokens,
                   void* k_cache, void* v_cache, DType act, DType cache_dtype, cudaStream_t stream) {
  FERRY_RETURN_IF_ERROR(
      CheckRopeArgs("RopeWriteKv", q, tokens, num_heads, num_kv_heads, head_dim, true, positions, inv_freq));
  if (block_tokens <= 0) return InvalidArgument("RopeWriteKv: block_tokens must be positive");
  if (tokens == 0) return Status::Ok();
  if (k == nullptr || v == nullptr || slots == nullptr || k_cache == nullptr || v_cache == nullptr) {
    return InvalidArgument("RopeWriteKv: null pointer");
  }
  return DispatchAct(act, "RopeWriteKv", [&](auto act_tag) -> Status {
    using T = decltype(act_tag);
    return DispatchStorage(cache_dtype, "RopeWriteKv cache", [&](auto cache_tag) -> Status {
      using C = decltype(cache_tag);
      constexpr int V = kVec16<T>;
      T* qt = static_cast<T*>(q);
      T* kt = static_cast<T*>(k);
      const T* vt = static_cast<const T*>(v);
      C* kc = static_cast<C*>(k_cache);
      C* vc = static_cast<C*>(v_cache);
      const int heads = num_heads + num_kv_heads;
      const size_t smem = static_cast<size_t>(head_dim) * sizeof(float);
      const bool vec = (head_dim / 2) % V == 0 && Aligned(q, 16) && Aligned(k, 16) && Aligned(v, 16) &&
                       Aligned(k_cache, V * sizeof(C)) && Aligned(v_cache, V * sizeof(C));
      if (vec) {
        RopeKernel<T, C, V, true><<<TokenBlocks(tokens), RopeThreads(heads, head_dim, V), smem, stream>>>(
            qt, kt, vt, tokens, num_heads, num_kv_heads, head_dim, positions, inv_freq, slots, block_tokens, kc, vc);
      } else {
        RopeKernel<T, C, 1, true><<<TokenBlocks(tokens), RopeThreads(heads, head_dim, 1), smem, stream>>>(
            qt, kt, vt, tokens, num_heads, num_kv_heads, head_dim, positions, inv_freq, slots, block_tokens, kc, vc);
      }
      FERRY_CUDA_RETURN_IF_LAUNCH_FAILED();
      return Status::Ok();
    });
  });
}

}  // namespace ferry::cuda
