// Quality measurements with ferry's own engine (decoders through the engine core): decoder perplexity over documents and
// classifier accuracy over labelled texts. Used by `ferry eval` and the quality tables.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "chunk/offline.h"
#include "engine/engine.h"

namespace ferry::tools {

struct PerplexityResult {
  double perplexity = 0;
  double nll = 0;          // total negative log-likelihood (nats)
  int64_t tokens = 0;      // predicted tokens
  int64_t windows = 0;
};

// Each document is a token sequence (BOS included by the caller). It is cut into
// non-overlapping windows: window k feeds positions [wk, wk + w) and predicts
// [wk + 1, wk + w + 1), so every token after the first is predicted exactly once and the
// context restarts at each window. Perplexity = exp(total NLL / predicted tokens).
Result<PerplexityResult> Perplexity(std::shared_ptr<engine::Engine> model, const std::vector<std::vector<int32_t>>& docs,
                                    int window);

struct ClassificationResult {
  int64_t correct = 0;
  int64_t total = 0;
  int64_t truncated = 0;  // inputs longer than max_tokens (cut)
  double accuracy() const { return total ? static_cast<double>(correct) / total : 0.0; }
  std::vector<int> predictions;
};

// Tokenizes each text with the model's special tokens, truncated to max_tokens (the text
// is cut, then [CLS]/[SEP] added, as transformers' truncation=True does), and compares
// the argmax label with `labels`.
Result<ClassificationResult> EvaluateClassifier(const engine::Engine& model, const std::vector<std::string>& texts,
                                                const std::vector<int>& labels, int max_tokens);

struct ChunkedClassificationResult {
  ClassificationResult result;
  int64_t windows = 0;  // model inputs run, over all texts
  int64_t tokens = 0;   // tokens the model read
};

// The same over whole texts cut into windows (or truncated) by chunk/, merged by `aggregate`:
// what /v1/classify answers with those settings.
Result<ChunkedClassificationResult> EvaluateChunkedClassifier(const engine::Engine& model,
                                                              const std::vector<std::string>& texts,
                                                              const std::vector<int>& labels,
                                                              const chunk::OfflineOptions& options,
                                                              chunk::ClassifyAggregate aggregate);

// A labelled span of a text, in code points.
struct GoldEntity {
  uint32_t start = 0;
  uint32_t end = 0;
  std::string label;
};

struct EntityScores {
  int64_t true_positives = 0;
  int64_t predicted = 0;
  int64_t gold = 0;
  int64_t windows = 0;
  double precision() const { return predicted ? static_cast<double>(true_positives) / predicted : 0.0; }
  double recall() const { return gold ? static_cast<double>(true_positives) / gold : 0.0; }
  double f1() const {
    const double p = precision(), r = recall();
    return p + r > 0 ? 2 * p * r / (p + r) : 0.0;
  }
};

// Entity-level precision, recall and F1 of a token classifier: a predicted entity counts
// when its label and character span equal a gold one's (the exact-match rule of seqeval
// and the CoNLL evaluation, on spans of the text).
Result<EntityScores> EvaluateTokenClassifier(const engine::Engine& model, const std::vector<std::string>& texts,
                                             const std::vector<std::vector<GoldEntity>>& gold,
                                             const chunk::OfflineOptions& options,
                                             chunk::TokenAggregation aggregation, chunk::TokenMerge merge);

struct AgreementResult {
  double max_abs_error = 0;     // max |candidate - reference| over every logit compared
  double mean_abs_error = 0;    // mean of the same
  double max_abs_reference = 0; // max |reference logit| (scale for the errors)
  double teacher_forced_agreement = 0;  // fraction of positions whose argmax agrees, both fed
                                        // the reference's greedy continuation
  double mean_prefix_match = 0; // mean length of the identical prefix of free-running greedy
  int64_t positions = 0;
  int prompts = 0;
  int steps = 0;
};

// Compares a candidate decoder (another precision of the same model) with a reference:
// the reference generates `steps` greedy tokens after each prompt; both models then score
// prompt + continuation in one pass, and their logits and argmaxes are compared at every
// continuation position. The candidate also generates freely to measure the common prefix.
Result<AgreementResult> CompareDecoders(std::shared_ptr<engine::Engine> reference,
                                        std::shared_ptr<engine::Engine> candidate,
                                        const std::vector<std::vector<int32_t>>& prompts, int steps);

// Truncates an encoding with special tokens to max_tokens keeping the trailing special
// token(s) (e.g. [CLS] a b c [SEP] -> [CLS] a [SEP]). Returns whether it cut anything.
bool TruncateEncoding(std::vector<int32_t>& ids, std::vector<int32_t>& type_ids, int max_tokens, int trailing_special);

}  // namespace ferry::tools
