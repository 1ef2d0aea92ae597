// Rotary position embedding (Hugging Face rotate_half pairing), in place on q and k, and
// its fusion with the paged KV-cache write: one block per token computes the token's
// cos/sin table once (in double, so large positions keep f32 accuracy) and rotates every
// head of q and k with it; the fused form also stores the rotated k and v into the cache
// while they are in registers.
#include <string>

#include "kernels/attention_params.h"
#include "kernels/cuda/act_access.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/kernels.h"
#include "kernels/cuda/launch.h"

namespace ferry::cuda {
namespace {

using namespace kernels_internal;  // NOLINT(google-build-using-namespace)

constexpr int kMaxThreads = 256;

// Where a RoPE pass reads and writes. Rows are `*_stride` elements apart, so q, k and v can
// be separate tensors or column ranges of one fused QKV projection. k_in null: q only;
// k_out null: the rotated keys go only to the cache.
template <typename T>
struct RopeIo {
  const T* q_in = nullptr;
  T* q_out = nullptr;
  int64_t q_in_stride = 0, q_out_stride = 0;
  const T* k_in = nullptr;
  T* k_out = nullptr;
  int64_t k_in_stride = 0, k_out_stride = 0;
  const T* v_in = nullptr;  // kWriteKv only
  int64_t v_stride = 0;
};

// Per token t: element i of each head pairs with i + half and turns by
// positions[t] * inv_freq[i]. V consecutive pairs per thread step (V divides half).
// kWriteKv: the rotated k and the unrotated v also go to the caches at slots[t] (skipped
// when negative); C is the cache's element type.
template <typename T, typename C, int V, bool kWriteKv>
__global__ void RopeKernel(const RopeIo<T> io, int64_t tokens, int num_heads, int num_kv_heads, int head_dim,
                           const int32_t* positions, const float* inv_freq, const int32_t* slots, int block_tokens,
                           C* k_cache, C* v_cache) {
  AwaitPriorGrids();
  extern __shared__ float table[];  // cos[half] then sin[half]
  const int half = head_dim / 2;
  const int nvec = half / V;
  const int heads = num_heads + (io.k_in != nullptr ? num_kv_heads : 0);
  for (int64_t t = blockIdx.x; t < tokens; t += gridDim.x) {
    __syncthreads();  // the previous token's readers of the table are done
    // A flagged position takes the long half of a longrope table (never set otherwise).
    const int32_t raw = positions[t];
    const double pos = static_cast<double>(raw & (kernels::kRopeLongPosition - 1));
    const float* freq = inv_freq + ((raw & kernels::kRopeLongPosition) != 0 ? half : 0);
    for (int i = threadIdx.x; i < half; i += blockDim.x) {
      double s, c;
      sincos(pos * static_cast<double>(freq[i]), &s, &c);
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
      const bool is_q = h < num_heads;
      const int kh = h - num_heads;
      const T* src = is_q ? io.q_in + t * io.q_in_stride + static_cast<int64_t>(h) * head_dim
                          : io.k_in + t * io.k_in_stride + static_cast<int64_t>(kh) * head_dim;
      T* dst = is_q ? io.q_out + t * io.q_out_stride + static_cast<int64_t>(h) * head_dim
                    : (io.k_out != nullptr ? io.k_out + t * io.k_out_stride + static_cast<int64_t>(kh) * head_dim
                                           : nullptr);
      float a[V], b[V];
      LoadF32<T, V>(src + i0, a);
      LoadF32<T, V>(src + half + i0, b);
#pragma unroll
      for (int j = 0; j < V; ++j) {
        const float c = table[i0 + j], s = table[half + i0 + j];
        const float x1 = fmaf(a[j], c, -(b[j] * s));
        const float x2 = fmaf(b[j], c, a[j] * s);
        a[j] = x1;
        b[j] = x2;
      }
      if (dst != nullptr) {
        StoreF32<T, V>(dst + i0, a);
        StoreF32<T, V>(dst + half + i0, b);
      }
      if constexpr (kWriteKv) {
        if (!is_q && cache_token >= 0) {
          C* cache = k_cache + cache_token + static_cast<int64_t>(kh) * block_tokens * head_dim;
          // The cache holds what k would hold: the rotated values rounded to T.
          float ra[V], rb[V];
#pragma unroll
          for (int j = 0; j < V; ++j) {
            ra[j] = ToF32(FromF32<T>(a[j]));
            rb[j] = ToF32(FromF32<T>(b[j]));
          }
          StoreF32<C, V>(cache + i0, ra);
          StoreF32<C, V>(cache + half + i0, rb);
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
          LoadF32<T, V>(io.v_in + t * io.v_stride + static_cast<int64_t>(h) * head_dim + i0, a);
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

// Whether the V-wide vector loads and stores fit every pointer and row of `io`.
template <typename T, typename C, int V>
bool VectorFits(const RopeIo<T>& io, int head_dim, const void* k_cache, const void* v_cache) {
  if ((head_dim / 2) % V != 0) return false;
  const auto fits = [](const void* p, int64_t stride) {
    return p == nullptr || (Aligned(p, 16) && (stride * static_cast<int64_t>(sizeof(T))) % 16 == 0);
  };
  return fits(io.q_in, io.q_in_stride) && fits(io.q_out, io.q_out_stride) && fits(io.k_in, io.k_in_stride) &&
         fits(io.k_out, io.k_out_stride) && fits(io.v_in, io.v_stride) &&
         (k_cache == nullptr || (Aligned(k_cache, V * sizeof(C)) && Aligned(v_cache, V * sizeof(C))));
}

template <typename T, typename C, bool kWriteKv>
Status LaunchRope(const RopeIo<T>& io, int64_t tokens, int num_heads, int num_kv_heads, int head_dim,
                  const int32_t* positions, const float* inv_freq, const int32_t* slots, int block_tokens,
                  void* k_cache, void* v_cache, cudaStream_t stream) {
  constexpr int V = kVec16<T>;
  const int heads = num_heads + (io.k_in != nullptr ? num_kv_heads : 0);
  const size_t smem = static_cast<size_t>(head_dim) * sizeof(float);
  C* kc = static_cast<C*>(k_cache);
  C* vc = static_cast<C*>(v_cache);
  if (VectorFits<T, C, V>(io, head_dim, k_cache, v_cache)) {
    LaunchKernel(RopeKernel<T, C, V, kWriteKv>, TokenBlocks(tokens), RopeThreads(heads, head_dim, V), smem, stream,
                 io, tokens, num_heads, num_kv_heads, head_dim, positions, inv_freq, slots, block_tokens, kc, vc);
  } else {
    LaunchKernel(RopeKernel<T, C, 1, kWriteKv>, TokenBlocks(tokens), RopeThreads(heads, head_dim, 1), smem, stream,
                 io, tokens, num_heads, num_kv_heads, head_dim, positions, inv_freq, slots, block_tokens, kc, vc);
  }
  FERRY_CUDA_RETURN_IF_LAUNCH_FAILED();
  return Status::Ok();
}

// RopeWriteKv over any RopeIo (the caches and slots are checked here).
Status RopeWriteKvIo(const char* what, auto make_io, int64_t tokens, int num_heads, int num_kv_heads, int head_dim,
                     const int32_t* positions, const float* inv_freq, const int32_t* slots, int block_tokens,
                     void* k_cache, void* v_cache, DType act, DType cache_dtype, cudaStream_t stream) {
  if (block_tokens <= 0) return InvalidArgument(std::string(what) + ": block_tokens must be positive");
  if (tokens == 0) return Status::Ok();
  if (slots == nullptr || k_cache == nullptr || v_cache == nullptr) return InvalidArgument(std::string(what) + ": null pointer");
  return DispatchAct(act, what, [&](auto act_tag) -> Status {
    using T = decltype(act_tag);
    const RopeIo<T> io = make_io(act_tag);
    return DispatchStorage(cache_dtype, what, [&](auto cache_tag) -> Status {
      using C = decltype(cache_tag);
      return LaunchRope<T, C, true>(io, tokens, num_heads, num_kv_heads, head_dim, positions, inv_freq, slots,
                                    block_tokens, k_cache, v_cache, stream);
    });
  });
}

}  // namespace

Status Rope(void* q, void* k, int64_t tokens, int num_heads, int num_kv_heads, int head_dim, const int32_t* positions,
            const float* inv_freq, DType act, cudaStream_t stream) {
  FERRY_RETURN_IF_ERROR(
      CheckRopeArgs("Rope", q, tokens, num_heads, num_kv_heads, head_dim, k != nullptr, positions, inv_freq));
  if (tokens == 0) return Status::Ok();
  return DispatchAct(act, "Rope", [&](auto tag) -> Status {
    using T = decltype(tag);
    RopeIo<T> io;
    io.q_in = io.q_out = static_cast<T*>(q);
    io.q_in_stride = io.q_out_stride = static_cast<int64_t>(num_heads) * head_dim;
    io.k_in = io.k_out = static_cast<T*>(k);
    io.k_in_stride = io.k_out_stride = static_cast<int64_t>(num_kv_heads) * head_dim;
    return LaunchRope<T, T, false>(io, tokens, num_heads, num_kv_heads, head_dim, positions, inv_freq, nullptr, 1,
                                   nullptr, nullptr, stream);
  });
}

Status RopeWriteKv(void* q, void* k, const void* v, int64_t tokens, int num_heads, int num_kv_heads, int head_dim,
                   const int32_t* positions, const float* inv_freq, const int32_t* slots, int block_tokens,
                   void* k_cache, void* v_cache, DType act, DType cache_dtype, cudaStream_t stream) {
  FERRY_RETURN_IF_ERROR(
      CheckRopeArgs("RopeWriteKv", q, tokens, num_heads, num_kv_heads, head_dim, true, positions, inv_freq));
  if (tokens > 0 && (k == nullptr || v == nullptr)) return InvalidArgument("RopeWriteKv: null pointer");
  auto make_io = [&](auto tag) {
    using T = decltype(tag);
    RopeIo<T> io;
    io.q_in = io.q_out = static_cast<T*>(q);
    io.q_in_stride = io.q_out_stride = static_cast<int64_t>(num_heads) * head_dim;
    io.k_in = io.k_out = static_cast<T*>(k);
    io.k_in_stride = io.k_out_stride = io.v_stride = static_cast<int64_t>(num_kv_heads) * head_dim;
    io.v_in = static_cast<const T*>(v);
    return io;
  };
  return RopeWriteKvIo("RopeWriteKv", make_io, tokens, num_heads, num_kv_heads, head_dim, positions, inv_freq, slots,
                       block_tokens, k_cache, v_cache, act, cache_dtype, stream);
}

Status RopeQkvWriteKv(const void* qkv, void* q_out, int64_t tokens, int num_heads, int num_kv_heads, int head_dim,
                      const int32_t* positions, const float* inv_freq, const int32_t* slots, int block_tokens,
                      void* k_cache, void* v_cache, DType act, DType cache_dtype, cudaStream_t stream) {
  FERRY_RETURN_IF_ERROR(
      CheckRopeArgs("RopeQkvWriteKv", qkv, tokens, num_heads, num_kv_heads, head_dim, true, positions, inv_freq));
  if (tokens > 0 && q_out == nullptr) return InvalidArgument("RopeQkvWriteKv: null pointer");
  const int64_t q_dim = static_cast<int64_t>(num_heads) * head_dim, kv_dim = static_cast<int64_t>(num_kv_heads) * head_dim;
  auto make_io = [&](auto tag) {
    using T = decltype(tag);
    const T* base = static_cast<const T*>(qkv);
    RopeIo<T> io;
    io.q_in = base;
    io.q_out = static_cast<T*>(q_out);
    io.q_in_stride = io.k_in_stride = io.v_stride = q_dim + 2 * kv_dim;
    io.q_out_stride = q_dim;
    io.k_in = base + q_dim;
    io.v_in = base + q_dim + kv_dim;
    return io;
  };
  return RopeWriteKvIo("RopeQkvWriteKv", make_io, tokens, num_heads, num_kv_heads, head_dim, positions, inv_freq,
                       slots, block_tokens, k_cache, v_cache, act, cache_dtype, stream);
}

}  // namespace ferry::cuda
