// Encoder passes: classification logits, per-token logits and sentence embeddings for a
// batch of inputs (already tokenized with their special tokens), packed back to back
// without padding.
#pragma once

#include <vector>

#include "engine/engine.h"

namespace ferry::engine {

struct EncodedInput {
  std::vector<int32_t> ids;
  std::vector<int32_t> type_ids;
};
// sentence-transformers' pooling modes: the CLS (first) row, the mean or element-wise max
// of all rows, or the last row.
enum class Pooling { kCls, kMean, kMax, kLast };

// Classification logits [inputs, labels] (host f32).
Result<Tensor> Classify(const Engine& engine, const std::vector<EncodedInput>& inputs);
// Token-classification logits [total tokens, labels] (host f32): the rows of input i follow
// those of input i - 1, one per token, special tokens included.
Result<Tensor> ClassifyTokens(const Engine& engine, const std::vector<EncodedInput>& inputs);
// Sentence embeddings [inputs, hidden]: CLS row or mean over tokens, optionally L2-normalised.
Result<Tensor> Embed(const Engine& engine, const std::vector<EncodedInput>& inputs, Pooling pooling, bool normalize);

}  // namespace ferry::engine
