// W8A8 linear: y[M, N] = dequant(quant(x * (1 / smooth)) · Wq^T) (+ bias) over a PackedWeight in
// PanelLayout::kQuads: AVX2 (vpmaddubsw), or VNNI (vpdpbusd) where the CPU has AVX-512 VNNI.
#pragma once

#include <cstdint>
#include <string_view>

#include "kernels/cpu/packed_weight.h"

namespace ferry::kernels::cpu {

// The most bytes of quantized activations per row and stored k (ActivationQuadBytes / 4).
inline constexpr int kActivationBytesPerK = 2;

// The integer kernels. Both give the same exact int32 sums, so the same results bit for
// bit. The VNNI one runs where the CPU has AVX-512 VNNI (and VL), unless the environment
// says FERRY_INT8_KERNEL=avx2 at start-up.
enum class Int8Kernel { kAvx2, kVnni };

// Bytes a quantized row holds per quad of k for `kernel`: the AVX2 kernel's 8 (q[4j..4j+3],
// then |q| for vpsignb and vpmaddubsw), the VNNI kernel's 4 (q + 128 as unsigned bytes, the
// one operand vpdpbusd takes; half the activation bytes its tiles stream).
constexpr int ActivationQuadBytes(Int8Kernel kernel) { return kernel == Int8Kernel::kVnni ? 4 : 8; }
bool Int8KernelSupported(Int8Kernel kernel);
Int8Kernel ActiveInt8Kernel();
// Switches the kernel for later calls (tests and benchmarks compare the two); false when this
// CPU cannot run it.
bool SetActiveInt8Kernel(Int8Kernel kernel);
std::string_view Int8KernelName(Int8Kernel kernel);

// Prefill (more than gemv_max_rows and at least kAmxMinRows rows) runs on ferry's own AMX route
// where AmxEnabled() (amx_gemm.h: the quad panels as they are, the same quantized rows and
// epilogue, so the same bytes). Otherwise, prefill (at least kInt8OnednnMinRows rows) of weights of at least
// kInt8OnednnMinWeightBytes on CPUs where oneDNN's s8 matmul runs on AMX tiles: the same quantized rows go to oneDNN in row-major
// order, W in oneDNN's layout (built from the panels on first use and kept with the weight:
// the W8A8 weights are then held twice), and the same epilogue runs on its exact int32 sums,
// so the results are the same bytes as the VNNI and AVX2 kernels'. On a 2-core Xeon with AMX,
// oneDNN's s8 matmul did about twice the GFLOP/s of the VNNI kernel at 512 rows. On by default
// where supported; FERRY_INT8_ONEDNN=0 at start-up turns it off.
inline constexpr int64_t kInt8OnednnMinRows = 64;
// Smaller weights stay on ferry's kernels: bert-base's (768 x 768 to 3072 x 768) encoded 32 x
// 128 tokens at 0.91-0.96x through oneDNN, while a 1B decoder's (2048 x 2048 and up) prefilled
// at 1.44x.
inline constexpr int64_t kInt8OnednnMinWeightBytes = int64_t{2048} * 2048;
bool Int8OnednnSupported();
bool Int8OnednnEnabled();
// For tests and benchmarks; false when this CPU cannot run it (enabling).
bool SetInt8OnednnEnabled(bool enabled);

// Quantizes rows [0, m) of x to int8 with a per-row dynamic scale, in the tile layout the
// W8A8 kernels read. Each row: x' = x * inv_smooth (f32 products; null: x' = x; a weight's
// inv_smooth is SmoothReciprocals of its SmoothQuant factors), amax = max |x'|,
// q = round_half_even(x' * (127 / amax)) in f32 (|q| <= 127), row_scale = amax / 127 (q = 0
// and scale 0 for an all-zero row). Tiles hold `tile_rows` rows; with B =
// ActivationQuadBytes(kernel), k-quad j of row r of tile t is the B bytes at
// t*k_stored*tile_rows*B/4 + (j*tile_rows + r)*B: for the AVX2 kernel q[4j..4j+3] then |q|
// (two 32-bit broadcasts feed vpsignb and vpmaddubsw), for the VNNI kernel q[4j..4j+3] + 128
// as u8 (one broadcast feeds vpdpbusd). The K padding is q = 0.
void QuantizeActivations(const float* x, int64_t lda, int64_t m, int64_t k, int64_t k_stored, const float* inv_smooth,
                         int tile_rows, int8_t* q, float* row_scale, Int8Kernel kernel = ActiveInt8Kernel());

// y = (acc * row_scale[m] * col_scale[n]) + bias[n], acc the exact int32 dot product of the
// quantized row and column. Rows up to `gemv_max_rows` stream the weights once (decode);
// larger M runs the cache-blocked GEMM. The int32 partial sums of a K range live in y
// itself until the last range, so the result does not depend on the blocking. With `gelu`,
// y = GELU(...) (in the AMX route's epilogue, else a pass over y: the same bytes).
void Int8Linear(const float* x, int64_t lda, int64_t m, const PackedWeight& w, const float* bias, float* y,
                int64_t ldy, int64_t gemv_max_rows, bool gelu = false);

}  // namespace ferry::kernels::cpu
