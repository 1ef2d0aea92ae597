// 8-bit GEMMs past kW8MmaMaxM rows (prefill chunks, encoder batches): y[M, N] = act(x[M, K] .
// W^T * x_scale[m] * w_scale[n] + bias), x and W both e4m3 or both int8, on Hopper's wgmma.
// cuBLASLt's IMMA kernels write a W8A8 GEMM's int32 accumulator to memory and a second pass
// scales it; here the accumulator stays in registers (see W8TileKernel).
#include <cuda_fp8.h>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/w8_wgmma.cuh"

namespace ferry::cuda::gemm_kernels::w8_internal {

namespace {

using kernels_internal::DispatchAct;

// The decode kernel's operands, MMA and epilogue arithmetic, with the tokens tiled across the
// grid instead of one tile of up to 64: a block owns 128 output channels (two m64 tiles) and 128
// tokens (one warpgroup, wgmma N = 128), K whole (no split: these problems have blocks enough),
// three stages of 32 KB, two blocks a multiprocessor. Blocks run token tiles fastest, so the blocks
// resident at once share a few channel tiles and each weight byte comes from HBM about once. The
// block's token scales, channel scales and bias go to shared memory first, so that the epilogue
// does not wait on global loads value by value. The epilogue stages the finished tile in shared
// memory (rows of tokens, padded so that the accumulator layout's stores do not collide) and
// writes it out in 16-byte vectors along the output rows. Each stage's MMAs finish before the
// next stage is waited for: keeping one stage's MMAs in flight (four stages, wgmma wait_group 1),
// and two warpgroups over 256 tokens sharing the weight tile, measured no faster on an H100
// (docs/performance.md).
constexpr int kTokens = 128;
constexpr int kStages = 3;
constexpr int kStageBytes = kBn * kBk + kTokens * kBk;
constexpr int kStagesBytes = kStages * kStageBytes;
// + the token scales, channel scales and bias (f32), + room to align the base to 1024 bytes.
constexpr int kTileSharedBytes = kStagesBytes + (kTokens + 2 * kBn) * 4 + 1024;

template <bool kInt8, typename Out>
__global__ void __launch_bounds__(kThreads, 2) W8TileKernel(Params p, BiasRef<Out> bias, Out* __restrict__ y) {
#if defined(FERRY_W8_WGMMA)
  using AccT = typename Acc<kInt8>::T;
  constexpr int kRegs = kTokens / 2;
  extern __shared__ uint8_t smem_raw[];
  const uint32_t raw_addr = static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw));
  const uint32_t smem_base = (raw_addr + 1023u) & ~1023u;
  uint8_t* const smem = smem_raw + (smem_base - raw_addr);
  float* const row_scales = reinterpret_cast<float*>(smem + kStagesBytes);
  float* const col_scales = row_scales + kTokens;
  float* const col_bias = col_scales + kBn;
  const int tid = threadIdx.x;
  const int64_t m0 = static_cast<int64_t>(blockIdx.x) * kTokens;
  const int64_t n0 = static_cast<int64_t>(blockIdx.y) * kBn;
  const int k_tiles = static_cast<int>(p.k / kBk);

  const TileCopy<kBn> w_copy(p.w, p.k, n0, p.n, 0, tid);
  const TileCopy<kTokens> x_copy(p.x, p.ldx, m0, p.m, 0, tid);
  const auto load_w = [&](int t) {
    w_copy.Load(smem_base + (t % kStages) * kStageBytes, static_cast<int64_t>(t) * kBk);
  };
  const auto load_x = [&](int t) {
    x_copy.Load(smem_base + (t % kStages) * kStageBytes + kBn * kBk, static_cast<int64_t>(t) * kBk);
  };
  const auto mma = [&](AccT (&acc)[2][kRegs], int t) {
    const uint32_t ws = smem_base + (t % kStages) * kStageBytes;
    const uint64_t wd = Descriptor(ws), xd = Descriptor(ws + kBn * kBk);
    WgmmaFence();
#pragma unroll
    for (int kk = 0; kk < kBk / 32; ++kk) {
#pragma unroll
      for (int mt = 0; mt < 2; ++mt) {
        Wgmma<kInt8, kTokens>::Run(acc[mt], DescriptorPlus(wd, mt * 64 * kBk + kk * 32), DescriptorPlus(xd, kk * 32));
      }
    }
    WgmmaCommit();
  };

  // Stages in flight ahead of the one being multiplied.
  constexpr int kAhead = kStages - 1;
#pragma unroll
  for (int t = 0; t < kAhead; ++t) {
    if (t < k_tiles) load_w(t);
  }
  for (int c = tid; c < kBn; c += kThreads) {
    const int64_t col = n0 + c;
    col_scales[c] = col < p.n ? ColScale(p, col) : 0.0f;
    col_bias[c] = col < p.n ? bias.At(col) : 0.0f;
  }
  AwaitPriorGrids();
  for (int r = tid; r < kTokens; r += kThreads) row_scales[r] = m0 + r < p.m ? RowScale(p, m0 + r) : 0.0f;
#pragma unroll
  for (int t = 0; t < kAhead; ++t) {
    if (t < k_tiles) load_x(t);
    CpAsyncCommit();
  }

  AccT acc[2][kRegs];
#pragma unroll
  for (int mt = 0; mt < 2; ++mt) {
#pragma unroll
    for (int r = 0; r < kRegs; ++r) acc[mt][r] = AccT(0);
  }

  for (int t = 0; t < k_tiles; ++t) {
    CpAsyncWait<kAhead - 1>();
    FenceToAsyncProxy();
    // Stage t is in shared memory for every thread, and every warp has finished stage t - 1's
    // MMAs, so that slot can take stage t + kStages - 1.
    __syncthreads();
    if (t + kAhead < k_tiles) {
      load_w(t + kAhead);
      load_x(t + kAhead);
    }
    CpAsyncCommit();
    mma(acc, t);
    WgmmaWaitAll();
  }
  CpAsyncWait<0>();
  __syncthreads();  // every warp is done with the stages: the tile takes their place

  Out* const tile = reinterpret_cast<Out*>(smem);
#pragma unroll
  for (int mt = 0; mt < 2; ++mt) {
    StageM64(tile, acc[mt], mt * 64, row_scales, col_scales, col_bias, p.act, tid);
  }
  __syncthreads();
  StoreTile<Out, kTokens, kThreads>(tile, p, y, m0, n0, tid);
#else
  (void)p, (void)bias, (void)y;
  __trap();  // LtGemm runs this kernel only on compute capability 9.0 (sm_90a code)
#endif
}

template <bool kInt8, typename Out>
Status LaunchTiles(const Params& p, const void* bias, DType bias_dtype, void* y, cudaStream_t stream) {
  const auto kernel = W8TileKernel<kInt8, Out>;
  static const cudaError_t attr =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kTileSharedBytes);
  FERRY_CUDA_RETURN_IF_ERROR(attr);
  const int64_t token_tiles = (p.m + kTokens - 1) / kTokens;
  const int64_t channel_tiles = (p.n + kBn - 1) / kBn;
  if (token_tiles > 0x7fffffff || channel_tiles > 65535) return InvalidArgument("8-bit tensor-core GEMM: too large");
  LaunchKernel(kernel, dim3(static_cast<unsigned>(token_tiles), static_cast<unsigned>(channel_tiles)),
               dim3(kThreads), kTileSharedBytes, stream, p, MakeBias<Out>(bias, bias_dtype), static_cast<Out*>(y));
  FERRY_CUDA_RETURN_IF_LAUNCH_FAILED();
  return Status::Ok();
}

}  // namespace

Status W8Tile(bool int8, const Params& p, const void* bias, DType bias_dtype, void* y, DType y_dtype,
              cudaStream_t stream, bool wide_tile) {
  int variant = W8TileKernelVariant();
  if (variant < 0) variant = wide_tile ? 3 : 1;
  if (variant >= 1) return W8TileTma(variant, int8, p, bias, bias_dtype, y, y_dtype, stream);
  return DispatchAct(y_dtype, "8-bit tensor-core GEMM output", [&](auto tag) -> Status {
    using Out = decltype(tag);
    return int8 ? LaunchTiles<true, Out>(p, bias, bias_dtype, y, stream)
                : LaunchTiles<false, Out>(p, bias, bias_dtype, y, stream);
  });
}

}  // namespace ferry::cuda::gemm_kernels::w8_internal
