// The logit processors that act on a few token ids each: logit_bias, min_tokens' ban on
// stop ids, the repetition penalty (prompt and output tokens) and OpenAI's presence and
// frequency penalties (output tokens). A row's adjustments are collected once on the host,
// one entry per affected id, and applied by the same inline function on either device, so
// the CPU sampler and the GPU kernel produce bit-identical logits.
//
// Order (vLLM's): bias, then repetition penalty, then frequency and presence penalties; a
// banned id gets kBannedLogit whatever else applies.
#pragma once

#include <cfloat>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#if defined(__CUDACC__)
#define FERRY_HOST_DEVICE __host__ __device__
#else
#define FERRY_HOST_DEVICE
#endif

namespace ferry::kernels {

// A banned token's logit: finite (a row stays "finite" for the NaN check) and far below any
// real logit, so its probability is exactly 0 and greedy never picks it.
inline constexpr float kBannedLogit = -FLT_MAX;

enum LogitFlags : uint32_t {
  kLogitRepeated = 1,  // in the prompt or the output: the repetition penalty applies
  kLogitBanned = 2,    // a stop id before min_tokens
};

// One token id of one row. `subtract` = frequency_penalty * count + presence_penalty for a
// token the output contains (0 otherwise), computed once on the host.
struct LogitAdjustment {
  int32_t row = 0;
  int32_t id = 0;
  float bias = 0.0f;
  float repetition = 1.0f;
  float subtract = 0.0f;
  uint32_t flags = 0;
};

FERRY_HOST_DEVICE inline float AdjustLogit(float logit, const LogitAdjustment& a) {
  if (a.flags & kLogitBanned) return kBannedLogit;
#if defined(__CUDA_ARCH__)
  float v = __fadd_rn(logit, a.bias);
  if ((a.flags & kLogitRepeated) && a.repetition != 1.0f) v = v > 0.0f ? __fdiv_rn(v, a.repetition) : __fmul_rn(v, a.repetition);
  return __fsub_rn(v, a.subtract);
#else
  float v = logit + a.bias;
  if ((a.flags & kLogitRepeated) && a.repetition != 1.0f) v = v > 0.0f ? v / a.repetition : v * a.repetition;
  // Round the product before the subtraction (no fused multiply-add), as the GPU does.
  __asm__("" : "+x"(v));
  return v - a.subtract;
#endif
}

// What one row asks for. `history` is the prompt followed by the output; its last
// `generated` tokens are the output.
struct RowPenalties {
  std::span<const int32_t> history;
  size_t generated = 0;
  float repetition_penalty = 1.0f;
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  std::span<const std::pair<int32_t, float>> logit_bias;
  std::span<const int32_t> banned;
};

// Whether the row needs per-id adjustments beyond the repetition penalty alone.
bool NeedsAdjustments(const RowPenalties& p);

// Appends the row's adjustments, one per affected id in [0, vocab), sorted by id.
void CollectLogitAdjustments(const RowPenalties& p, int32_t row, int32_t vocab, std::vector<LogitAdjustment>& out);

}  // namespace ferry::kernels
