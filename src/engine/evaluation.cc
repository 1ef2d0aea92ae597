#include "engine/evaluation.h"

#include <algorithm>
#include <cmath>

#include "engine/generator.h"

namespace ferry::engine {

Result<PerplexityResult> Perplexity(std::shared_ptr<Engine> engine, const std::vector<std::vector<int32_t>>& docs,
                                    int window) {
  if (!engine->is_decoder()) return InvalidArgument("perplexity needs a decoder model");
  if (window <= 1) return InvalidArgument("window must be > 1");
  struct Window {
    const int32_t* inputs;
    const int32_t* targets;
    int32_t len;
  };
  std::vector<Window> windows;
  for (const std::vector<int32_t>& ids : docs) {
    for (size_t start = 0; start + 1 < ids.size(); start += window) {
      const int32_t len = static_cast<int32_t>(std::min<size_t>(window, ids.size() - 1 - start));
      windows.push_back({ids.data() + start, ids.data() + start + 1, len});
    }
  }
  constexpr int kBatch = 8;
  RunnerOptions ro;
  ro.max_batch_seqs = kBatch;
  ro.max_seq_len = window;
  FERRY_ASSIGN_OR_RETURN(auto runner, DecoderRunner::Create(engine, ro));
  const int vocab = engine->config().vocab_size;
  PerplexityResult r;
  std::vector<SeqStep> steps;
  for (size_t i = 0; i < windows.size(); i += kBatch) {
    steps.clear();
    const size_t n = std::min<size_t>(kBatch, windows.size() - i);
    for (size_t j = 0; j < n; ++j) {
      const Window& w = windows[i + j];
      steps.push_back({static_cast<int64_t>(j), std::span<const int32_t>(w.inputs, w.len), 0, true});
    }
    FERRY_ASSIGN_OR_RETURN(Tensor logits, runner->executor().Step(steps));
    for (size_t j = 0; j < n; ++j) runner->cache().Free(static_cast<int64_t>(j));
    const float* row = logits.data<float>();
    for (size_t j = 0; j < n; ++j) {
      const Window& w = windows[i + j];
      for (int32_t t = 0; t < w.len; ++t, row += vocab) {
        float mx = -INFINITY;
        for (int v = 0; v < vocab; ++v) mx = std::max(mx, row[v]);
        double sum = 0;
        for (int v = 0; v < vocab; ++v) sum += std::exp(static_cast<double>(row[v] - mx));
        const int32_t target = w.targets[t];
        if (target < 0 || target >= vocab) return InvalidArgument("target token outside the vocabulary");
        r.nll += std::log(sum) + mx - row[target];
        ++r.tokens;
      }
    }
  }
  r.windows = static_cast<int64_t>(windows.size());
  r.perplexity = r.tokens ? std::exp(r.nll / r.tokens) : 0.0;
  return r;
}

Result<AgreementResult> CompareDecoders(std::shared_ptr<Engine> reference, std::shared_ptr<Engine> candidate,
                                        const std::vector<std::vector<int32_t>>& prompts, int steps) {
  if (!reference->is_decoder() || !candidate->is_decoder()) return InvalidArgument("comparison needs two decoders");
  if (reference->config().vocab_size != candidate->config().vocab_size) {
    return InvalidArgument("the two models have different vocabularies");
  }
  if (prompts.empty() || steps <= 0) return InvalidArgument("need prompts and steps > 0");
  const int vocab = reference->config().vocab_size;
  size_t longest = 0;
  for (const auto& p : prompts) longest = std::max(longest, p.size());
  RunnerOptions ro;
  ro.max_batch_seqs = 1;
  ro.max_seq_len = static_cast<int>(longest) + steps + 1;
  FERRY_ASSIGN_OR_RETURN(auto ref_runner, DecoderRunner::Create(reference, ro));
  FERRY_ASSIGN_OR_RETURN(auto cand_runner, DecoderRunner::Create(candidate, ro));
  AgreementResult r;
  r.prompts = static_cast<int>(prompts.size());
  r.steps = steps;
  double abs_sum = 0;
  int64_t abs_count = 0, agree = 0, prefix_sum = 0;
  for (const std::vector<int32_t>& prompt : prompts) {
    GenerateRequest req;
    req.prompt = prompt;
    req.sampling.temperature = 0;
    req.max_tokens = steps;
    FERRY_ASSIGN_OR_RETURN(std::vector<GenerateResult> ref_gen, ref_runner->Generate({req}));
    FERRY_ASSIGN_OR_RETURN(std::vector<GenerateResult> cand_gen, cand_runner->Generate({req}));
    const std::vector<int32_t>& cont = ref_gen[0].tokens;
    const std::vector<int32_t>& free_run = cand_gen[0].tokens;
    size_t prefix = 0;
    while (prefix < cont.size() && prefix < free_run.size() && cont[prefix] == free_run[prefix]) ++prefix;
    prefix_sum += static_cast<int64_t>(prefix);
    // Score prompt + continuation (minus its last token) in one pass with both models.
    std::vector<int32_t> seq = prompt;
    seq.insert(seq.end(), cont.begin(), cont.end() - 1);
    FERRY_ASSIGN_OR_RETURN(Tensor a, ref_runner->executor().Step({SeqStep{1, seq, 0, true}}));
    ref_runner->cache().Free(1);
    FERRY_ASSIGN_OR_RETURN(Tensor b, cand_runner->executor().Step({SeqStep{1, seq, 0, true}}));
    cand_runner->cache().Free(1);
    for (size_t pos = prompt.size() - 1; pos < seq.size(); ++pos) {
      const float* ra = a.data<float>() + pos * vocab;
      const float* rb = b.data<float>() + pos * vocab;
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

Result<ClassificationResult> EvaluateClassifier(const Engine& engine, const std::vector<std::string>& texts,
                                                const std::vector<int>& labels, int max_tokens) {
  if (engine.encoder() == nullptr || engine.tokenizer() == nullptr) {
    return InvalidArgument("classifier evaluation needs an encoder model with a tokenizer");
  }
  if (texts.size() != labels.size()) return InvalidArgument("texts and labels differ in number");
  if (max_tokens < 3) return InvalidArgument("max_tokens must be >= 3");
  ClassificationResult r;
  constexpr size_t kBatch = 32;
  const int num_labels = engine.config().num_labels;
  for (size_t i = 0; i < texts.size(); i += kBatch) {
    std::vector<EncodedInput> inputs;
    for (size_t j = i; j < std::min(texts.size(), i + kBatch); ++j) {
      FERRY_ASSIGN_OR_RETURN(tokenizer::Encoding enc, engine.tokenizer()->EncodeWithSpecial(texts[j]));
      EncodedInput in{std::move(enc.ids), std::move(enc.type_ids)};
      if (in.type_ids.empty()) in.type_ids.assign(in.ids.size(), 0);
      // A single sequence ends with exactly one special token ([SEP]) when it has one.
      const bool ends_special = !in.ids.empty() && engine.tokenizer()->IsSpecial(in.ids.back());
      if (TruncateEncoding(in.ids, in.type_ids, max_tokens, ends_special ? 1 : 0)) ++r.truncated;
      inputs.push_back(std::move(in));
    }
    FERRY_ASSIGN_OR_RETURN(Tensor logits, Classify(engine, inputs));
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

}  // namespace ferry::engine
