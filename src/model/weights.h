// Weight lookup shared by the model families: names are Hugging Face's, tensors come from
// a checkpoint or an engine file through one callback, so models do not care which.
#pragma once

#include <functional>
#include <string>

#include "backend/backend.h"
#include "core/status.h"
#include "core/tensor.h"

namespace ferry::model {

// Returns the named tensor (zero-copy where possible) or NotFound.
using TensorLookup = std::function<Result<Tensor>(const std::string& name)>;
// True when the named tensor exists.
using TensorExists = std::function<bool(const std::string& name)>;

struct WeightSource {
  TensorLookup get;
  TensorExists has;
};

// Fetches `name` and checks its shape; the error names the tensor and both shapes.
Result<Tensor> GetWeight(const WeightSource& src, const std::string& name, const Shape& shape);
// Fetches a small vector (norm gain, bias) and converts it to f32.
Result<Tensor> GetVectorF32(const WeightSource& src, const std::string& name, int64_t size);
// Concatenates row blocks [n_i, K] of one dtype into a new [sum n_i, K] tensor (fused
// QKV / gate-up layouts: one GEMM reads all of them).
Result<Tensor> ConcatRows(const std::vector<Tensor>& parts);
// Concatenates f32 vectors.
Tensor ConcatVectors(const std::vector<Tensor>& parts);

// Loads a LinearWeight [out, in] (+ optional bias) and lets the backend prepare it.
Result<backend::LinearWeight> LoadLinear(const WeightSource& src, backend::Backend& be, const std::string& weight_name,
                                         const std::string& bias_name, int64_t out, int64_t in);

}  // namespace ferry::model
