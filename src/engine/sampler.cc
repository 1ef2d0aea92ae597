#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

namespace ferry::engine {

Status SamplingParams::Validate() const {
  if (!(temperature >= 0.0f) || !std::isfinite(temperature)) {
    return InvalidArgument("temperature must be a finite number >= 0");
  }
  if (top_k < 0) return InvalidArgument("top_k must be >= 0 (0 disables it)");
  if (!(top_p > 0.0f && top_p <= 1.0f)) return InvalidArgument("top_p must be in (0, 1]");
  if (!(min_p >= 0.0f && min_p <= 1.0f)) return InvalidArgument("min_p must be in [0, 1]");
  if (!(repetition_penalty > 0.0f) || !std::isfinite(repetition_penalty)) {
    return InvalidArgument("repetition_penalty must be a finite number > 0");
  }
  return Status::Ok();
}

int32_t Argmax(std::span<const float> logits) {
  int32_t best = 0;
  float best_value = -INFINITY;
  for (size_t i = 0; i < logits.size(); ++i) {
    if (logits[i] > best_value) {
      best_value = logits[i];
      best = static_cast<int32_t>(i);
    }
  }
  return best;
}

int32_t Sampler::Sample(std::span<const float> logits, const SamplingParams& p, std::span<const int32_t> history) {
  const int32_t vocab = static_cast<int32_t>(logits.size());
  scratch_.assign(logits.begin(), logits.end());
  if (p.repetition_penalty != 1.0f) {
    // Each distinct earlier token is penalised once (as transformers' gather/scatter does):
    // positive logits divided, negative ones multiplied.
    seen_.resize(vocab, 0);
    for (int32_t id : history) {
      if (id < 0 || id >= vocab || seen_[id]) continue;
      seen_[id] = 1;
      float& l = scratch_[id];
      l = l > 0 ? l / p.repetition_penalty : l * p.repetition_penalty;
    }
    for (int32_t id : history) {
      if (id >= 0 && id < vocab) seen_[id] = 0;
    }
  }
  if (p.greedy()) return Argmax(scratch_);

  const float inv_t = 1.0f / p.temperature;
  candidates_.resize(vocab);
  std::iota(candidates_.begin(), candidates_.end(), 0);
  auto by_logit = [this](int32_t a, int32_t b) {
    return scratch_[a] > scratch_[b] || (scratch_[a] == scratch_[b] && a < b);
  };
  size_t n = candidates_.size();
  if (p.top_k > 0 && static_cast<size_t>(p.top_k) < n) {
    std::nth_element(candidates_.begin(), candidates_.begin() + p.top_k, candidates_.end(), by_logit);
    n = static_cast<size_t>(p.top_k);
  }
  std::sort(candidates_.begin(), candidates_.begin() + n, by_logit);
  // Softmax over the candidates, at temperature.
  const float max_logit = scratch_[candidates_[0]] * inv_t;
  std::vector<double> probs(n);
  double sum = 0.0;
  for (size_t i = 0; i < n; ++i) {
    probs[i] = std::exp(static_cast<double>(scratch_[candidates_[i]] * inv_t - max_logit));
    sum += probs[i];
  }
  for (double& q : probs) q /= sum;
  if (p.top_p < 1.0f) {
    // Keep the smallest prefix whose mass reaches top_p (at least one token).
    double cum = 0.0;
    size_t keep = 0;
    while (keep < n) {
      cum += probs[keep++];
      if (cum >= p.top_p) break;
    }
    n = keep;
  }
  if (p.min_p > 0.0f) {
    const double threshold = probs[0] * p.min_p;
    size_t keep = 1;
    while (keep < n && probs[keep] >= threshold) ++keep;
    n = keep;
  }
  double total = 0.0;
  for (size_t i = 0; i < n; ++i) total += probs[i];
  std::uniform_real_distribution<double> uniform(0.0, total);
  double r = uniform(rng_);
  for (size_t i = 0; i < n; ++i) {
    r -= probs[i];
    if (r <= 0.0) return candidates_[i];
  }
  return candidates_[n - 1];
}

void Sampler::LogSoftmax(std::span<const float> logits, std::vector<float>& out) {
  out.resize(logits.size());
  float max_logit = -INFINITY;
  for (float l : logits) max_logit = std::max(max_logit, l);
  double sum = 0.0;
  for (float l : logits) sum += std::exp(static_cast<double>(l - max_logit));
  const float log_sum = static_cast<float>(std::log(sum)) + max_logit;
  for (size_t i = 0; i < logits.size(); ++i) out[i] = logits[i] - log_sum;
}

}  // namespace ferry::engine
