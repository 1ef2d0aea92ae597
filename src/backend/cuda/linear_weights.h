// Linear weights on the GPU: converted, or quantized (int8, fp8 e4m3) per output channel, at
// load (PrepareCudaLinear), and written to and read from engine files as a layout JSON and
// blobs (SerializeCudaLinear, DeserializeCudaLinear).
#pragma once

#include <optional>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/context.h"
#include "backend/cuda/weight_loader.h"
#include "kernels/cuda/gemm.h"

namespace ferry::backend {

// A prepared weight on the GPU (what LinearWeight::packed holds). Immutable after loading,
// except for the tuned choices, which an engine build sets.
struct CudaLinear {
  Tensor weight;       // [out, in] in the GEMM's input dtype (act dtype, int8 or fp8); int4:
                       // i32 [out, in / 8], eight 4-bit values per word (PackInt4Rows)
  Tensor scales;       // f32 [out]: int8 / fp8 per-channel scales; int4: f32 [out, groups]
  Tensor zeros;        // int4: u8 [out, groups] zero points (undefined otherwise)
  int64_t group_size = 0;  // int4: input columns per group
  Tensor smooth;       // f32 [in]: SmoothQuant factors for W8A8 (undefined: none)
  Tensor inv_smooth;   // f32 [in]: 1 / smooth, for the small-M kernel on the unquantized input
  Tensor bias;         // [out] or undefined: the activation dtype for float kinds (cuBLASLt adds
                       // it in its epilogue), f32 for int8 and fp8 (added by ferry's epilogue)
  WeightFormat format = WeightFormat::kNative;
  cuda::GemmKind kind = cuda::GemmKind::kBF16;
  std::vector<std::optional<cuda::GemmChoice>> choices;  // tuned per M bucket (empty: heuristic)
  bool fp8_fast_accum = false;  // kFp8: cuBLASLt's fast accumulation (LinearWeight::fast_accumulation)
};

// Converts or quantizes the weight, given as row blocks `parts` [n_i, in] (or w.weight when
// `parts` is empty; or for kInt4 w.int4 when set, taken as it is), to w.format on the device (a float weight takes the activations'
// dtype; an int8 or fp8 layer whose shape those GEMMs cannot take stays in it). A float
// weight's parts go to their rows on the device as they are and are converted there; the
// copies go through `loader` and have arrived after its Finish.
Status PrepareCudaLinear(CudaContext& ctx, WeightLoader& loader, const cuda::LtGemm& gemm, DType activations,
                         const std::vector<Tensor>& parts, LinearWeight& w);
// The layout JSON and the blobs (weight, scales, smooth, bias), copied to the host.
Result<SerializedLinear> SerializeCudaLinear(const LinearWeight& w);
// The blobs are copied through `loader` (arrived after its Finish).
Result<LinearWeight> DeserializeCudaLinear(WeightLoader& loader, const SerializedLinear& s);

}  // namespace ferry::backend
