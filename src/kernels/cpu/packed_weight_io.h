// PackedWeight <-> engine file: a JSON layout description plus the buffers as blobs.
//
// Layout JSON (version 1), stored verbatim by the engine-file writer:
//   {"backend":"cpu","layout":"panels","version":1,"format":"int8","dtype":"i8",
//    "panel_cols":16,"panel_layout":"quads","n":3072,"k":2048,"k_stored":2048,
//    "num_panels":192,"blob_alignment":64,"blobs":["panels","scales","smooth","bias"]}
// format: a WeightFormatName; dtype: the panel element type (f32, bf16, f16, i8);
// panel_layout: "rows" or "quads" (see PanelLayout). Blobs, in the order "blobs" lists them:
//   panels  dtype [num_panels, k_stored * panel_cols]   always
//   scales  f32   [num_panels * panel_cols]             int8 formats (0 for padding columns)
//   smooth  f32   [k]                                   W8A8 with SmoothQuant factors
//   bias    f32   [n]                                   when the layer has a bias
#pragma once

#include <memory>

#include "core/status.h"
#include "core/tensor.h"
#include "kernels/cpu/packed_weight.h"
#include "kernels/serialized_linear.h"

namespace ferry::kernels::cpu {

inline constexpr int kPackedLayoutVersion = 1;
// The kernels want every blob on a 64-byte boundary; a misaligned one is copied on load.
inline constexpr size_t kBlobAlignment = 64;

// A deserialized weight: the panels and, when the layer has one, its f32 bias.
struct PackedLinear {
  std::shared_ptr<PackedWeight> packed;
  Tensor bias;
};

// The blobs are the packed tensors themselves (no copy); bias is converted to f32 if needed.
Result<SerializedLinear> SerializePackedWeight(const PackedWeight& w, const Tensor& bias);

// Checks the layout and every blob against it (InvalidArgument for a layout this code does
// not understand, DataLoss for blobs that do not match it) and wraps the blobs without
// copying: the result keeps them alive. Only blobs off a 64-byte boundary are copied.
Result<PackedLinear> DeserializePackedWeight(const SerializedLinear& s);

}  // namespace ferry::kernels::cpu
