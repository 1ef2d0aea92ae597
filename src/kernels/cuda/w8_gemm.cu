// 8-bit GEMMs for decode batches (M <= kW8MmaMaxM): y[M, N] = act(x[M, K] . W^T * x_scale[m] *
// w_scale[n] + bias), with x and W both e4m3 (an fp8 linear) or both int8 (W8A8), x quantized
// per token and W per output channel, as LtGemm's kFp8 and kInt8 problems store them.
//
// Why a kernel of its own: at 1 to 16 rows (where the tuner offers it) a GEMM reads its weight
// once and does 2 to 32 flops per weight byte, so it is bound by the weight's bytes. cuBLASLt's fp8 kernels with per-row and
// per-column scales (one 128 x 128 tile on an H200) moved an 8B layer's weights at about 2.6 TB/s
// at 32 rows; its IMMA kernels add a pass for the int32 accumulator.
//
// The shape of the kernel (Hopper only: wgmma, compiled for sm_90a):
//   - The weight is the MMA's A side (64 output channels an instruction) and the tokens the N
//     side (8, 16, 32 or 64, the batch rounded up), so a decode batch wastes nothing in M.
//     wgmma m64nNk32 with both operands in shared memory: e4m3 into f32 (the tensor cores' own
//     accumulator over the whole K, what fp8 engines' fast accumulation asks of cuBLASLt), s8
//     into s32 (exact).
//   - A block is one warpgroup that owns 128 output channels (two m64 tiles) and a range of K.
//     Weight and activation tiles of 128 K-bytes (one 128-byte swizzle atom wide) stream into
//     shared memory through cp.async, three or four stages (Stages()), so that three blocks fit a
//     multiprocessor with 32 to 48 KB of weight loads in flight each. The first stages' weights
//     are requested before the block waits for the kernel ahead of it (programmatic dependent
//     launch): weights are constant.
//   - Tiles are stored in the tensor cores' 128-byte swizzle (16-byte chunk c of row r at chunk
//     c ^ (r % 8)), so the descriptors address them directly; cp.async writes through the
//     generic proxy, so each thread fences to the async proxy before the stage's barrier.
//   - When the output tiles alone would leave multiprocessors idle (N / 128 blocks under two a
//     multiprocessor), K is split across the blocks of a thread-block cluster (up to 8, and no
//     more than lets every cluster be resident at once). Each
//     block leaves its partial tile in its shared memory; after a cluster barrier every block
//     sums an equal share of the tile over all of them (distributed shared memory, in split
//     order, so the result does not depend on timing) and stores it. int8 partials stay int32,
//     so an int8 result is the exact accumulator whatever the split.
//   - Epilogue in registers: acc * x_scale[m] * w_scale[n] + bias, then the activation, in the
//     same float operations as LtGemm's scale epilogue pass.
#include <cooperative_groups.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/w8_wgmma.cuh"

namespace ferry::cuda::gemm_kernels {

using namespace w8_internal;  // NOLINT(google-build-using-namespace): the file is built from those pieces

namespace {

using kernels_internal::DispatchAct;

// Blocks a problem should fill before K is split: two resident per multiprocessor of an H200
// (132 SMs; a block takes up to 97 KB of shared memory). Only the speed depends on it.
constexpr int64_t kTargetBlocks = 264;
constexpr int64_t kMinStagesPerSplit = 2;
constexpr int64_t kMaxSplits = 8;  // the portable cluster size
// A problem of at least 7/8 of a tile per multiprocessor is not split. llama-3.2-1B's gate_up
// (128 tiles, 16 K stages) ran in two splits of 8 stages: unsplit, the 1B linears in sequence
// took 1.05-1.13x less time at 1-64 rows on an H100 (gate_up alone 1.06-1.33x; deeper pipelines
// for the unsplit tiles, which leave room for fewer blocks of the next kernel, were slower in
// sequence). No llama-3-8B linear has a tile count in between (bench/results/cuda/w8-splits/).
constexpr int64_t kUnsplitTiles = kTargetBlocks / 2 * 7 / 8;

// Tokens (the wgmma's N) for m rows: 8, 16, 32 or 64.
int TokenTile(int64_t m) { return m <= 8 ? 8 : m <= 16 ? 16 : m <= 32 ? 32 : 64; }

// Stages in shared memory: four for up to 16 tokens (17-18 KB a stage, three blocks a
// multiprocessor), three past that (20-24 KB a stage), so that three blocks still fit: with two,
// the clusters of a split problem did not all fit at once and ran in a second wave.
template <int kNt>
constexpr int Stages() {
  return kNt <= 16 ? 4 : 3;
}
template <int kNt>
constexpr int StageBytes() {
  return kBn * kBk + kNt * kBk;  // both multiples of 1024, so every tile stays atom-aligned
}
template <int kNt, int kStages>
constexpr int SharedBytes() {
  return kStages * StageBytes<kNt>() + 1024;  // + room to align the base to 1024 bytes
}

struct Split {
  int64_t splits = 1;
  int64_t stages_per_split = 0;
};

// max_splits: the most the cluster occupancy allows for this many tiles.
Split SplitsFor(int64_t n, int64_t k, int64_t max_splits) {
  const int64_t tiles = (n + kBn - 1) / kBn;
  if (tiles >= kUnsplitTiles) max_splits = 1;
  const int64_t k_tiles = k / kBk;
  Split s;
  s.splits = std::clamp<int64_t>(kTargetBlocks / tiles, 1,
                                 std::clamp<int64_t>(k_tiles / kMinStagesPerSplit, 1, max_splits));
  s.stages_per_split = (k_tiles + s.splits - 1) / s.splits;
  s.splits = (k_tiles + s.stages_per_split - 1) / s.stages_per_split;  // drop splits the rounding left empty
  return s;
}


#if defined(FERRY_W8_WGMMA)
// The decode kernels' epilogue: the block's two m64 x kNt accumulators (tile `blockIdx.x`, channels
// from n0) finished and stored, or, for split K, left as a partial tile in shared memory (smem,
// the stages' room) and summed across the cluster. Every thread of the block calls it (the split
// path waits on block and cluster barriers); `worker` threads (ids below kThreads, the one
// warpgroup that holds the accumulators) do the work.
template <bool kInt8, int kNt, typename Out>
__device__ __forceinline__ void FinishDecodeTile(const Params& p, const BiasRef<Out>& bias, Out* __restrict__ y,
                                                 const typename Acc<kInt8>::T (&acc)[2][kNt / 2], uint8_t* smem,
                                                 int64_t n0, int tid, bool worker) {
  using AccT = typename Acc<kInt8>::T;
  constexpr int kRegs = kNt / 2;
  // Accumulator register i of m64 tile mt of thread `from` holds channel mt * 64 + 16 * warp + g
  // (+ 8 for i % 4 >= 2) and token 8 * (i / 4) + 2 * tq (+ 1 for odd i).
  const auto store = [&](int from, int mt, int i, AccT value) {
    const int from_lane = from & 31;
    const int64_t col = n0 + mt * 64 + (from >> 5) * 16 + (from_lane >> 2) + ((i & 2) != 0 ? 8 : 0);
    const int64_t row = 8 * (i / 4) + 2 * (from_lane & 3) + (i & 1);
    if (col >= p.n || row >= p.m) return;
    y[row * p.ldy + col] = Finish(p, bias, row, col, value);
  };

  if (p.splits == 1) {
    if (!worker) return;
    // This thread's outputs span 4 channels and kNt / 4 tokens: their scales and biases are read
    // once, and each output is the scale epilogue's float operations and one store.
    const int lane = tid & 31;
    float col_scale[2][2], col_bias[2][2];
    bool col_ok[2][2];
#pragma unroll
    for (int mt = 0; mt < 2; ++mt) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int64_t col = n0 + mt * 64 + (tid >> 5) * 16 + (lane >> 2) + 8 * h;
        col_ok[mt][h] = col < p.n;
        col_scale[mt][h] = col_ok[mt][h] ? ColScale(p, col) : 0.0f;
        col_bias[mt][h] = col_ok[mt][h] ? bias.At(col) : 0.0f;
      }
    }
    float row_scale[kNt / 8][2];
#pragma unroll
    for (int j = 0; j < kNt / 8; ++j) {
#pragma unroll
      for (int b = 0; b < 2; ++b) {
        const int64_t row = 8 * j + 2 * (lane & 3) + b;
        row_scale[j][b] = row < p.m ? RowScale(p, row) : 0.0f;
      }
    }
#pragma unroll
    for (int mt = 0; mt < 2; ++mt) {
#pragma unroll
      for (int i = 0; i < kRegs; ++i) {
        const int j = i / 4, b = i & 1, h = (i >> 1) & 1;
        const int64_t row = 8 * j + 2 * (lane & 3) + b;
        if (!col_ok[mt][h] || row >= p.m) continue;
        const int64_t col = n0 + mt * 64 + (tid >> 5) * 16 + (lane >> 2) + 8 * h;
        y[row * p.ldy + col] =
            FinishScaled<Out>(acc[mt][i], row_scale[j][b], col_scale[mt][h], col_bias[mt][h], p.act);
      }
    }
    return;
  }

  // Split K: partial tiles in shared memory ([vector][thread], four accumulators a vector), then
  // each block of the cluster sums its share of the vectors over every block, in rank order.
  namespace cg = cooperative_groups;
  cg::cluster_group cluster = cg::this_cluster();
  constexpr int kVecs = 2 * kRegs / 4;
  __syncthreads();  // every warp's MMAs have finished reading the stages
  float4* const partial = reinterpret_cast<float4*>(smem);
  if (worker) {
#pragma unroll
    for (int v = 0; v < kVecs; ++v) {
      float4 q;
      memcpy(&q, &acc[(v * 4) / kRegs][(v * 4) % kRegs], sizeof(q));
      partial[v * kThreads + tid] = q;
    }
  }
  cluster.sync();
  const int splits = static_cast<int>(p.splits);
  const int rank = static_cast<int>(cluster.block_rank());
  constexpr int kTotal = kVecs * kThreads;
  const int share = (kTotal + splits - 1) / splits;
  const int end = min(kTotal, (rank + 1) * share);
  for (int f = rank * share + tid; worker && f < end; f += kThreads) {
    AccT sum[4] = {AccT(0), AccT(0), AccT(0), AccT(0)};
    for (int s = 0; s < splits; ++s) {
      const float4 q = cluster.map_shared_rank(partial, s)[f];
      AccT part[4];
      memcpy(part, &q, sizeof(q));
#pragma unroll
      for (int e = 0; e < 4; ++e) sum[e] += part[e];
    }
    const int v = f / kThreads, from = f % kThreads;
#pragma unroll
    for (int e = 0; e < 4; ++e) store(from, (v * 4 + e) / kRegs, (v * 4 + e) % kRegs, sum[e]);
  }
  cluster.sync();  // the other blocks have finished reading this block's partial tile
}
#endif

template <bool kInt8, int kNt, int kStages, typename Out>
__global__ void __launch_bounds__(kThreads) W8MmaKernel(Params p, BiasRef<Out> bias, Out* __restrict__ y) {
#if defined(FERRY_W8_WGMMA)
  constexpr int kStage = StageBytes<kNt>();
  using AccT = typename Acc<kInt8>::T;
  constexpr int kRegs = kNt / 2;  // accumulators per thread per m64 tile
  extern __shared__ uint8_t smem_raw[];
  const uint32_t raw_addr = static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw));
  const uint32_t smem_base = (raw_addr + 1023u) & ~1023u;
  uint8_t* const smem = smem_raw + (smem_base - raw_addr);
  const int tid = threadIdx.x;
  const int64_t tile = blockIdx.x;
  const int64_t n0 = tile * kBn;
  const int64_t k_begin = static_cast<int64_t>(blockIdx.y) * p.stages_per_split * kBk;
  const int64_t k_end = min(p.k, k_begin + p.stages_per_split * kBk);
  const int k_tiles = static_cast<int>((k_end - k_begin) / kBk);

  const TileCopy<kBn> w_copy(p.w, p.k, n0, p.n, k_begin, tid);
  const TileCopy<kNt> x_copy(p.x, p.ldx, 0, p.m, k_begin, tid);
  // Stage t's copies into the slot at byte offset `slot` (t < k_tiles).
  const auto load_w = [&](uint32_t slot, int t) { w_copy.Load(smem_base + slot, static_cast<int64_t>(t) * kBk); };
  const auto load_x = [&](uint32_t slot, int t) {
    x_copy.Load(smem_base + slot + kBn * kBk, static_cast<int64_t>(t) * kBk);
  };

  // Weights are constant: the first stages' loads go out before the wait for earlier kernels.
#pragma unroll
  for (int t = 0; t < kStages - 1; ++t) {
    if (t < k_tiles) load_w(t * kStage, t);
  }
  AwaitPriorGrids();
#pragma unroll
  for (int t = 0; t < kStages - 1; ++t) {
    if (t < k_tiles) load_x(t * kStage, t);
    CpAsyncCommit();
  }

  AccT acc[2][kRegs];
#pragma unroll
  for (int mt = 0; mt < 2; ++mt) {
#pragma unroll
    for (int r = 0; r < kRegs; ++r) acc[mt][r] = AccT(0);
  }

  // read: the slot of stage t; write: the slot of stage t + kStages - 1 (the one stage t - 1 used).
  uint32_t read = 0, write = (kStages - 1) * kStage;
  for (int t = 0; t < k_tiles; ++t) {
    CpAsyncWait<kStages - 2>();
    FenceToAsyncProxy();
    // Stage t is in shared memory for every thread, and every warp has finished stage t - 1's
    // MMAs (each waited for its group), so that slot can take stage t + kStages - 1.
    __syncthreads();
    if (t + kStages - 1 < k_tiles) {
      load_w(write, t + kStages - 1);
      load_x(write, t + kStages - 1);
    }
    CpAsyncCommit();
    const uint64_t wd = Descriptor(smem_base + read), xd = Descriptor(smem_base + read + kBn * kBk);
    WgmmaFence();
#pragma unroll
    for (int kk = 0; kk < kBk / 32; ++kk) {
#pragma unroll
      for (int mt = 0; mt < 2; ++mt) {
        Wgmma<kInt8, kNt>::Run(acc[mt], DescriptorPlus(wd, mt * 64 * kBk + kk * 32), DescriptorPlus(xd, kk * 32));
      }
    }
    WgmmaCommit();
    WgmmaWaitAll();
    read = read == (kStages - 1) * kStage ? 0 : read + kStage;
    write = write == (kStages - 1) * kStage ? 0 : write + kStage;
  }
  CpAsyncWait<0>();

  FinishDecodeTile<kInt8, kNt, Out>(p, bias, y, acc, smem, n0, tid, /*worker=*/true);
#else
  (void)p, (void)bias, (void)y;
  __trap();  // LtGemm runs this kernel only on compute capability 9.0 (sm_90a code)
#endif
}

// The decode kernel with its operands moved by the tensor memory accelerator: the same block
// (one warpgroup, 128 channels as two m64 tiles, tokens as N), the same MMAs on the same
// swizzled tiles in the same K order, and the same epilogue, plus one producer warp. Its first
// lane asks the copy engine for each stage's weight tile (128 channels x 128 K-bytes) and token
// tile (kNt tokens; rows past the batch zero-filled by the engine) and counts the stage's bytes
// on the stage's "full" mbarrier; the warpgroup waits on it, keeps the stage's MMAs in flight
// while it waits for the next, and releases a stage on its "empty" mbarrier once the MMAs that
// read it have finished. Every stage is in flight while the warpgroup works (the cp.async
// kernel keeps kStages - 1, and its warps spent a third of their cycles waiting on copies they
// had issued themselves, docs/performance.md), the copies cost one instruction a tile, and no
// block barrier is left in the K loop.
constexpr int kDecodeTmaThreads = kThreads + 32;

// Stages of the TMA decode kernel: sized so that two blocks fit a multiprocessor (the split
// rule's target) with 96-110 KB of shared memory each.
template <int kNt>
constexpr int TmaStages() {
  return kNt <= 16 ? 6 : kNt == 32 ? 5 : 4;
}
template <int kNt, int kStages>
constexpr int TmaSharedBytes() {
  return kStages * StageBytes<kNt>() + 2 * kStages * 8 + 1024;  // + full and empty mbarriers, alignment
}

template <bool kInt8, int kNt, int kStages, typename Out>
__global__ void __launch_bounds__(kDecodeTmaThreads)
    W8MmaTmaKernel(const __grid_constant__ CUtensorMap w_map, const __grid_constant__ CUtensorMap x_map, Params p,
                   BiasRef<Out> bias, Out* __restrict__ y) {
#if defined(FERRY_W8_WGMMA)
  constexpr int kStage = StageBytes<kNt>();
  using AccT = typename Acc<kInt8>::T;
  constexpr int kRegs = kNt / 2;
  extern __shared__ uint8_t smem_raw[];
  const uint32_t raw_addr = static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw));
  const uint32_t smem_base = (raw_addr + 1023u) & ~1023u;
  uint8_t* const smem = smem_raw + (smem_base - raw_addr);
  const uint32_t full0 = smem_base + kStages * kStage;  // full[s] at full0 + 8 s
  const uint32_t empty0 = full0 + 8 * kStages;
  const int tid = threadIdx.x;
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * kBn;
  const int64_t k_begin = static_cast<int64_t>(blockIdx.y) * p.stages_per_split * kBk;
  const int64_t k_end = min(p.k, k_begin + p.stages_per_split * kBk);
  const int k_tiles = static_cast<int>((k_end - k_begin) / kBk);
  const int k0 = static_cast<int>(k_begin);

  if (tid == 0) {
#pragma unroll
    for (int s = 0; s < kStages; ++s) {
      BarrierInit(full0 + 8 * s, 1);
      BarrierInit(empty0 + 8 * s, kThreads);
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();

  AccT acc[2][kRegs];
#pragma unroll
  for (int mt = 0; mt < 2; ++mt) {
#pragma unroll
    for (int r = 0; r < kRegs; ++r) acc[mt][r] = AccT(0);
  }

  if (tid >= kThreads) {
    // The producer warp. Weights are constant: the first stages' weight tiles are asked for
    // before the kernel ahead of this one has finished (programmatic dependent launch).
    if (tid == kThreads) {
      asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<uint64_t>(&w_map)) : "memory");
      asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<uint64_t>(&x_map)) : "memory");
      const int first = k_tiles < kStages ? k_tiles : kStages;
      for (int t = 0; t < first; ++t) {
        BarrierExpectBytes(full0 + 8 * t, kStage);
        TmaLoad(smem_base + t * kStage, &w_map, k0 + t * kBk, static_cast<int>(n0), full0 + 8 * t);
      }
      AwaitPriorGrids();
      for (int t = 0; t < first; ++t) {
        TmaLoad(smem_base + t * kStage + kBn * kBk, &x_map, k0 + t * kBk, 0, full0 + 8 * t);
      }
      for (int t = kStages; t < k_tiles; ++t) {
        const int s = t % kStages;
        // The warpgroup has released the stage's previous tiles (use t / kStages - 1).
        BarrierWait(empty0 + 8 * s, static_cast<uint32_t>((t / kStages + 1) & 1));
        const uint32_t stage = smem_base + s * kStage;
        BarrierExpectBytes(full0 + 8 * s, kStage);
        TmaLoad(stage, &w_map, k0 + t * kBk, static_cast<int>(n0), full0 + 8 * s);
        TmaLoad(stage + kBn * kBk, &x_map, k0 + t * kBk, 0, full0 + 8 * s);
      }
    } else {
      AwaitPriorGrids();
    }
  } else {
    AwaitPriorGrids();  // the epilogue reads the token scales and writes y
    for (int t = 0; t < k_tiles; ++t) {
      const int s = t % kStages;
      BarrierWait(full0 + 8 * s, static_cast<uint32_t>((t / kStages) & 1));
      const uint32_t stage = smem_base + s * kStage;
      const uint64_t wd = Descriptor(stage), xd = Descriptor(stage + kBn * kBk);
      WgmmaFence();
#pragma unroll
      for (int kk = 0; kk < kBk / 32; ++kk) {
#pragma unroll
        for (int mt = 0; mt < 2; ++mt) {
          Wgmma<kInt8, kNt>::Run(acc[mt], DescriptorPlus(wd, mt * 64 * kBk + kk * 32), DescriptorPlus(xd, kk * 32));
        }
      }
      WgmmaCommit();
      // This stage's MMAs stay in flight; the previous stage's have finished, so it is released.
      WgmmaWait<1>();
      if (t > 0) BarrierArrive(empty0 + 8 * ((t - 1) % kStages));
    }
    WgmmaWait<0>();
    FenceToAsyncProxy();
  }
  FinishDecodeTile<kInt8, kNt, Out>(p, bias, y, acc, smem, n0, tid, /*worker=*/tid < kThreads);
#else
  (void)w_map, (void)x_map, (void)p, (void)bias, (void)y;
  __trap();  // LtGemm runs this kernel only on compute capability 9.0 (sm_90a code)
#endif
}

// kTma: the TMA kernel (W8MmaTmaKernel), else the cp.async one.
template <bool kInt8, int kNt, typename Out, bool kTma>
Status Launch(Params p, int64_t tiles, const void* bias, DType bias_dtype, void* y, cudaStream_t stream) {
  constexpr int kStages = kTma ? TmaStages<kNt>() : Stages<kNt>();
  constexpr int kSmem = kTma ? TmaSharedBytes<kNt, kStages>() : SharedBytes<kNt, kStages>();
  constexpr int kBlockThreads = kTma ? kDecodeTmaThreads : kThreads;
  const auto kernel = [] {
    if constexpr (kTma) {
      return W8MmaTmaKernel<kInt8, kNt, kStages, Out>;
    } else {
      return W8MmaKernel<kInt8, kNt, kStages, Out>;
    }
  }();
  static const cudaError_t attr = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem);
  FERRY_CUDA_RETURN_IF_ERROR(attr);
  // How many clusters of each size can be resident at once (asked once per kernel and size): a
  // split whose clusters would not all fit at once is lowered until they do.
  static std::atomic<int> resident_clusters[kMaxSplits + 1];  // count + 1; 0: not asked yet
  const auto clusters_that_fit = [&](int64_t size) {
    int known = resident_clusters[size].load(std::memory_order_relaxed) - 1;
    if (known < 0) {
      cudaLaunchAttribute cluster;
      cluster.id = cudaLaunchAttributeClusterDimension;
      cluster.val.clusterDim.x = 1;
      cluster.val.clusterDim.y = static_cast<unsigned>(size);
      cluster.val.clusterDim.z = 1;
      cudaLaunchConfig_t query = {};
      query.gridDim = dim3(1, static_cast<unsigned>(size));
      query.blockDim = dim3(kBlockThreads);
      query.dynamicSmemBytes = kSmem;
      query.attrs = &cluster;
      query.numAttrs = 1;
      int count = 0;
      if (cudaOccupancyMaxActiveClusters(&count, kernel, &query) != cudaSuccess) {
        (void)cudaGetLastError();
        // No clusters of this size: do not split this far. Kept like an answer, so that every
        // later call splits the same way and gives the same bytes.
        count = 0;
      }
      resident_clusters[size].store(count + 1, std::memory_order_relaxed);
      known = count;
    }
    return static_cast<int64_t>(known);
  };
  Split split = SplitsFor(p.n, p.k, kMaxSplits);
  while (split.splits > 1 && clusters_that_fit(split.splits) < tiles) split = SplitsFor(p.n, p.k, split.splits - 1);
  p.splits = split.splits;
  p.stages_per_split = split.stages_per_split;
  // LaunchKernel's launch, with the split blocks of a tile as one cluster.
  cudaLaunchAttribute attributes[2];
  unsigned count = 0;
  if (DependentLaunchEnabled()) {
    attributes[count].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attributes[count].val.programmaticStreamSerializationAllowed = 1;
    ++count;
  }
  if (p.splits > 1) {
    attributes[count].id = cudaLaunchAttributeClusterDimension;
    attributes[count].val.clusterDim.x = 1;
    attributes[count].val.clusterDim.y = static_cast<unsigned>(p.splits);
    attributes[count].val.clusterDim.z = 1;
    ++count;
  }
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(static_cast<unsigned>(tiles), static_cast<unsigned>(p.splits));
  config.blockDim = dim3(kBlockThreads);
  config.dynamicSmemBytes = kSmem;
  config.stream = stream;
  config.attrs = attributes;
  config.numAttrs = count;
  if constexpr (kTma) {
    if (p.m > 0x7fffffff || p.n > 0x7fffffff || p.k > 0x7fffffff) {
      return InvalidArgument("8-bit tensor-core GEMM: too large");
    }
    CUtensorMap w_map, x_map;
    FERRY_RETURN_IF_ERROR(EncodeOperand(p.w, p.n, p.k, p.k, kBn, &w_map));
    FERRY_RETURN_IF_ERROR(EncodeOperand(p.x, p.m, p.k, p.ldx, kNt, &x_map));
    (void)cudaLaunchKernelEx(&config, kernel, w_map, x_map, p, MakeBias<Out>(bias, bias_dtype), static_cast<Out*>(y));
  } else {
    (void)cudaLaunchKernelEx(&config, kernel, p, MakeBias<Out>(bias, bias_dtype), static_cast<Out*>(y));
  }
  FERRY_CUDA_RETURN_IF_LAUNCH_FAILED();
  return Status::Ok();
}

template <bool kInt8, typename Out, bool kTma>
Status DispatchTiles(const Params& p, int64_t tiles, const void* bias, DType bias_dtype, void* y,
                     cudaStream_t stream) {
  switch (TokenTile(p.m)) {
    case 8:
      return Launch<kInt8, 8, Out, kTma>(p, tiles, bias, bias_dtype, y, stream);
    case 16:
      return Launch<kInt8, 16, Out, kTma>(p, tiles, bias, bias_dtype, y, stream);
    case 32:
      return Launch<kInt8, 32, Out, kTma>(p, tiles, bias, bias_dtype, y, stream);
    default:
      return Launch<kInt8, 64, Out, kTma>(p, tiles, bias, bias_dtype, y, stream);
  }
}

std::atomic<int> decode_variant_override{-2};


}  // namespace

bool W8MmaSupported(const void* x, int64_t ldx, const void* w, int64_t m, int64_t k) {
  using kernels_internal::Aligned;
  return m >= 1 && k >= kBk && k % kBk == 0 && ldx % 16 == 0 && Aligned(x, 16) && Aligned(w, 16);
}

Status W8Mma(bool int8, const void* x, int64_t ldx, int64_t m, const void* w, int64_t n, int64_t k,
             const float* x_scale, bool per_row, const float* w_scale, bool per_col, const void* bias,
             DType bias_dtype, GemmActivation act, void* y, DType y_dtype, int64_t ldy, cudaStream_t stream,
             bool wide_tile) {
  if (!W8MmaSupported(x, ldx, w, m, k)) {
    return InvalidArgument(
        "8-bit tensor-core GEMM needs rows, K a multiple of 128, 16-byte aligned x and w and x rows of 16-byte "
        "multiples");
  }
  if (n <= 0) return Status::Ok();
  // stages_per_split and splits: Launch chooses them.
  const Params p{static_cast<const uint8_t*>(x), ldx, m, static_cast<const uint8_t*>(w), n, k, x_scale, per_row,
                 w_scale, per_col, act, ldy, 0, 1};
  const int64_t tiles = (n + kBn - 1) / kBn;
  if (tiles > 0x7fffffff) return InvalidArgument("8-bit tensor-core GEMM: N too large");
  if (m > kW8MmaMaxM) return W8Tile(int8, p, bias, bias_dtype, y, y_dtype, stream, wide_tile);
  return DispatchAct(y_dtype, "8-bit tensor-core GEMM output", [&](auto tag) -> Status {
    using Out = decltype(tag);
    if (W8DecodeKernelVariant() == 0) {
      return int8 ? DispatchTiles<true, Out, false>(p, tiles, bias, bias_dtype, y, stream)
                  : DispatchTiles<false, Out, false>(p, tiles, bias, bias_dtype, y, stream);
    }
    return int8 ? DispatchTiles<true, Out, true>(p, tiles, bias, bias_dtype, y, stream)
                : DispatchTiles<false, Out, true>(p, tiles, bias, bias_dtype, y, stream);
  });
}

int W8DecodeKernelVariant() {
  const int forced = decode_variant_override.load(std::memory_order_relaxed);
  if (forced >= -1) return forced;
  static const int from_env = [] {
    const char* v = std::getenv("FERRY_W8_DECODE_KERNEL");
    if (v == nullptr || *v == '\0') return -1;
    const int n = std::atoi(v);
    return n == 0 || n == 1 ? n : -1;
  }();
  return from_env;
}

void SetW8DecodeKernelVariant(int variant) { decode_variant_override.store(variant, std::memory_order_relaxed); }

}  // namespace ferry::cuda::gemm_kernels
