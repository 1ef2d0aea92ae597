// Token sampling from logits: greedy, temperature, top-k, top-p, min-p, repetition,
// presence and frequency penalties, logit bias, banned ids, seeded. The processors apply in
// vLLM's order: logit bias and banned ids, repetition penalty, frequency and presence
// penalties (kernels/logit_adjust.h, shared with the GPU), then temperature, top-k, top-p,
// min-p.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "core/status.h"
#include "kernels/logit_adjust.h"

namespace ferry::engine {

// Temperatures below this sample greedily (as vLLM's 1e-5): dividing logits by a tinier
// one overflows to infinities, whose softmax is NaN.
constexpr float kGreedyTemperature = 1e-5f;

struct SamplingParams {
  float temperature = 1.0f;         // 0 (or below kGreedyTemperature) = greedy
  int top_k = 0;                    // 0 = off
  float top_p = 1.0f;               // 1 = off
  float min_p = 0.0f;               // 0 = off
  float repetition_penalty = 1.0f;  // 1 = off; prompt and output tokens
  float presence_penalty = 0.0f;    // OpenAI's, -2..2: subtracted once from every token the output contains
  float frequency_penalty = 0.0f;   // -2..2: subtracted once per occurrence in the output
  std::vector<std::pair<int32_t, float>> logit_bias;  // token id -> bias in [-100, 100]
  std::optional<uint64_t> seed;     // absent: seeded from the request id

  Status Validate() const;
  bool greedy() const { return temperature < kGreedyTemperature; }
};

// One generated (or prompt) token with the log-probabilities asked for.
struct TokenOutput {
  int32_t token = 0;
  float logprob = 0.0f;                                 // when log-probabilities were asked for
  std::vector<std::pair<int32_t, float>> top_logprobs;  // best first
};

// Thread-compatible scratch space; sampling itself is stateless. The token is a pure
// function of (logits, params, history, seed, counter): the draw's uniform comes from a
// counter-based Philox stream keyed by the seed, so a sequence's n-th token does not depend
// on what ran before it (preemption, batch composition, a retried step).
class Sampler {
 public:
  // Picks the next token. `history` is the prompt plus the tokens generated so far (for the
  // penalties); `counter` is the number of tokens generated so far (the tail of `history`).
  // `banned` ids are never drawn. `allowed`, when not empty, is a bitset over the vocabulary
  // (bit id % 64 of word id / 64; a structured-output grammar's mask): only its ids are
  // drawn. Ties in greedy mode go to the lowest id, as argmax does.
  int32_t Sample(std::span<const float> logits, const SamplingParams& params, std::span<const int32_t> history,
                 uint64_t seed, uint64_t counter, std::span<const int32_t> banned = {},
                 std::span<const uint64_t> allowed = {});

  // The chosen token's log-probability under the unprocessed distribution (what the APIs
  // report) and, for top_k > 0, the k most likely tokens (ties to the lower id).
  TokenOutput Logprobs(std::span<const float> logits, int32_t token, int top_k);

  // Natural-log probability of every token, written to `out`.
  static void LogSoftmax(std::span<const float> logits, std::vector<float>& out);

 private:
  std::vector<float> scratch_;
  std::vector<int32_t> candidates_;
  std::vector<uint8_t> seen_;
  std::vector<double> probs_;
  std::vector<kernels::LogitAdjustment> adjust_;
};

// A uniform double in [0, 1) for draw `counter` of stream `seed` (Philox4x32-10).
double UniformDraw(uint64_t seed, uint64_t counter);

int32_t Argmax(std::span<const float> logits);

}  // namespace ferry::engine
