#include "backend/cuda/sampling.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <string>

#include "kernels/cuda/cuda_check.h"
#include "kernels/logit_adjust.h"

namespace ferry::backend {

Status DeviceSampler::Sample(const Tensor& logits, std::span<const TokenSampling> rows, std::vector<int32_t>& tokens) {
  const int n = static_cast<int>(rows.size());
  tokens.assign(static_cast<size_t>(n), -1);
  if (n == 0) return ctx_.NotRecording("SampleTokens");
  FERRY_ASSIGN_OR_RETURN(const Tensor out, Enqueue(logits, rows));
  FERRY_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(tokens.data(), out.raw(), static_cast<size_t>(n) * sizeof(int32_t),
                                             cudaMemcpyDeviceToHost, ctx_.stream()));
  return ctx_.Synchronize();
}

// The tokens of one asynchronous draw: the device ids, and their copy into a pinned slot.
class DeviceSampler::Pending final : public PendingTokens {
 public:
  Pending(Tensor tokens, HostSlot& slot) : tokens_(std::move(tokens)), slot_(slot) {}
  ~Pending() override {
    // The slot is free once its copy has landed (an unwaited draw is waited for here).
    cudaEventSynchronize(slot_.done);
    slot_.busy = false;
  }
  const Tensor& device_tokens() const override { return tokens_; }
  Status Wait(std::vector<int32_t>& tokens) override {
    FERRY_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(slot_.done));
    const int32_t* host = static_cast<const int32_t*>(slot_.host);
    tokens.assign(host, host + tokens_.numel());
    return Status::Ok();
  }
  std::span<const float> host_rows() const override {
    return {static_cast<const float*>(slot_.rows), slot_.rows_used / sizeof(float)};
  }

 private:
  Tensor tokens_;
  HostSlot& slot_;
};

DeviceSampler::~DeviceSampler() {
  for (HostSlot& slot : slots_) {
    if (slot.done != nullptr) cudaEventDestroy(slot.done);
    if (slot.host != nullptr) cudaFreeHost(slot.host);
    if (slot.rows != nullptr) cudaFreeHost(slot.rows);
  }
}

Result<std::unique_ptr<PendingTokens>> DeviceSampler::SampleAsync(const Tensor& logits,
                                                                  std::span<const TokenSampling> rows,
                                                                  std::span<const int32_t> host_rows) {
  const int n = static_cast<int>(rows.size());
  if (n == 0) return InvalidArgument("SampleTokensAsync: no rows");
  if (logits.rank() != 2) return InvalidArgument("SampleTokensAsync: logits " + logits.DebugString());
  for (int32_t r : host_rows) {
    if (r < 0 || r >= n) return InvalidArgument("SampleTokensAsync: host row " + std::to_string(r) + " of " + std::to_string(n));
  }
  const size_t bytes = static_cast<size_t>(n) * sizeof(int32_t);
  const size_t rows_bytes = host_rows.size() * static_cast<size_t>(logits.dim(1)) * sizeof(float);
  HostSlot* slot = nullptr;
  for (HostSlot& s : slots_) {
    if (!s.busy) {
      slot = &s;
      break;
    }
  }
  if (slot == nullptr) slot = &slots_.emplace_back();  // a deque: earlier slots do not move
  if (slot->done == nullptr) FERRY_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&slot->done, cudaEventDisableTiming));
  if (slot->bytes < bytes) {
    if (slot->host != nullptr) FERRY_CUDA_RETURN_IF_ERROR(cudaFreeHost(slot->host));
    slot->host = nullptr;
    slot->bytes = 0;
    FERRY_CUDA_RETURN_IF_ERROR(cudaMallocHost(&slot->host, std::max<size_t>(bytes, 4096)));
    slot->bytes = std::max<size_t>(bytes, 4096);
  }
  if (slot->rows_bytes < rows_bytes) {
    if (slot->rows != nullptr) FERRY_CUDA_RETURN_IF_ERROR(cudaFreeHost(slot->rows));
    slot->rows = nullptr;
    slot->rows_bytes = 0;
    FERRY_CUDA_RETURN_IF_ERROR(cudaMallocHost(&slot->rows, rows_bytes));
    slot->rows_bytes = rows_bytes;
  }
  slot->rows_used = rows_bytes;
  FERRY_ASSIGN_OR_RETURN(Tensor out, Enqueue(logits, rows, host_rows, static_cast<float*>(slot->rows)));
  FERRY_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(slot->host, out.raw(), bytes, cudaMemcpyDeviceToHost, ctx_.stream()));
  FERRY_CUDA_RETURN_IF_ERROR(cudaEventRecord(slot->done, ctx_.stream()));
  slot->busy = true;
  return std::unique_ptr<PendingTokens>(new Pending(std::move(out), *slot));
}

Result<Tensor> DeviceSampler::Enqueue(const Tensor& logits, std::span<const TokenSampling> rows,
                                      std::span<const int32_t> host_rows, float* rows_dst) {
  FERRY_RETURN_IF_ERROR(ctx_.NotRecording("SampleTokens"));
  const int n = static_cast<int>(rows.size());
  if (logits.rank() != 2 || logits.dim(0) < n) {
    return InvalidArgument("SampleTokens: logits " + logits.DebugString() + " for " + std::to_string(n) + " rows");
  }
  const int64_t vocab = logits.dim(1);
  const Tensor* f32 = &logits;
  Tensor converted;
  Tensor uploaded;
  if (logits.device().is_cpu()) {
    const Tensor host = logits.Slice(0, n).Clone();
    FERRY_ASSIGN_OR_RETURN(uploaded, ctx_.Upload(host.raw(), host.shape(), host.dtype()));
    f32 = &uploaded;
  }
  if (f32->dtype() != DType::kF32) {
    FERRY_ASSIGN_OR_RETURN(converted, ctx_.Allocate({n, vocab}, DType::kF32));
    FERRY_RETURN_IF_ERROR(
        cuda::Convert(f32->raw(), f32->dtype(), converted.raw(), DType::kF32, n * vocab, ctx_.stream()));
    f32 = &converted;
  }
  for (size_t i = 0; i < host_rows.size(); ++i) {
    // The rows as drawn from, before the adjustments below change them in place.
    const size_t row_bytes = static_cast<size_t>(vocab) * sizeof(float);
    FERRY_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(reinterpret_cast<char*>(rows_dst) + i * row_bytes,
                                               static_cast<const char*>(f32->raw()) + host_rows[i] * row_bytes,
                                               row_bytes, cudaMemcpyDeviceToHost, ctx_.stream()));
  }
  std::vector<cuda::SamplingParamsGpu>& params = params_;
  params.resize(static_cast<size_t>(n));
  bool penalty = false;
  adjust_.clear();
  for (int r = 0; r < n; ++r) {
    const TokenSampling& t = rows[r];
    params[r] =
        cuda::SamplingParamsGpu{t.temperature, t.top_k, t.top_p, t.min_p, t.repetition_penalty, t.seed, t.counter};
    const kernels::RowPenalties p{t.history,          static_cast<size_t>(t.counter), t.repetition_penalty,
                                  t.presence_penalty, t.frequency_penalty,             t.logit_bias,
                                  t.banned};
    if (kernels::NeedsAdjustments(p)) {
      // The adjustments include the repetition penalty of this row's history: the kernel
      // must not apply it a second time.
      kernels::CollectLogitAdjustments(p, r, static_cast<int32_t>(vocab), adjust_);
      params[r].repetition_penalty = 1.0f;
    }
    penalty = penalty || params[r].repetition_penalty != 1.0f;
  }
  // Structured outputs: the masked rows' bitsets, uploaded together.
  mask_rows_.clear();
  mask_words_.clear();
  const size_t words = (static_cast<size_t>(vocab) + 63) / 64;
  for (int r = 0; r < n; ++r) {
    const std::span<const uint64_t> allowed = rows[r].allowed;
    if (allowed.empty()) continue;
    if (allowed.size() != words) {
      return InvalidArgument("SampleTokens: row " + std::to_string(r) + " has a mask of " +
                             std::to_string(allowed.size()) + " words for a vocabulary of " + std::to_string(vocab));
    }
    mask_rows_.push_back(r);
    mask_words_.insert(mask_words_.end(), allowed.begin(), allowed.end());
  }
  if (!adjust_.empty() || !mask_rows_.empty()) {
    // Adjusted in place, on a copy unless the f32 rows are already ours (converted or uploaded).
    if (f32 == &logits) {
      FERRY_ASSIGN_OR_RETURN(converted, ctx_.Allocate({n, vocab}, DType::kF32));
      FERRY_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(converted.raw(), logits.raw(),
                                                 static_cast<size_t>(n) * static_cast<size_t>(vocab) * sizeof(float),
                                                 cudaMemcpyDeviceToDevice, ctx_.stream()));
      f32 = &converted;
    }
    Tensor& ours = f32 == &converted ? converted : uploaded;
    if (!adjust_.empty()) {
      FERRY_ASSIGN_OR_RETURN(void* entries,
                             ctx_.Stage(adjust_.data(), adjust_.size() * sizeof(kernels::LogitAdjustment)));
      FERRY_RETURN_IF_ERROR(cuda::AdjustLogits(ours.data<float>(), static_cast<int>(vocab),
                                               static_cast<const kernels::LogitAdjustment*>(entries),
                                               static_cast<int>(adjust_.size()), ctx_.stream()));
    }
    if (!mask_rows_.empty()) {
      // After the adjustments: a logit bias cannot lift a token the grammar forbids.
      FERRY_ASSIGN_OR_RETURN(void* d_rows, ctx_.Stage(mask_rows_.data(), mask_rows_.size() * sizeof(int32_t)));
      FERRY_ASSIGN_OR_RETURN(void* d_masks, ctx_.Stage(mask_words_.data(), mask_words_.size() * sizeof(uint64_t)));
      FERRY_RETURN_IF_ERROR(cuda::MaskLogits(ours.data<float>(), static_cast<int>(vocab),
                                             static_cast<const int32_t*>(d_rows), static_cast<const uint64_t*>(d_masks),
                                             static_cast<int>(mask_rows_.size()), ctx_.stream()));
    }
  }
  const int32_t* d_history = nullptr;
  const int64_t* d_offsets = nullptr;
  if (penalty) {
    history_.clear();
    offsets_.assign(1, 0);
    for (int r = 0; r < n; ++r) {  // only rows the kernel penalizes need their history
      const TokenSampling& t = rows[r];
      if (params[r].repetition_penalty != 1.0f) history_.insert(history_.end(), t.history.begin(), t.history.end());
      offsets_.push_back(static_cast<int64_t>(history_.size()));
    }
    if (history_.empty()) history_.push_back(-1);
    FERRY_ASSIGN_OR_RETURN(void* h, ctx_.Stage(history_.data(), history_.size() * sizeof(int32_t)));
    FERRY_ASSIGN_OR_RETURN(void* o, ctx_.Stage(offsets_.data(), offsets_.size() * sizeof(int64_t)));
    d_history = static_cast<const int32_t*>(h);
    d_offsets = static_cast<const int64_t*>(o);
  }
  FERRY_ASSIGN_OR_RETURN(Tensor out, ctx_.Allocate({n}, DType::kI32));
  FERRY_RETURN_IF_ERROR(cuda::SampleRows(f32->data<float>(), n, static_cast<int>(vocab), params.data(), d_history,
                                         d_offsets, out.data<int32_t>(), ctx_.stream()));
  return out;
}

}  // namespace ferry::backend
