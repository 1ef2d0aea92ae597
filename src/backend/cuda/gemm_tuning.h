// GEMM tuning for engine builds: times a prepared weight's cuBLASLt algorithms (and, for
// int8 weight-only, the fused small-M kernel) for every M bucket and keeps the fastest in the
// weight. Weights of one kind, shape and bias are timed once. Thread-compatible.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/context.h"
#include "kernels/cuda/gemm.h"

namespace ferry::backend {

class GemmTuner {
 public:
  GemmTuner(CudaContext& ctx, cuda::LtGemm& gemm, DType activations)
      : ctx_(ctx), gemm_(gemm), activations_(activations) {}

  // Backend::TuneLinear: the choices go into the weight; returns them as JSON ("" when this
  // shape was timed before).
  Result<std::string> Tune(LinearWeight& w);

 private:
  CudaContext& ctx_;
  cuda::LtGemm& gemm_;
  const DType activations_;
  // Choices by (kind, out, in, bias).
  std::map<std::tuple<int, int64_t, int64_t, bool>, std::vector<std::optional<cuda::GemmChoice>>> tuned_;
};

}  // namespace ferry::backend
