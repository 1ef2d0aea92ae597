// Merging the results of one input's windows into one result: sequence classification
// (logits) and embeddings (pooled vectors). Pure functions over host vectors.
#pragma once

#include <vector>

#include "chunk/long_input_options.h"

namespace ferry::chunk {

// Softmax in double precision (max-shifted).
std::vector<double> Softmax(const std::vector<float>& logits);

struct MergedClassification {
  // Logits whose softmax is `probs`: the merged logits for kWeightedMean and kMax, the log
  // of the merged probabilities for kMeanProbs.
  std::vector<float> logits;
  std::vector<double> probs;
};

// `window_logits[w]` are window w's logits, `weights[w]` its content tokens (> 0). One window
// gives its own logits whatever the aggregate.
MergedClassification MergeClassification(const std::vector<std::vector<float>>& window_logits,
                                         const std::vector<int>& weights, ClassifyAggregate aggregate);

// `window_vectors[w]` are window w's pooled vectors (not normalized), weighted as above.
std::vector<float> MergeEmbeddings(const std::vector<std::vector<float>>& window_vectors,
                                   const std::vector<int>& weights, EmbedAggregate aggregate);

// Scales `v` to unit L2 norm (a zero vector stays zero), in double precision.
void L2Normalize(std::vector<float>& v);

}  // namespace ferry::chunk
