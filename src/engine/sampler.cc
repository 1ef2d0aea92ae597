#include "engine/sampler.h"

#include <algorithm>
#include <bit>
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
  if (!(presence_penalty >= -2.0f && presence_penalty <= 2.0f)) return InvalidArgument("presence_penalty must be in [-2, 2]");
  if (!(frequency_penalty >= -2.0f && frequency_penalty <= 2.0f)) {
    return InvalidArgument("frequency_penalty must be in [-2, 2]");
  }
  for (const auto& [id, bias] : logit_bias) {
    if (id < 0) return InvalidArgument("logit_bias: token ids must be >= 0");
    if (!(bias >= -100.0f && bias <= 100.0f)) return InvalidArgument("logit_bias values must be in [-100, 100]");
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

namespace {

// Philox4x32 with 10 rounds (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3").
void Philox4x32(uint32_t ctr[4], uint32_t key0, uint32_t key1) {
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = static_cast<uint64_t>(0xD2511F53u) * ctr[0];
    const uint64_t p1 = static_cast<uint64_t>(0xCD9E8D57u) * ctr[2];
    const uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
    const uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
    const uint32_t next[4] = {hi1 ^ ctr[1] ^ key0, lo1, hi0 ^ ctr[3] ^ key1, lo0};
    for (int i = 0; i < 4; ++i) ctr[i] = next[i];
    key0 += 0x9E3779B9u;
    key1 += 0xBB67AE85u;
  }
}

}  // namespace

double UniformDraw(uint64_t seed, uint64_t counter) {
  uint32_t ctr[4] = {static_cast<uint32_t>(counter), static_cast<uint32_t>(counter >> 32), 0x484F5354u /* "HOST" */,
                     0x53414D50u /* "SAMP" */};
  Philox4x32(ctr, static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
  const uint64_t bits = (static_cast<uint64_t>(ctr[0]) << 21) | (ctr[1] >> 11);  // 53 bits
  return static_cast<double>(bits) * 0x1.0p-53;
}

int32_t Sampler::Sample(std::span<const float> logits, const SamplingParams& p, std::span<const int32_t> history,
                        uint64_t seed, uint64_t counter, std::span<const int32_t> banned,
                        std::span<const uint64_t> allowed) {
  const int32_t vocab = static_cast<int32_t>(logits.size());
  scratch_.assign(logits.begin(), logits.end());
  const kernels::RowPenalties penalties{history,     static_cast<size_t>(counter), p.repetition_penalty,
                                        p.presence_penalty, p.frequency_penalty,   p.logit_bias,
                                        banned};
  if (kernels::NeedsAdjustments(penalties)) {
    adjust_.clear();
    kernels::CollectLogitAdjustments(penalties, 0, vocab, adjust_);
    for (const kernels::LogitAdjustment& a : adjust_) scratch_[a.id] = kernels::AdjustLogit(logits[a.id], a);
  } else if (p.repetition_penalty != 1.0f) {
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
  const bool masked = !allowed.empty();
  if (masked) {
    // The grammar's mask: a disallowed id gets kBannedLogit (as on the GPU), whole words at once.
    for (int32_t w = 0; w * 64 < vocab; ++w) {
      const uint64_t bits = static_cast<size_t>(w) < allowed.size() ? allowed[w] : 0;
      if (bits == ~uint64_t{0}) continue;
      const int32_t end = std::min(vocab, (w + 1) * 64);
      if (bits == 0) {
        std::fill(scratch_.begin() + w * 64, scratch_.begin() + end, kernels::kBannedLogit);
        continue;
      }
      for (int32_t id = w * 64; id < end; ++id) {
        if (!((bits >> (id & 63)) & 1)) scratch_[id] = kernels::kBannedLogit;
      }
    }
  }
  if (p.greedy()) return Argmax(scratch_);

  const float inv_t = 1.0f / p.temperature;
  if (masked) {
    // Only allowed ids can be drawn (the others have probability 0): rank just those.
    candidates_.clear();
    for (int32_t w = 0; w * 64 < vocab && static_cast<size_t>(w) < allowed.size(); ++w) {
      for (uint64_t bits = allowed[w]; bits != 0; bits &= bits - 1) {
        const int32_t id = w * 64 + std::countr_zero(bits);
        if (id < vocab) candidates_.push_back(id);
      }
    }
    if (candidates_.empty()) return Argmax(scratch_);
  } else {
    candidates_.resize(vocab);
    std::iota(candidates_.begin(), candidates_.end(), 0);
  }
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
  std::vector<double>& probs = probs_;
  probs.resize(n);
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
  double r = UniformDraw(seed, counter) * total;
  for (size_t i = 0; i < n; ++i) {
    r -= probs[i];
    if (r <= 0.0) return candidates_[i];
  }
  return candidates_[n - 1];
}

TokenOutput Sampler::Logprobs(std::span<const float> logits, int32_t token, int top_k) {
  TokenOutput out;
  out.token = token;
  LogSoftmax(logits, scratch_);
  out.logprob = scratch_[token];
  if (top_k <= 0) return out;
  const size_t k = std::min<size_t>(static_cast<size_t>(top_k), scratch_.size());
  candidates_.resize(scratch_.size());
  std::iota(candidates_.begin(), candidates_.end(), 0);
  std::partial_sort(candidates_.begin(), candidates_.begin() + static_cast<std::ptrdiff_t>(k), candidates_.end(),
                    [this](int32_t a, int32_t b) { return scratch_[a] > scratch_[b] || (scratch_[a] == scratch_[b] && a < b); });
  for (size_t i = 0; i < k; ++i) out.top_logprobs.emplace_back(candidates_[i], scratch_[candidates_[i]]);
  return out;
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
