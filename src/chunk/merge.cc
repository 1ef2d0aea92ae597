#include "chunk/merge.h"

#include <algorithm>
#include <cmath>

namespace ferry::chunk {

std::vector<double> Softmax(const std::vector<float>& logits) {
  std::vector<double> p(logits.size());
  if (logits.empty()) return p;
  const double mx = *std::max_element(logits.begin(), logits.end());
  double sum = 0.0;
  for (size_t k = 0; k < logits.size(); ++k) sum += p[k] = std::exp(static_cast<double>(logits[k]) - mx);
  for (double& v : p) v /= sum;
  return p;
}

MergedClassification MergeClassification(const std::vector<std::vector<float>>& window_logits,
                                         const std::vector<int>& weights, ClassifyAggregate aggregate) {
  MergedClassification out;
  if (window_logits.empty()) return out;
  const size_t labels = window_logits[0].size();
  if (window_logits.size() == 1) {
    out.logits = window_logits[0];
    out.probs = Softmax(out.logits);
    return out;
  }
  double total_weight = 0.0;
  for (size_t w = 0; w < window_logits.size(); ++w) total_weight += std::max(weights[w], 1);
  switch (aggregate) {
    case ClassifyAggregate::kWeightedMean: {
      std::vector<double> sum(labels, 0.0);
      for (size_t w = 0; w < window_logits.size(); ++w) {
        for (size_t k = 0; k < labels; ++k) sum[k] += std::max(weights[w], 1) * static_cast<double>(window_logits[w][k]);
      }
      out.logits.resize(labels);
      for (size_t k = 0; k < labels; ++k) out.logits[k] = static_cast<float>(sum[k] / total_weight);
      out.probs = Softmax(out.logits);
      break;
    }
    case ClassifyAggregate::kMeanProbs: {
      out.probs.assign(labels, 0.0);
      for (size_t w = 0; w < window_logits.size(); ++w) {
        const std::vector<double> p = Softmax(window_logits[w]);
        for (size_t k = 0; k < labels; ++k) out.probs[k] += std::max(weights[w], 1) * p[k];
      }
      out.logits.resize(labels);
      for (size_t k = 0; k < labels; ++k) {
        out.probs[k] /= total_weight;
        out.logits[k] = static_cast<float>(std::log(std::max(out.probs[k], 1e-300)));
      }
      break;
    }
    case ClassifyAggregate::kMax: {
      out.logits = window_logits[0];
      for (size_t w = 1; w < window_logits.size(); ++w) {
        for (size_t k = 0; k < labels; ++k) out.logits[k] = std::max(out.logits[k], window_logits[w][k]);
      }
      out.probs = Softmax(out.logits);
      break;
    }
  }
  return out;
}

std::vector<float> MergeEmbeddings(const std::vector<std::vector<float>>& window_vectors,
                                   const std::vector<int>& weights, EmbedAggregate aggregate) {
  if (window_vectors.empty()) return {};
  if (window_vectors.size() == 1 || aggregate == EmbedAggregate::kFirst) return window_vectors[0];
  const size_t dims = window_vectors[0].size();
  std::vector<double> sum(dims, 0.0);
  double total_weight = 0.0;
  for (size_t w = 0; w < window_vectors.size(); ++w) {
    const double weight = std::max(weights[w], 1);
    total_weight += weight;
    for (size_t j = 0; j < dims; ++j) sum[j] += weight * static_cast<double>(window_vectors[w][j]);
  }
  std::vector<float> out(dims);
  for (size_t j = 0; j < dims; ++j) out[j] = static_cast<float>(sum[j] / total_weight);
  return out;
}

void L2Normalize(std::vector<float>& v) {
  double norm = 0.0;
  for (float x : v) norm += static_cast<double>(x) * x;
  const double inv = 1.0 / std::max(std::sqrt(norm), 1e-12);
  for (float& x : v) x = static_cast<float>(x * inv);
}

}  // namespace ferry::chunk
