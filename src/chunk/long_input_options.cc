#include "chunk/long_input_options.h"

#include <array>
#include <string>
#include <utility>

namespace ferry::chunk {
namespace {

template <typename E, size_t N>
std::optional<E> Lookup(const std::array<std::pair<std::string_view, E>, N>& names, std::string_view name) {
  for (const auto& [n, v] : names) {
    if (n == name) return v;
  }
  return std::nullopt;
}

template <typename E, size_t N>
std::string_view NameOf(const std::array<std::pair<std::string_view, E>, N>& names, E value) {
  for (const auto& [n, v] : names) {
    if (v == value) return n;
  }
  return "unknown";
}

constexpr std::array<std::pair<std::string_view, Truncation>, 3> kTruncations{{
    {"error", Truncation::kError}, {"end", Truncation::kEnd}, {"chunk", Truncation::kChunk}}};
constexpr std::array<std::pair<std::string_view, ClassifyAggregate>, 3> kClassifyAggregates{{
    {"weighted_mean", ClassifyAggregate::kWeightedMean},
    {"mean_probs", ClassifyAggregate::kMeanProbs},
    {"max", ClassifyAggregate::kMax}}};
constexpr std::array<std::pair<std::string_view, EmbedAggregate>, 2> kEmbedAggregates{{
    {"weighted_mean", EmbedAggregate::kWeightedMean}, {"first", EmbedAggregate::kFirst}}};
constexpr std::array<std::pair<std::string_view, TokenAggregation>, 5> kTokenAggregations{{
    {"none", TokenAggregation::kNone},
    {"simple", TokenAggregation::kSimple},
    {"first", TokenAggregation::kFirst},
    {"average", TokenAggregation::kAverage},
    {"max", TokenAggregation::kMax}}};
constexpr std::array<std::pair<std::string_view, TokenMerge>, 2> kTokenMerges{{
    {"center", TokenMerge::kCenter}, {"hf", TokenMerge::kHf}}};

}  // namespace

Status LongInputOptions::Validate() const {
  if (chunk_tokens < 0) return InvalidArgument("chunk_tokens: must be >= 0 (0: the model's context), got " +
                                               std::to_string(chunk_tokens));
  if (chunk_overlap < -1) {
    return InvalidArgument("chunk_overlap: must be >= 0 (or -1: an eighth of the window), got " +
                           std::to_string(chunk_overlap));
  }
  if (chunk_tokens > 0 && chunk_overlap >= chunk_tokens) {
    return InvalidArgument("chunk_overlap: " + std::to_string(chunk_overlap) + " leaves no content token in a " +
                           std::to_string(chunk_tokens) + "-token window; it must be < chunk_tokens");
  }
  if (max_inputs < 1 || max_inputs > 1000000) {
    return InvalidArgument("max_inputs: must be in [1, 1000000], got " + std::to_string(max_inputs));
  }
  if (max_input_tokens < 0) {
    return InvalidArgument("max_input_tokens: must be >= 0 (0: no limit), got " + std::to_string(max_input_tokens));
  }
  return Status::Ok();
}

Result<WindowGeometry> ResolveWindow(int chunk_tokens, int chunk_overlap, int context) {
  WindowGeometry g;
  g.chunk_tokens = chunk_tokens == 0 ? context : chunk_tokens;
  if (g.chunk_tokens < 1 || g.chunk_tokens > context) {
    return InvalidArgument("chunk_tokens: must be in [1, " + std::to_string(context) +
                           "] (the model's context), got " + std::to_string(g.chunk_tokens));
  }
  g.chunk_overlap = chunk_overlap < 0 ? g.chunk_tokens / 8 : chunk_overlap;
  if (g.chunk_overlap >= g.chunk_tokens) {
    return InvalidArgument("chunk_overlap: " + std::to_string(g.chunk_overlap) + " leaves no content token in a " +
                           std::to_string(g.chunk_tokens) + "-token window; it must be < chunk_tokens");
  }
  return g;
}

std::string_view TruncationName(Truncation t) { return NameOf(kTruncations, t); }
std::string_view ClassifyAggregateName(ClassifyAggregate a) { return NameOf(kClassifyAggregates, a); }
std::string_view EmbedAggregateName(EmbedAggregate a) { return NameOf(kEmbedAggregates, a); }
std::string_view TokenAggregationName(TokenAggregation a) { return NameOf(kTokenAggregations, a); }
std::string_view TokenMergeName(TokenMerge m) { return NameOf(kTokenMerges, m); }
std::optional<Truncation> ParseTruncation(std::string_view n) { return Lookup(kTruncations, n); }
std::optional<ClassifyAggregate> ParseClassifyAggregate(std::string_view n) { return Lookup(kClassifyAggregates, n); }
std::optional<EmbedAggregate> ParseEmbedAggregate(std::string_view n) { return Lookup(kEmbedAggregates, n); }
std::optional<TokenAggregation> ParseTokenAggregation(std::string_view n) { return Lookup(kTokenAggregations, n); }
std::optional<TokenMerge> ParseTokenMerge(std::string_view n) { return Lookup(kTokenMerges, n); }

}  // namespace ferry::chunk
