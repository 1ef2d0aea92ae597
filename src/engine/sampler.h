// Token sampling from logits: greedy, temperature, top-k, top-p, min-p, repetition penalty,
// seeded. The processors apply in transformers' order: penalty, temperature, top-k, top-p, min-p.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "core/status.h"

namespace ferry::engine {

// Temperatures below this sample greedily (as vLLM's 1e-5): dividing logits by a tinier
// one overflows to infinities, whose softmax is NaN.
constexpr float kGreedyTemperature = 1e-5f;

struct SamplingParams {
  float temperature = 1.0f;         // 0 (or below kGreedyTemperature) = greedy
  int top_k = 0;                    // 0 = off
  float top_p = 1.0f;               // 1 = off
  float min_p = 0.0f;               // 0 = off
  float repetition_penalty = 1.0f;  // 1 = off
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
  // repetition penalty); `counter` is the number of tokens generated so far. Ties in greedy
  // mode go to the lowest id, as argmax does.
  int32_t Sample(std::span<const float> logits, const SamplingParams& params, std::span<const int32_t> history,
                 uint64_t seed, uint64_t counter);

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
};

// A uniform double in [0, 1) for draw `counter` of stream `seed` (Philox4x32-10).
double UniformDraw(uint64_t seed, uint64_t counter);

int32_t Argmax(std::span<const float> logits);

}  // namespace ferry::engine
