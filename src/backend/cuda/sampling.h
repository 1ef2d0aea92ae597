// Sampling on the device: one token per row of logits where the logits are (greedy,
// temperature, top-k, top-p, min-p, repetition, presence and frequency penalties, logit bias,
// banned ids, structured-output masks; Philox keyed by seed and counter), so only token ids travel to the host.
// Thread-compatible (the backend's stream).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/context.h"
#include "kernels/cuda/kernels.h"

namespace ferry::backend {

class DeviceSampler {
 public:
  explicit DeviceSampler(CudaContext& ctx) : ctx_(ctx) {}

  // Backend::SampleTokens; waits for the tokens.
  Status Sample(const Tensor& logits, std::span<const TokenSampling> rows, std::vector<int32_t>& tokens);

 private:
  CudaContext& ctx_;
  // Reused between calls: the rows' settings, and every penalized row's history back to back.
  std::vector<cuda::SamplingParamsGpu> params_;
  std::vector<int32_t> history_;
  std::vector<int64_t> offsets_;
  std::vector<kernels::LogitAdjustment> adjust_;  // rows with bias, bans, presence/frequency penalties
  std::vector<int32_t> mask_rows_;                // rows with a structured-output mask
  std::vector<uint64_t> mask_words_;              // their bitsets, back to back
};

}  // namespace ferry::backend
