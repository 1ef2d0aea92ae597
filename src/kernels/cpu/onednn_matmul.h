// oneDNN f32 matmul: y[M, N] = x[M, K] · W^T (+ bias), with cached primitives. Used as an
// alternative large-M path for f32 weights and as the yardstick in bench/gemm_bench.cc.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "core/status.h"
#include "core/tensor.h"

namespace ferry::kernels::cpu {

// W stored the way oneDNN's AVX2 f32 matmul asks for when its weights format is `any`:
// plain K x N row-major (a transpose of the Hugging Face [N, K] layout), always f32.
// Immutable; thread-safe.
struct OnednnWeight {
  int64_t n = 0;
  int64_t k = 0;
  std::shared_ptr<float> data;  // [K, N]
};

// Converts and transposes W[N, K] (f32, bf16 or f16).
Result<std::shared_ptr<OnednnWeight>> PackOnednnWeight(const Tensor& weight);

// Runs the matmul. `w` is either an OnednnWeight's [K, N] data (w_is_kn) or W[N, K] f32
// as given. Primitives are cached per (N, K, strides, layout, bias) with M a run-time
// dimension. Thread-safe.
Status OnednnMatmul(const float* x, int64_t lda, int64_t m, int64_t k, const float* w, bool w_is_kn, int64_t n,
                    const float* bias, float* y, int64_t ldy);

// oneDNN's implementation name for the f32 matmul on this CPU (e.g. "gemm:jit"), and whether
// a bf16-weight matmul exists with a non-reference implementation.
std::string OnednnF32MatmulImpl();
bool OnednnHasFastBf16Matmul();

// oneDNN's s8 x s8 -> s32 matmul, kept as the yardstick for ferry's W8A8 kernel (see
// int8_gemm.cc for why the kernel does not call it). W is reordered once into the layout the
// primitive asks for. Immutable; thread-safe.
struct OnednnInt8Weight {
  int64_t n = 0;
  int64_t k = 0;
  std::shared_ptr<void> data;  // oneDNN's blocked layout of the [K, N] s8 weights
};

// From int8 W[N, K] (row-major, as quantized by PackWeight).
Result<std::shared_ptr<OnednnInt8Weight>> PackOnednnInt8Weight(const int8_t* w, int64_t n, int64_t k);

// acc[M, N] = xq[M, K] · W^T in int32 (xq row-major s8). Primitives are cached per (N, K).
Status OnednnInt8Matmul(const int8_t* xq, int64_t m, const OnednnInt8Weight& w, int32_t* acc);

// oneDNN's implementation name for that matmul on this CPU (e.g. "gemm:jit").
std::string OnednnInt8MatmulImpl();

}  // namespace ferry::kernels::cpu
