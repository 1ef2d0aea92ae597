// Large-M GEMM for prefill: y[M, N] = x[M, K] · W[N, K]^T (+ bias) over a PackedWeight.
#pragma once

#include <cstdint>
#include <string_view>

#include "kernels/cpu/packed_weight.h"

namespace ferry::kernels::cpu {

// Cache blocking (BLIS-style) around the 6x16 micro-kernel. For each K chunk and each
// block of rows, x is packed once into 6-row tiles (a sequential stream that stays in L2),
// then every weight micro-panel the thread owns (K chunk x 16, from L3/memory; bf16/f16
// widened, int8 dequantized into an L1 buffer first) is swept over all tiles of the block.
struct GemmBlocking {
  // Upper bound on the K chunk; K is split into equal chunks no longer than this (2048 ->
  // 6 x 342) so no short tail chunk pays the per-chunk overheads. A 384 x 16 f32 micro-panel
  // is 24 KiB (L1); measured best of 256/384/512 on Zen 3 (~180 GFLOP/s at 2 threads).
  int64_t k_chunk = 384;
  int64_t row_block = 288;  // packed x block: 288 x 384 f32 = 432 KiB, stays in L2 (the AVX-512
                            // tile's K chunks are kPairKChunk in gemm.cc: 1.1 MiB blocks)
};

// The register tile the GEMM runs: AVX2 (6 x 16 in 12 ymm), or AVX-512 where the CPU has
// AVX-512F (12 x 32 over two adjacent panels in 24 zmm, 6 x 32 for the rows past the last
// twelve; a panel left without a partner runs 6 x 16 in 6 zmm with K unrolled into a second
// set), unless the environment says
// FERRY_GEMM_KERNEL=avx2 at start-up. Their sums round differently (the order of the k
// terms differs), within f32 accumulation error.
enum class GemmKernel { kAvx2, kAvx512 };
bool GemmKernelSupported(GemmKernel kernel);
GemmKernel ActiveGemmKernel();
// Switches the kernel for later calls (tests and benchmarks compare the two); false when this
// CPU cannot run it.
bool SetActiveGemmKernel(GemmKernel kernel);
std::string_view GemmKernelName(GemmKernel kernel);

// y = x W^T (+ bias); with `gelu`, y = GELU(x W^T + bias), applied by the AVX-512 tiles as they
// store the last K chunk (the bytes of the separate pass, GeluRows). Returns whether GELU was
// applied (false: none asked, or the AVX2 kernel, which leaves it to the caller).
bool GemmPacked(const float* x, int64_t lda, int64_t m, const PackedWeight& w, const float* bias, float* y,
                int64_t ldy, bool gelu = false, const GemmBlocking& blocking = GemmBlocking());

}  // namespace ferry::kernels::cpu
