// The layout the CPU GEMM kernels read linear weights in, and its conversion from a
// checkpoint weight (dtype conversion, int8 quantization).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "core/status.h"
#include "core/tensor.h"
#include "kernels/weight_format.h"

namespace ferry::kernels::cpu {

// Output features per panel: two AVX2 registers of f32.
inline constexpr int kPanelCols = 16;

// How a panel orders its K x kPanelCols elements.
enum class PanelLayout : uint8_t {
  // W[p*16 + c, k] at k*16 + c: one row of 16 output features per k, in the panel's dtype
  // (f32, bf16, f16, or int8 with per-column scales). One widening load feeds 8 FMA lanes.
  kRows,
  // int8 with K padded to a multiple of 4: W[p*16 + c, k] at (k/4)*64 + c*4 + k%4. Four
  // consecutive k of a column sit side by side, the operand order of _mm256_maddubs_epi16
  // (W8A8): one 64-byte line holds a 4 x 16 block.
  kQuads,
};

// K as a panel of `layout` stores it (kQuads pads it with zero weights).
inline int64_t StoredK(PanelLayout layout, int64_t k) { return layout == PanelLayout::kQuads ? (k + 3) / 4 * 4 : k; }

// Another layout of a packed weight that a kernel builds on first use and keeps for the
// weight's lifetime: oneDNN's s8 matmul layout, for W8A8 prefill on CPUs where oneDNN runs it
// on AMX (int8_gemm.cc). Shared by copies of the PackedWeight.
struct DerivedLayouts {
  std::once_flag onednn_s8_once;
  std::shared_ptr<void> onednn_s8;  // an OnednnInt8Weight, or null when it could not be built
};

// A weight W[N, K] rearranged into column panels of kPanelCols output features, the last
// one zero-padded. Panels sit back to back, so the panels a thread owns form one
// sequential stream (what decode GEMV wants) and any K range of a panel is a contiguous
// micro-panel (what the blocked GEMM wants).
//
// Self-describing: everything the kernels read is in here (the source tensor is not needed
// after packing), and the buffers are Tensors so they can be views into an mmap'd engine
// file that they keep alive. Immutable after packing; thread-safe to share.
struct PackedWeight {
  static constexpr uint64_t kMagic = 0x6665727279504b57ull;  // tags the type behind shared_ptr<void>
  uint64_t magic = kMagic;
  WeightFormat format = WeightFormat::kNative;
  DType dtype = DType::kF32;  // of the panel elements: f32, bf16, f16 or i8
  PanelLayout layout = PanelLayout::kRows;
  int64_t n = 0;
  int64_t k = 0;
  int64_t k_stored = 0;  // StoredK(layout, k)
  int64_t num_panels = 0;
  Tensor panels;  // [num_panels, k_stored * kPanelCols], 64-byte aligned
  Tensor scales;  // int8 formats: f32 [num_panels * kPanelCols], 0 for the padding columns
  // int8-wo with one scale per block of inputs (a GGUF Q8_0 weight run as it is, PackInt8Blocks):
  // inputs per scale, a multiple of kInt8BlockMultiple dividing k; 0 for per-column `scales`.
  // Then `scales` is undefined and block_scales is f16 [num_panels, k / block_size, kPanelCols]
  // (0 for the padding columns): the kernels widen q * its block's scale in f32, which is
  // exactly the f32 weight the blocks stand for, and run the f32 arithmetic on it (the same
  // bytes as that f32 matrix packed as kF32 gives).
  int64_t block_size = 0;
  Tensor block_scales;
  Tensor smooth;  // W8A8: f32 [k] SmoothQuant factors (the engine file's blob), or undefined
  // SmoothReciprocals(smooth), what the activations are multiplied by; set wherever smooth is.
  Tensor inv_smooth;
  // The weight data PrepareLinear packed this from, only to notice a pack paired with
  // another weight; null when loaded from an engine file. Never dereferenced.
  const void* source = nullptr;
  std::shared_ptr<DerivedLayouts> derived = std::make_shared<DerivedLayouts>();

  // Activations are quantized to int8 per row (W8A8).
  bool int8_activations() const { return format == WeightFormat::kInt8W8A8; }
  size_t elem_size() const { return DTypeSize(dtype); }
  size_t panel_bytes() const { return static_cast<size_t>(k_stored) * kPanelCols * elem_size(); }
  const void* panel(int64_t p) const { return static_cast<const char*>(panels.raw()) + p * panel_bytes(); }
  const float* scale_data() const { return scales.defined() ? scales.data<float>() : nullptr; }
  // Panel p's block scales ([k / block_size, kPanelCols]); block_size > 0 only.
  const uint16_t* block_scale_data(int64_t p) const {
    return static_cast<const uint16_t*>(block_scales.raw()) + p * (k / block_size) * kPanelCols;
  }
  const float* inv_smooth_data() const { return inv_smooth.defined() ? inv_smooth.data<float>() : nullptr; }
};

// 1.0f / smooth[i] in f32 for each factor (f32 [k]): a W8A8 layer's activation is x * these,
// on the CPU and on the GPU alike, so both quantize the same values. A multiply where the
// factors were once divided by (a division is several instructions on a GPU); the product
// differs from the quotient by an ulp or two of the smoothed value.
Tensor SmoothReciprocals(const Tensor& smooth);
// Empty when every factor is positive and finite with a finite reciprocal, else what is wrong.
std::string CheckSmoothFactors(const Tensor& smooth);

// K limit of the int8 W8A8 kernels: K * 127 * 127 must fit the int32 accumulators.
inline constexpr int64_t kMaxInt8K = (int64_t{1} << 31) / (127 * 127);

// Asks the kernel to back [p, p + bytes) with transparent huge pages (best effort).
void AdviseHugePages(void* p, size_t bytes);

// Converts W[N, K] (f32, bf16 or f16, contiguous) to `format` and packs it. Multi-threaded.
//  - kNative keeps the weight's dtype; kF32 / kBF16 / kF16 convert (round to nearest even).
//  - kInt8 / kInt8W8A8 quantize each output row symmetrically: scale_n = max_k |W'[n, k]| / 127,
//    q = round_half_even(W'[n, k] / scale_n) (all-zero rows get scale 0 and q = 0), where
//    W' = W for kInt8 and W' = W * diag(smooth) for kInt8W8A8 (`smooth`: f32 [K], positive
//    and finite, or undefined for ones). Other formats ignore `smooth`: without activation
//    quantization smoothing does not change the product.
Result<std::shared_ptr<PackedWeight>> PackWeight(const Tensor& weight,
                                                 WeightFormat format = WeightFormat::kNative,
                                                 const Tensor& smooth = Tensor());

// Block sizes of int8 blocks are multiples of this (the GEMV's unrolled runs stay within a block).
inline constexpr int64_t kInt8BlockMultiple = 8;

// Packs int8 values q (i8 [N, K]) with one scale per block of `block_size` inputs of a row
// (scales: f16 [N, K / block_size], finite) as a kInt8 weight with block scales (see
// PackedWeight::block_size). InvalidArgument unless block_size is a positive multiple of
// kInt8BlockMultiple dividing K and the shapes agree. Multi-threaded.
Result<std::shared_ptr<PackedWeight>> PackInt8Blocks(const Tensor& q, const Tensor& scales, int64_t block_size);

// The PackedWeight behind `packed`, or null if it holds something else.
const PackedWeight* AsPackedWeight(const std::shared_ptr<void>& packed);

}  // namespace ferry::kernels::cpu
