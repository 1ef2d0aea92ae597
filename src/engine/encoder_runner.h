// Encoder passes: classification logits and sentence embeddings for a batch of inputs
// (already tokenized with their special tokens), packed back to back without padding.
#pragma once

#include <vector>

#include "engine/engine.h"

namespace ferry::engine {

struct EncodedInput {
  std::vector<int32_t> ids;
  std::vector<int32_t> type_ids;
};
enum class Pooling { kCls, kMean };

// Classification logits [inputs, labels] (host f32).
Result<Tensor> Classify(const Engine& engine, const std::vector<EncodedInput>& inputs);
// Sentence embeddings [inputs, hidden]: CLS row or mean over tokens, optionally L2-normalised.
Result<Tensor> Embed(const Engine& engine, const std::vector<EncodedInput>& inputs, Pooling pooling, bool normalize);

}  // namespace ferry::engine
