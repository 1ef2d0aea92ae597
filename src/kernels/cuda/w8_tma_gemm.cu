// 8-bit GEMMs past kW8MmaMaxM rows on Hopper's tensor memory accelerator (TMA): the tile
// kernel of w8_tile_gemm.cu (same operands, MMAs, epilogue arithmetic and bytes) with its
// operands moved by the copy engine and its warps specialized.
//
// The cp.async tile kernel is one warpgroup that copies, waits on a block barrier and
// multiplies in turn: every thread issues sixteen 16-byte copies a stage, the MMAs of a stage
// finish before the next stage is awaited, and at 400-800 tera-ops/s it ran at a fifth to
// two-fifths of the tensor cores' int8 rate (docs/performance.md). Here a block is
//   - one producer warp, whose first lane asks the TMA unit for each stage's weight tile (128
//     channels x 128 K-bytes) and token tile (128 or 256 tokens x 128 K-bytes), both in the
//     tensor cores' 128-byte swizzle (the copy engine writes it), rows past the matrix
//     zero-filled by the engine, and counts the stage's bytes on the stage's "full" mbarrier;
//   - two consumer warpgroups, each owning 64 of the 128 channels against all the block's
//     tokens (wgmma m64n128k32 or m64n256k32): each waits on a stage's full barrier, issues its four MMAs, keeps
//     them in flight while it waits for the next stage, and releases a stage (its "empty"
//     mbarrier) once the MMAs that read it have finished; the producer refills a stage when
//     both warpgroups have released it.
// No thread waits on a block-wide barrier in the K loop, and the copies cost one instruction
// a tile. The epilogue is the cp.async kernel's: the block's scales and bias staged in shared
// memory before the loop, acc * row_scale * col_scale + bias (ScaleAndBias) and the
// activation in registers, the finished tile written through shared memory (the stages' room)
// in 16-byte vectors along the output rows.
//
// Each warpgroup issues the same wgmma instructions on the same shared-memory tiles in the same
// K order as the cp.async kernel, so the two give the same bytes (int8: the exact accumulator;
// e4m3: the tensor cores' accumulation in one order), which CudaGemm tests require.
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_fp8.h>

#include <atomic>
#include <cstdlib>
#include <string>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/w8_wgmma.cuh"

namespace ferry::cuda::gemm_kernels::w8_internal {

namespace {

using kernels_internal::DispatchAct;

constexpr int kConsumers = 2;                                   // warpgroups, 64 channels each
constexpr int kConsumerThreads = kConsumers * kThreads;
constexpr int kTmaThreads = kConsumerThreads + 32;  // + the producer warp
constexpr int kWeightTileBytes = kBn * kBk;  // 16 KB
// A stage: the weight tile and kTok tokens' tile (multiples of 1024 bytes).
template <int kTok>
constexpr int StageBytes() {
  return kWeightTileBytes + kTok * kBk;
}
template <int kTok>
constexpr int ScaleBytes() {
  return (kTok + 2 * kBn) * 4;
}
template <int kTok, int kStages>
constexpr int SharedBytes() {
  // The stages, the scales and bias, a full and an empty mbarrier a stage, 1024 to align.
  return kStages * StageBytes<kTok>() + ScaleBytes<kTok>() + 2 * kStages * 8 + 1024;
}

#if defined(FERRY_W8_WGMMA)
// A barrier of the two consumer warpgroups only (the producer warp does not take part).
__device__ __forceinline__ void ConsumersSync() {
  asm volatile("bar.sync 1, %0;" ::"n"(kConsumerThreads) : "memory");
}
#endif

template <bool kInt8, typename Out, int kTokens, int kStages, int kMinBlocks>
__global__ void __launch_bounds__(kTmaThreads, kMinBlocks)
    W8TmaKernel(const __grid_constant__ CUtensorMap w_map, const __grid_constant__ CUtensorMap x_map, Params p,
                BiasRef<Out> bias, Out* __restrict__ y) {
#if defined(FERRY_W8_WGMMA)
  using AccT = typename Acc<kInt8>::T;
  constexpr int kRegs = kTokens / 2;  // one m64 x kTokens accumulator a thread
  constexpr int kStageBytes = StageBytes<kTokens>();
  constexpr int kScaleBytes = ScaleBytes<kTokens>();
  extern __shared__ uint8_t smem_raw[];
  const uint32_t raw_addr = static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw));
  const uint32_t smem_base = (raw_addr + 1023u) & ~1023u;
  uint8_t* const smem = smem_raw + (smem_base - raw_addr);
  constexpr int kStagesBytes = kStages * kStageBytes;
  float* const row_scales = reinterpret_cast<float*>(smem + kStagesBytes);
  float* const col_scales = row_scales + kTokens;
  float* const col_bias = col_scales + kBn;
  const uint32_t full0 = smem_base + kStagesBytes + kScaleBytes;  // full[s] at full0 + 8 s
  const uint32_t empty0 = full0 + 8 * kStages;
  const int tid = threadIdx.x;
  const int64_t m0 = static_cast<int64_t>(blockIdx.x) * kTokens;
  const int64_t n0 = static_cast<int64_t>(blockIdx.y) * kBn;
  const int k_tiles = static_cast<int>(p.k / kBk);

  if (tid == 0) {
#pragma unroll
    for (int s = 0; s < kStages; ++s) {
      BarrierInit(full0 + 8 * s, 1);
      BarrierInit(empty0 + 8 * s, kConsumerThreads);
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();

  if (tid >= kConsumerThreads) {
    // The producer warp. Weights are constant: the first stages' weight tiles are asked for
    // before the kernel ahead of this one has finished (programmatic dependent launch).
    if (tid == kConsumerThreads) {
      asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<uint64_t>(&w_map)) : "memory");
      asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<uint64_t>(&x_map)) : "memory");
      const int first = k_tiles < kStages ? k_tiles : kStages;
      for (int t = 0; t < first; ++t) {
        const uint32_t stage = smem_base + t * kStageBytes;
        BarrierExpectBytes(full0 + 8 * t, kStageBytes);
        TmaLoad(stage, &w_map, t * kBk, static_cast<int>(n0), full0 + 8 * t);
      }
      AwaitPriorGrids();
      for (int t = 0; t < first; ++t) {
        TmaLoad(smem_base + t * kStageBytes + kWeightTileBytes, &x_map, t * kBk, static_cast<int>(m0), full0 + 8 * t);
      }
      for (int t = kStages; t < k_tiles; ++t) {
        const int s = t % kStages;
        // Both warpgroups have released the stage's previous tiles (use t / kStages - 1).
        BarrierWait(empty0 + 8 * s, static_cast<uint32_t>((t / kStages + 1) & 1));
        const uint32_t stage = smem_base + s * kStageBytes;
        BarrierExpectBytes(full0 + 8 * s, kStageBytes);
        TmaLoad(stage, &w_map, t * kBk, static_cast<int>(n0), full0 + 8 * s);
        TmaLoad(stage + kWeightTileBytes, &x_map, t * kBk, static_cast<int>(m0), full0 + 8 * s);
      }
    } else {
      AwaitPriorGrids();
    }
    return;
  }

  // A consumer: warpgroup wg owns channels wg * 64 .. wg * 64 + 63 of the block's 128.
  const int wg = tid / kThreads;
  for (int c = tid; c < kBn; c += kConsumerThreads) {
    const int64_t col = n0 + c;
    col_scales[c] = col < p.n ? ColScale(p, col) : 0.0f;
    col_bias[c] = col < p.n ? bias.At(col) : 0.0f;
  }
  AwaitPriorGrids();
  for (int r = tid; r < kTokens; r += kConsumerThreads) row_scales[r] = m0 + r < p.m ? RowScale(p, m0 + r) : 0.0f;

  AccT acc[kRegs];
#pragma unroll
  for (int r = 0; r < kRegs; ++r) acc[r] = AccT(0);

  for (int t = 0; t < k_tiles; ++t) {
    const int s = t % kStages;
    BarrierWait(full0 + 8 * s, static_cast<uint32_t>((t / kStages) & 1));
    const uint32_t stage = smem_base + s * kStageBytes;
    const uint64_t wd = Descriptor(stage), xd = Descriptor(stage + kWeightTileBytes);
    WgmmaFence();
#pragma unroll
    for (int kk = 0; kk < kBk / 32; ++kk) {
      Wgmma<kInt8, kTokens>::Run(acc, DescriptorPlus(wd, wg * 64 * kBk + kk * 32), DescriptorPlus(xd, kk * 32));
    }
    WgmmaCommit();
    // This stage's MMAs stay in flight; the previous stage's have finished, so it is released.
    WgmmaWait<1>();
    if (t > 0) BarrierArrive(empty0 + 8 * ((t - 1) % kStages));
  }
  WgmmaWait<0>();
  // Both warpgroups are done reading the stages (they share the token tiles), and every copy
  // has landed: the finished tile takes the stages' place.
  ConsumersSync();
  FenceToAsyncProxy();

  Out* const tile = reinterpret_cast<Out*>(smem);
  StageM64(tile, acc, wg * 64, row_scales, col_scales, col_bias, p.act, tid);
  ConsumersSync();
  StoreTile<Out, kTokens, kConsumerThreads>(tile, p, y, m0, n0, tid);
#else
  (void)w_map, (void)x_map, (void)p, (void)bias, (void)y;
  __trap();  // LtGemm runs this kernel only on compute capability 9.0 (sm_90a code)
#endif
}

template <bool kInt8, typename Out, int kTokens, int kStages, int kMinBlocks>
Status LaunchTma(const Params& p, const void* bias, DType bias_dtype, void* y, cudaStream_t stream) {
  const auto kernel = W8TmaKernel<kInt8, Out, kTokens, kStages, kMinBlocks>;
  constexpr int kSmem = SharedBytes<kTokens, kStages>();
  static const cudaError_t attr = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem);
  FERRY_CUDA_RETURN_IF_ERROR(attr);
  const int64_t token_tiles = (p.m + kTokens - 1) / kTokens;
  const int64_t channel_tiles = (p.n + kBn - 1) / kBn;
  if (token_tiles > 0x7fffffff || channel_tiles > 65535 || p.m > 0x7fffffff || p.n > 0x7fffffff ||
      p.k > 0x7fffffff) {
    return InvalidArgument("8-bit tensor-core GEMM: too large");
  }
  CUtensorMap w_map, x_map;
  FERRY_RETURN_IF_ERROR(EncodeOperand(p.w, p.n, p.k, p.k, kBn, &w_map));
  FERRY_RETURN_IF_ERROR(EncodeOperand(p.x, p.m, p.k, p.ldx, kTokens, &x_map));
  LaunchKernel(kernel, dim3(static_cast<unsigned>(token_tiles), static_cast<unsigned>(channel_tiles)),
               dim3(kTmaThreads), kSmem, stream, w_map, x_map, p, MakeBias<Out>(bias, bias_dtype),
               static_cast<Out*>(y));
  FERRY_CUDA_RETURN_IF_LAUNCH_FAILED();
  return Status::Ok();
}

// cuTensorMapEncodeTiled from the driver, found once through the runtime (ferry does not link
// the driver library).
PFN_cuTensorMapEncodeTiled_v12000 EncodeTiled() {
  static const PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult found{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &found) !=
            cudaSuccess ||
        found != cudaDriverEntryPointSuccess) {
      (void)cudaGetLastError();
      f = nullptr;
    }
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(f);
  }();
  return fn;
}
}  // namespace

Status EncodeOperand(const uint8_t* base, int64_t rows, int64_t cols, int64_t ld, int box_rows, CUtensorMap* map) {
  const PFN_cuTensorMapEncodeTiled_v12000 encode = EncodeTiled();
  if (encode == nullptr) return Internal("8-bit TMA GEMM: the driver has no cuTensorMapEncodeTiled");
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(cols), static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(ld)};
  const cuuint32_t box[2] = {static_cast<cuuint32_t>(kBk), static_cast<cuuint32_t>(box_rows)};
  const cuuint32_t element_strides[2] = {1, 1};
  const CUresult r = encode(map, CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, const_cast<uint8_t*>(base), dims, strides, box,
                            element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                            CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) return Internal("8-bit TMA GEMM: cuTensorMapEncodeTiled failed (" + std::to_string(r) + ")");
  return Status::Ok();
}

Status W8TileTma(int variant, bool int8, const Params& p, const void* bias, DType bias_dtype, void* y, DType y_dtype,
                 cudaStream_t stream) {
  return DispatchAct(y_dtype, "8-bit tensor-core GEMM output", [&](auto tag) -> Status {
    using Out = decltype(tag);
    switch (variant) {
      case 2:
        return int8 ? LaunchTma<true, Out, 128, 6, 1>(p, bias, bias_dtype, y, stream)
                    : LaunchTma<false, Out, 128, 6, 1>(p, bias, bias_dtype, y, stream);
      case 3:
        return int8 ? LaunchTma<true, Out, 256, 4, 1>(p, bias, bias_dtype, y, stream)
                    : LaunchTma<false, Out, 256, 4, 1>(p, bias, bias_dtype, y, stream);
      default:
        return int8 ? LaunchTma<true, Out, 128, 3, 2>(p, bias, bias_dtype, y, stream)
                    : LaunchTma<false, Out, 128, 3, 2>(p, bias, bias_dtype, y, stream);
    }
  });
}

}  // namespace ferry::cuda::gemm_kernels::w8_internal

namespace ferry::cuda::gemm_kernels {

namespace {
std::atomic<int> tile_variant_override{-2};
}  // namespace

int W8TileKernelVariant() {
  const int forced = tile_variant_override.load(std::memory_order_relaxed);
  if (forced >= -1) return forced;
  static const int from_env = [] {
    const char* v = std::getenv("FERRY_W8_TILE_KERNEL");
    if (v == nullptr || *v == '\0') return -1;
    const int n = std::atoi(v);
    return n >= 0 && n <= 3 ? n : -1;
  }();
  return from_env;
}

void SetW8TileKernelVariant(int variant) { tile_variant_override.store(variant, std::memory_order_relaxed); }

}  // namespace ferry::cuda::gemm_kernels
