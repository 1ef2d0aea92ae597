// Token sampling from logits: greedy, temperature, top-k, top-p, min-p, repetition penalty,
// seeded. The processors apply in transformers' order: penalty, temperature, top-k, top-p, min-p.
#pragma once

#include <cstdint>
#include <optional>
#include <random>
#include <span>
#include <vector>

#include "core/status.h"

namespace ferry::engine {

struct SamplingParams {
  float temperature = 1.0f;         // 0 = greedy
  int top_k = 0;                    // 0 = off
  float top_p = 1.0f;               // 1 = off
  float min_p = 0.0f;               // 0 = off
  float repetition_penalty = 1.0f;  // 1 = off
  std::optional<uint64_t> seed;     // absent: seeded from the request id

  Status Validate() const;
  bool greedy() const { return temperature == 0.0f; }
};

// Thread-compatible: one per sequence (it owns the sequence's random stream).
class Sampler {
 public:
  explicit Sampler(uint64_t seed) : rng_(seed) {}

  // Picks the next token. `history` is the prompt plus the tokens generated so far (for the
  // repetition penalty). Ties in greedy mode go to the lowest id, as argmax does.
  int32_t Sample(std::span<const float> logits, const SamplingParams& params, std::span<const int32_t> history);

  // Natural-log probability of every token under the temperature-only distribution
  // (the logprobs that APIs report), written to `out`.
  static void LogSoftmax(std::span<const float> logits, std::vector<float>& out);

 private:
  std::mt19937_64 rng_;
  std::vector<float> scratch_;
  std::vector<int32_t> candidates_;
  std::vector<uint8_t> seen_;
};

int32_t Argmax(std::span<const float> logits);

}  // namespace ferry::engine
