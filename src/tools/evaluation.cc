#include "tools/evaluation.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <tuple>

#include "engine/encoder_runner.h"
#include "sched/engine_core.h"

namespace ferry::tools {

namespace {

sched::GenerationRequest Greedy(std::vector<int32_t> prompt, int max_tokens) {
  return sched::FixedLengthGreedy("eval", std::move(prompt), max_tokens);
}

// A core for offline passes over sequences of up to `max_seq_len` tokens, `seqs` at a time,
// each prompt prefilled in one step.
Result<std::unique_ptr<sched::EngineCore>> OfflineCore(const std::shared_ptr<engine::Engine>& model, int seqs,
                                                       int max_seq_len) {
  sched::EngineCoreOptions co;
  co.batching.max_num_seqs = seqs;
  co.batching.max_seq_len = max_seq_len;
  co.batching.max_num_batched_tokens = std::max(seqs * max_seq_len, seqs);
  co.batching.max_queue_tokens = static_cast<int64_t>(seqs) * max_seq_len + 1;
  return sched::EngineCore::Create("eval", model, co);
}

Result<sched::GenerationEvent> RunOne(sched::EngineCore& core, sched::GenerationRequest request) {
  FERRY_ASSIGN_OR_RETURN(std::vector<sched::GenerationEvent> out, sched::GenerateAll(core, {std::move(request)}));
  if (!out[0].error.ok()) return out[0].error;
  return std::move(out[0]);
}

}  // namespace

Result<PerplexityResult> Perplexity(std::shared_ptr<engine::Engine> model, const std::vector<std::vector<int32_t>>& docs,
                                    int window) {
  if (!model->is_decoder()) return InvalidArgument("perplexity needs a decoder model");
  if (window <= 1) return InvalidArgument("window must be > 1");
  // Window k feeds ids [start, start + len) and predicts ids [start + 1, start + len]; the
  // request's prompt is ids [start, start + len], whose prompt log-probabilities are exactly
  // those predictions (the last prompt token adds a position whose output nothing reads).
  std::vector<std::vector<int32_t>> windows;
  for (const std::vector<int32_t>& ids : docs) {
    for (size_t start = 0; start + 1 < ids.size(); start += window) {
      const size_t len = std::min<size_t>(window, ids.size() - 1 - start);
      windows.emplace_back(ids.begin() + static_cast<std::ptrdiff_t>(start),
                           ids.begin() + static_cast<std::ptrdiff_t>(start + len + 1));
    }
  }
  constexpr int kBatch = 8;
  FERRY_ASSIGN_OR_RETURN(auto core, OfflineCore(model, kBatch, window + 2));
  PerplexityResult r;
  for (size_t i = 0; i < windows.size(); i += kBatch) {
    std::vector<sched::GenerationRequest> requests;
    for (size_t j = i; j < std::min(windows.size(), i + kBatch); ++j) {
      sched::GenerationRequest req = Greedy(windows[j], 1);
      req.prompt_logprobs = true;
      req.logprobs = 0;
      requests.push_back(std::move(req));
    }
    FERRY_ASSIGN_OR_RETURN(std::vector<sched::GenerationEvent> out, sched::GenerateAll(*core, std::move(requests)));
    for (const sched::GenerationEvent& ev : out) {
      if (!ev.error.ok()) return ev.error;
      // prompt_tokens[0] is the first token itself (nothing predicts it).
      for (size_t t = 1; t < ev.prompt_tokens.size(); ++t) {
        r.nll -= static_cast<double>(ev.prompt_tokens[t].logprob);
        ++r.tokens;
      }
    }
  }
  r.windows = static_cast<int64_t>(windows.size());
  r.perplexity = r.tokens ? std::exp(r.nll / r.tokens) : 0.0;
  return r;
}

Result<AgreementResult> CompareDecoders(std::shared_ptr<engine::Engine> reference,
                                        std::shared_ptr<engine::Engine> candidate,
                                        const std::vector<std::vector<int32_t>>& prompts, int steps) {
  if (!reference->is_decoder() || !candidate->is_decoder()) return InvalidArgument("comparison needs two decoders");
  if (reference->config().vocab_size != candidate->config().vocab_size) {
    return InvalidArgument("the two models have different vocabularies");
  }
  if (prompts.empty() || steps <= 0) return InvalidArgument("need prompts and steps > 0");
  const int vocab = reference->config().vocab_size;
  size_t longest = 0;
  for (const auto& p : prompts) longest = std::max(longest, p.size());
  const int max_seq = static_cast<int>(longest) + steps + 1;
  FERRY_ASSIGN_OR_RETURN(auto ref_core, OfflineCore(reference, 1, max_seq));
  FERRY_ASSIGN_OR_RETURN(auto cand_core, OfflineCore(candidate, 1, max_seq));
  AgreementResult r;
  r.prompts = static_cast<int>(prompts.size());
  r.steps = steps;
  double abs_sum = 0;
  int64_t abs_count = 0, agree = 0, prefix_sum = 0;
  for (const std::vector<int32_t>& prompt : prompts) {
    FERRY_ASSIGN_OR_RETURN(sched::GenerationEvent ref_gen, RunOne(*ref_core, Greedy(prompt, steps)));
    FERRY_ASSIGN_OR_RETURN(sched::GenerationEvent cand_gen, RunOne(*cand_core, Greedy(prompt, steps)));
    std::vector<int32_t> cont, free_run;
    for (const auto& t : ref_gen.tokens) cont.push_back(t.token);
    for (const auto& t : cand_gen.tokens) free_run.push_back(t.token);
    size_t prefix = 0;
    while (prefix < cont.size() && prefix < free_run.size() && cont[prefix] == free_run[prefix]) ++prefix;
    prefix_sum += static_cast<int64_t>(prefix);
    // Score prompt + continuation (minus its last token) in one pass with both models: the
    // logits of every position come back with the prompt log-probabilities.
    std::vector<int32_t> seq = prompt;
    seq.insert(seq.end(), cont.begin(), cont.end() - 1);
    sched::GenerationRequest score = Greedy(seq, 1);
    score.prompt_logprobs = true;
    score.keep_logits = true;
    FERRY_ASSIGN_OR_RETURN(sched::GenerationEvent a, RunOne(*ref_core, score));
    FERRY_ASSIGN_OR_RETURN(sched::GenerationEvent b, RunOne(*cand_core, score));
    if (a.logits.size() != seq.size() * vocab || b.logits.size() != seq.size() * vocab) {
      return Internal("the scoring pass returned " + std::to_string(a.logits.size() / vocab) + " rows for " +
                      std::to_string(seq.size()) + " positions");
    }
    for (size_t pos = prompt.size() - 1; pos < seq.size(); ++pos) {
      const float* ra = a.logits.data() + pos * vocab;
      const float* rb = b.logits.data() + pos * vocab;
      int32_t am = 0, bm = 0;
      for (int v = 0; v < vocab; ++v) {
        const double d = std::fabs(static_cast<double>(ra[v]) - rb[v]);
        r.max_abs_error = std::max(r.max_abs_error, d);
        r.max_abs_reference = std::max(r.max_abs_reference, static_cast<double>(std::fabs(ra[v])));
        abs_sum += d;
        if (ra[v] > ra[am]) am = v;
        if (rb[v] > rb[bm]) bm = v;
      }
      abs_count += vocab;
      agree += am == bm;
      ++r.positions;
    }
  }
  r.mean_abs_error = abs_count ? abs_sum / static_cast<double>(abs_count) : 0;
  r.teacher_forced_agreement = r.positions ? static_cast<double>(agree) / static_cast<double>(r.positions) : 0;
  r.mean_prefix_match = static_cast<double>(prefix_sum) / static_cast<double>(prompts.size());
  return r;
}

bool TruncateEncoding(std::vector<int32_t>& ids, std::vector<int32_t>& type_ids, int max_tokens, int trailing_special) {
  if (static_cast<int>(ids.size()) <= max_tokens) return false;
  const std::vector<int32_t> tail(ids.end() - trailing_special, ids.end());
  const std::vector<int32_t> tail_types(type_ids.end() - trailing_special, type_ids.end());
  ids.resize(max_tokens - trailing_special);
  type_ids.resize(max_tokens - trailing_special);
  ids.insert(ids.end(), tail.begin(), tail.end());
  type_ids.insert(type_ids.end(), tail_types.begin(), tail_types.end());
  return true;
}

Result<ClassificationResult> EvaluateClassifier(const engine::Engine& model, const std::vector<std::string>& texts,
                                                const std::vector<int>& labels, int max_tokens) {
  if (model.encoder() == nullptr || model.tokenizer() == nullptr) {
    return InvalidArgument("classifier evaluation needs an encoder model with a tokenizer");
  }
  if (texts.size() != labels.size()) return InvalidArgument("texts and labels differ in number");
  if (max_tokens < 3) return InvalidArgument("max_tokens must be >= 3");
  ClassificationResult r;
  constexpr size_t kBatch = 32;
  const int num_labels = model.config().num_labels;
  for (size_t i = 0; i < texts.size(); i += kBatch) {
    std::vector<engine::EncodedInput> inputs;
    for (size_t j = i; j < std::min(texts.size(), i + kBatch); ++j) {
      FERRY_ASSIGN_OR_RETURN(tokenizer::Encoding enc, model.tokenizer()->EncodeWithSpecial(texts[j]));
      engine::EncodedInput in{std::move(enc.ids), std::move(enc.type_ids)};
      if (in.type_ids.empty()) in.type_ids.assign(in.ids.size(), 0);
      // A single sequence ends with exactly one special token ([SEP]) when it has one.
      const bool ends_special = !in.ids.empty() && model.tokenizer()->IsSpecial(in.ids.back());
      if (TruncateEncoding(in.ids, in.type_ids, max_tokens, ends_special ? 1 : 0)) ++r.truncated;
      inputs.push_back(std::move(in));
    }
    FERRY_ASSIGN_OR_RETURN(Tensor logits, engine::Classify(model, inputs));
    for (size_t j = 0; j < inputs.size(); ++j) {
      const float* row = logits.data<float>() + j * num_labels;
      const int pred = static_cast<int>(std::max_element(row, row + num_labels) - row);
      r.predictions.push_back(pred);
      r.correct += pred == labels[i + j];
      ++r.total;
    }
  }
  return r;
}

Result<ChunkedClassificationResult> EvaluateChunkedClassifier(const engine::Engine& model,
                                                              const std::vector<std::string>& texts,
                                                              const std::vector<int>& labels,
                                                              const chunk::OfflineOptions& options,
                                                              chunk::ClassifyAggregate aggregate) {
  if (texts.size() != labels.size()) return InvalidArgument("texts and labels differ in number");
  ChunkedClassificationResult r;
  for (size_t i = 0; i < texts.size(); ++i) {
    FERRY_ASSIGN_OR_RETURN(chunk::DocumentClassification c,
                           chunk::ClassifyDocument(model, texts[i], std::nullopt, options, aggregate));
    const std::vector<double>& p = c.merged.probs;
    const int pred = static_cast<int>(std::max_element(p.begin(), p.end()) - p.begin());
    r.result.predictions.push_back(pred);
    r.result.correct += pred == labels[i];
    ++r.result.total;
    r.result.truncated += c.info.truncated || c.info.windows > 1;
    r.windows += c.info.windows;
    r.tokens += c.info.tokens;
  }
  return r;
}

Result<EntityScores> EvaluateTokenClassifier(const engine::Engine& model, const std::vector<std::string>& texts,
                                             const std::vector<std::vector<GoldEntity>>& gold,
                                             const chunk::OfflineOptions& options,
                                             chunk::TokenAggregation aggregation, chunk::TokenMerge merge) {
  if (texts.size() != gold.size()) return InvalidArgument("texts and gold entities differ in number");
  EntityScores s;
  for (size_t i = 0; i < texts.size(); ++i) {
    FERRY_ASSIGN_OR_RETURN(chunk::DocumentTokens d,
                           chunk::TokenClassifyDocument(model, texts[i], options, aggregation, merge));
    std::set<std::tuple<uint32_t, uint32_t, std::string>> want;
    for (const GoldEntity& g : gold[i]) want.emplace(g.start, g.end, g.label);
    for (const chunk::Entity& e : d.entities) s.true_positives += want.count({e.start, e.end, e.label});
    s.predicted += static_cast<int64_t>(d.entities.size());
    s.gold += static_cast<int64_t>(want.size());
    s.windows += d.info.windows;
  }
  return s;
}

}  // namespace ferry::tools
