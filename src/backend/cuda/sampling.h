// Sampling on the device: one token per row of logits where the logits are (greedy,
// temperature, top-k, top-p, min-p, repetition, presence and frequency penalties, logit bias,
// banned ids, structured-output masks; Philox keyed by seed and counter), so only token ids travel to the host.
// Thread-compatible (the backend's stream).
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <span>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/context.h"
#include "kernels/cuda/kernels.h"

namespace ferry::backend {

class DeviceSampler {
 public:
  explicit DeviceSampler(CudaContext& ctx) : ctx_(ctx) {}
  ~DeviceSampler();
  DeviceSampler(const DeviceSampler&) = delete;
  DeviceSampler& operator=(const DeviceSampler&) = delete;

  // Backend::SampleTokens; waits for the tokens.
  Status Sample(const Tensor& logits, std::span<const TokenSampling> rows, std::vector<int32_t>& tokens);
  // Backend::SampleTokensAsync: the draw and the copy into pinned memory are queued; the
  // result must not outlive the sampler.
  Result<std::unique_ptr<PendingTokens>> SampleAsync(const Tensor& logits, std::span<const TokenSampling> rows,
                                                     std::span<const int32_t> host_rows);

 private:
  class Pending;
  // Pinned memory one asynchronous draw's ids land in, and the event that says they have.
  struct HostSlot {
    void* host = nullptr;
    size_t bytes = 0;
    void* rows = nullptr;  // the logits rows brought back with the ids
    size_t rows_bytes = 0;
    size_t rows_used = 0;
    cudaEvent_t done = nullptr;
    bool busy = false;  // a Pending holds it
  };

  // Queues the draw: the ids, i32 [rows], on the device. The f32 logits of `host_rows` are
  // copied to `rows_dst` (pinned, host_rows.size() * vocab floats) before any adjustment.
  Result<Tensor> Enqueue(const Tensor& logits, std::span<const TokenSampling> rows,
                         std::span<const int32_t> host_rows = {}, float* rows_dst = nullptr);

  CudaContext& ctx_;
  std::deque<HostSlot> slots_;
  // Reused between calls: the rows' settings, and every penalized row's history back to back.
  std::vector<cuda::SamplingParamsGpu> params_;
  std::vector<int32_t> history_;
  std::vector<int64_t> offsets_;
  std::vector<kernels::LogitAdjustment> adjust_;  // rows with bias, bans, presence/frequency penalties
  std::vector<int32_t> mask_rows_;                // rows with a structured-output mask
  std::vector<uint64_t> mask_words_;              // their bitsets, back to back
};

}  // namespace ferry::backend
