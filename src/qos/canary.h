// The canary check of a variant: does it still compute what the top variant computes?
// Decoders: the top variant's greedy continuation of the canary prompt is the reference;
// a lower variant is fed prompt + reference (teacher forcing) and its top-1 prediction is
// compared at every continuation position, so one early divergence does not cascade (a
// lower precision legitimately drifts from the top's free-running output). Encoders: the
// cosine similarity of the output rows.
#pragma once

#include <chrono>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "sched/continuous_batcher.h"

namespace ferry::qos {

// Fraction of positions where `predicted[i] == reference[i]` (over the shorter length; 0
// when either is empty).
double TokenAgreement(std::span<const int32_t> reference, std::span<const int32_t> predicted);
// Cosine similarity of two rows of equal length; 0 for empty or zero rows.
double CosineSimilarity(std::span<const float> a, std::span<const float> b);

// The tier canary sequences run under: no tier of a server config can have this name, so
// the load monitor does not count them as traffic.
inline constexpr const char* kCanaryTier = "(canary)";

// The top variant's greedy continuation of `prompt` (exactly `tokens` tokens, end of
// sequence ignored), through its batcher. Blocks until done or `timeout`.
Result<std::vector<int32_t>> GreedyReference(sched::ContinuousBatcher& batcher, const std::vector<int32_t>& prompt,
                                             int tokens, std::chrono::milliseconds timeout);

// The teacher-forced top-1 agreement of a variant with `reference` (the top variant's
// continuation of `prompt`): one pass over prompt + reference with prompt log-probabilities,
// through the variant's batcher. Blocks until done or `timeout`.
Result<double> TeacherForcedAgreement(sched::ContinuousBatcher& batcher, const std::vector<int32_t>& prompt,
                                      const std::vector<int32_t>& reference, std::chrono::milliseconds timeout);

// The startup probe that measures how fast a variant really is on this device: the seconds
// its batcher takes for `sequences` greedy requests of `prompt_len` fixed pseudo-random
// tokens and `tokens` generated tokens each, submitted together. Blocks until done or
// `timeout`.
Result<double> ProbeSeconds(sched::ContinuousBatcher& batcher, int vocab, int sequences, int prompt_len, int tokens,
                            std::chrono::milliseconds timeout);

}  // namespace ferry::qos
