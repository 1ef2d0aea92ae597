#include "engine/step_executor.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <string>

namespace ferry::engine {

std::vector<int> GraphBatchBuckets(int max_batch) {
  std::vector<int> buckets;
  for (int b : {1, 2, 4, 8}) {
    if (b < max_batch) buckets.push_back(b);
  }
  for (int p = 16; p < max_batch; p *= 2) {
    buckets.push_back(p);
    if (p * 3 / 2 < max_batch) buckets.push_back(p * 3 / 2);
  }
  if (max_batch > 0) buckets.push_back(max_batch);
  return buckets;
}

namespace {
std::atomic<int64_t> next_graph_owner{1};
}  // namespace

StepExecutor::StepExecutor(model::DecoderModel& model, KvCache& cache)
    : model_(model), cache_(cache), graph_owner_(next_graph_owner.fetch_add(1)) {}

StepExecutor::~StepExecutor() {
  Drain();  // the device may still write the KV cache and the draws' pinned memory
  model_.backend().ReleaseGraphs(graph_owner_);
}

void StepExecutor::SetGraphOptions(const StepGraphOptions& options) {
  model_.backend().ReleaseGraphs(graph_owner_);  // recorded for the old planning context
  graph_options_ = options;
  if (!model_.backend().supports_graphs() || options.plan_context <= 0) graph_options_.max_batch = 0;
  graph_buckets_ = GraphBatchBuckets(graph_options_.max_batch);
  padding_table_.assign(1, cache_.padding_block());
}

Status StepExecutor::Run(const std::vector<SeqStep>& steps, Tensor& logits, int64_t& rows,
                         const Tensor* patch_source) {
  if (steps.empty()) return InvalidArgument("empty step");
  const int max_pos = model_.config().max_position_embeddings;
  for (const SeqStep& s : steps) {
    if (s.tokens.empty()) return InvalidArgument("sequence " + std::to_string(s.seq_id) + " has no new tokens");
    if (s.start_pos < 0) return InvalidArgument("negative start position");
    if (s.targets.size() > s.tokens.size()) return InvalidArgument("more targets than new tokens");
    const int64_t end = static_cast<int64_t>(s.start_pos) + static_cast<int64_t>(s.tokens.size());
    if (max_pos > 0 && end > max_pos) {
      return OutOfRange("sequence of " + std::to_string(end) + " tokens exceeds the model's context of " +
                        std::to_string(max_pos));
    }
    // The scheduler reserves blocks before the step; a missing block would write out of bounds.
    if (static_cast<int64_t>(cache_.BlockTable(s.seq_id).size()) < cache_.BlocksFor(static_cast<int32_t>(end))) {
      return FailedPrecondition("sequence " + std::to_string(s.seq_id) + " has no KV blocks reserved for " +
                                std::to_string(end) + " tokens");
    }
  }

  model::DecoderBatch& b = batch_;
  b.token_ids.clear();
  b.positions.clear();
  b.slots.clear();
  b.spans.clear();
  b.logit_rows.clear();
  b.token_patches.clear();
  b.patch_source = nullptr;
  bool decode_only = true;
  int32_t longest = 0;
  for (const SeqStep& s : steps) {
    backend::SeqSpan span;
    span.q_begin = static_cast<int32_t>(b.token_ids.size());
    span.q_len = static_cast<int32_t>(s.tokens.size());
    span.context_len = s.start_pos + span.q_len;
    span.block_table = cache_.BlockTable(s.seq_id).data();
    if (s.from_previous >= 0) {
      if (patch_source == nullptr || span.q_len != 1) {
        return InvalidArgument("sequence " + std::to_string(s.seq_id) +
                               " takes its token from a previous step that is not on the device");
      }
      b.token_patches.push_back(span.q_begin);
      b.token_patches.push_back(s.from_previous);
      b.patch_source = patch_source;
    }
    for (int32_t i = 0; i < span.q_len; ++i) {
      const int32_t pos = s.start_pos + i;
      b.token_ids.push_back(s.tokens[i]);
      b.positions.push_back(pos);
      b.slots.push_back(cache_.Slot(s.seq_id, pos));
      if (!s.targets.empty() || i == span.q_len - 1) b.logit_rows.push_back(span.q_begin + i);
    }
    b.spans.push_back(span);
    decode_only = decode_only && span.q_len == 1 && s.targets.empty();
    longest = std::max(longest, span.context_len);
  }
  rows = static_cast<int64_t>(b.logit_rows.size());
  const int n = static_cast<int>(steps.size());
  const bool graphed = decode_only && n <= graph_options_.max_batch && longest <= graph_options_.plan_context;
  if (!graphed) return model_.Forward(b, cache_.layers(), logits);

  // Pad to the bucket: each padding row is a one-token sequence in the padding block.
  const int bucket = *std::lower_bound(graph_buckets_.begin(), graph_buckets_.end(), n);
  const int32_t pad_slot = cache_.padding_block() * cache_.config().block_tokens;
  for (int i = n; i < bucket; ++i) {
    b.token_ids.push_back(0);
    b.positions.push_back(0);
    b.slots.push_back(pad_slot);
    b.spans.push_back(backend::SeqSpan{i, 1, 1, padding_table_.data()});
    b.logit_rows.push_back(i);
  }
  ++graphed_steps_;
  // The backend uploads the step's inputs (into the recording's own buffers once the bucket
  // is recorded); the body is the model's device work on them, which a replay does not rerun.
  FERRY_RETURN_IF_ERROR(model_.CheckBatch(b, cache_.layers()));
  model::MarkLongRopePositions(model_.config(), b);
  const backend::GraphKey key{graph_owner_, bucket, graph_options_.plan_context};
  FERRY_ASSIGN_OR_RETURN(logits, model_.backend().RunGraph(key, b.inputs(cache_.config().block_tokens),
                                                           [this](const backend::StepTensors& in) {
                                                             return model_.Forward(in, cache_.layers());
                                                           }));
  return Status::Ok();
}

namespace {

int64_t RowsOf(const SeqStep& s) { return s.targets.empty() ? 1 : static_cast<int64_t>(s.tokens.size()); }

bool AllFinite(std::span<const float> row) {
  for (float v : row) {
    if (!std::isfinite(v)) return false;
  }
  return true;
}

SamplingParams ParamsOf(const backend::TokenSampling& s) {
  SamplingParams p;
  p.temperature = s.temperature;
  p.top_k = s.top_k;
  p.top_p = s.top_p;
  p.min_p = s.min_p;
  p.repetition_penalty = s.repetition_penalty;
  p.presence_penalty = s.presence_penalty;
  p.frequency_penalty = s.frequency_penalty;
  p.logit_bias.assign(s.logit_bias.begin(), s.logit_bias.end());
  return p;
}

}  // namespace

void StepExecutor::FillDeviceSampling(const std::vector<SeqStep>& steps) {
  device_sampling_.resize(steps.size());
  for (size_t i = 0; i < steps.size(); ++i) {
    device_sampling_[i] = steps[i].sampling;
    if (!steps[i].sample) {
      device_sampling_[i] = backend::TokenSampling();  // a cheap greedy pick, unused
      device_sampling_[i].temperature = 0.0f;
    }
  }
}

Result<Tensor> StepExecutor::Logits(const std::vector<SeqStep>& steps) {
  Tensor logits;
  int64_t rows = 0;
  FERRY_RETURN_IF_ERROR(Run(steps, logits, rows));
  return model_.backend().ToHost(logits.dim(0) == rows ? logits : logits.Slice(0, rows));
}

void StepExecutor::ScoreOnHost(const Tensor& logits, const std::vector<SeqStep>& steps, std::vector<SeqResult>& out) {
  const int64_t vocab = logits.dim(1);
  const float* data = logits.data<float>();
  int64_t row = 0;
  for (size_t i = 0; i < steps.size(); ++i) {
    const SeqStep& s = steps[i];
    SeqResult& r = out[i];
    for (size_t t = 0; t < s.targets.size(); ++t) {
      r.targets.push_back(sampler_.Logprobs(std::span<const float>(data + (row + static_cast<int64_t>(t)) * vocab,
                                                                   static_cast<size_t>(vocab)),
                                            s.targets[t], s.top_logprobs));
    }
    const int64_t first_row = row;
    row += RowsOf(s);
    const std::span<const float> last(data + (row - 1) * vocab, static_cast<size_t>(vocab));
    if (s.sample && r.token >= 0) {
      r.sampled = s.logprobs >= 0 ? sampler_.Logprobs(last, r.token, s.logprobs) : TokenOutput{r.token, 0.0f, {}};
    }
    if (s.keep_logits) r.logits.assign(data + first_row * vocab, data + row * vocab);
  }
}

Result<std::vector<SeqResult>> StepExecutor::SampleOnHost(const Tensor& logits, const std::vector<SeqStep>& steps) {
  int64_t total_rows = 0;
  for (const SeqStep& s : steps) total_rows += RowsOf(s);
  if (logits.rank() != 2 || logits.dim(0) != total_rows || logits.dtype() != DType::kF32) {
    return InvalidArgument("the logits do not match the step");
  }
  const int64_t vocab = logits.dim(1);
  std::vector<SeqResult> out(steps.size());
  int64_t row = 0;
  for (size_t i = 0; i < steps.size(); ++i) {
    const SeqStep& s = steps[i];
    row += RowsOf(s);
    if (!s.sample) continue;
    const std::span<const float> last(logits.data<float>() + (row - 1) * vocab, static_cast<size_t>(vocab));
    if (!AllFinite(last)) {
      out[i].finite = false;
      continue;
    }
    out[i].token = sampler_.Sample(last, ParamsOf(s.sampling), s.sampling.history, s.sampling.seed, s.sampling.counter,
                                   s.sampling.banned, s.sampling.allowed);
  }
  ScoreOnHost(logits, steps, out);
  return out;
}

Result<std::vector<SeqResult>> StepExecutor::Step(const std::vector<SeqStep>& steps,
                                                  const std::function<Status()>& before_sampling) {
  Tensor logits;
  int64_t rows = 0;
  FERRY_RETURN_IF_ERROR(Run(steps, logits, rows));
  if (before_sampling) FERRY_RETURN_IF_ERROR(before_sampling());
  backend::Backend& be = model_.backend();
  const Tensor wanted = logits.dim(0) == rows ? logits : logits.Slice(0, rows);
  const bool one_row_each = std::all_of(steps.begin(), steps.end(), [](const SeqStep& s) { return s.targets.empty(); });
  if (!be.samples_on_device() || !one_row_each) {
    FERRY_ASSIGN_OR_RETURN(Tensor host, be.ToHost(wanted));
    return SampleOnHost(host, steps);
  }
  // Drawn where the logits are, for every sequence, so that a seeded sequence's tokens do not
  // depend on whether another request in the batch asked for log-probabilities.
  FillDeviceSampling(steps);
  FERRY_RETURN_IF_ERROR(be.SampleTokens(wanted, device_sampling_, device_tokens_));
  std::vector<SeqResult> out(steps.size());
  bool host_wanted = false;
  for (size_t i = 0; i < steps.size(); ++i) {
    const SeqStep& s = steps[i];
    host_wanted = host_wanted || s.logprobs >= 0 || s.keep_logits;
    if (!s.sample) continue;
    out[i].token = device_tokens_[i];
    out[i].finite = device_tokens_[i] >= 0;
    out[i].sampled.token = out[i].token;
  }
  if (host_wanted) {
    FERRY_ASSIGN_OR_RETURN(Tensor host, be.ToHost(wanted));
    ScoreOnHost(host, steps, out);
  }
  return out;
}

bool StepExecutor::Launchable(const SeqStep& s) {
  return s.targets.empty() && !s.keep_logits && s.sampling.allowed.empty();
}

Status StepExecutor::Launch(const std::vector<SeqStep>& steps) {
  if (steps.empty()) return InvalidArgument("empty step");
  bool patched = false;
  for (const SeqStep& s : steps) {
    if (!Launchable(s)) {
      return InvalidArgument("sequence " + std::to_string(s.seq_id) +
                             " needs more than its drawn token (prompt log-probabilities, logits or a mask): it "
                             "cannot be launched asynchronously");
    }
    if (s.from_previous < 0) continue;
    patched = true;
    const int64_t rows = launched_.empty() ? 0 : static_cast<int64_t>(launched_.back().sample.size());
    if (s.from_previous >= rows || !launched_.back().sample[static_cast<size_t>(s.from_previous)]) {
      return InvalidArgument("sequence " + std::to_string(s.seq_id) + " takes the token of row " +
                             std::to_string(s.from_previous) + ", which the previous launch did not draw");
    }
  }
  Launched next;
  next.sample.resize(steps.size());
  next.logprobs.resize(steps.size());
  for (size_t i = 0; i < steps.size(); ++i) {
    next.sample[i] = steps[i].sample ? 1 : 0;
    next.logprobs[i] = steps[i].logprobs;
    if (steps[i].sample && steps[i].logprobs >= 0) next.score_rows.push_back(static_cast<int32_t>(i));
  }
  backend::Backend& be = model_.backend();
  if (!be.samples_on_device() || !be.patches_step_tokens()) {
    // Runs now: the previous launch's ids are known, so the placeholders are replaced here.
    if (!patched) {
      FERRY_ASSIGN_OR_RETURN(next.results, Step(steps));
    } else {
      const std::vector<SeqResult>& previous = launched_.back().results;
      std::vector<SeqStep> resolved = steps;
      patched_ids_.assign(steps.size(), 0);
      for (size_t i = 0; i < resolved.size(); ++i) {
        SeqStep& s = resolved[i];
        if (s.from_previous < 0) continue;
        // A row whose draw failed (-1) is dropped by the caller; any id keeps the step valid.
        patched_ids_[i] = std::max(0, previous[static_cast<size_t>(s.from_previous)].token);
        s.tokens = std::span<const int32_t>(&patched_ids_[i], 1);
        s.from_previous = -1;
      }
      FERRY_ASSIGN_OR_RETURN(next.results, Step(resolved));
    }
    launched_.push_back(std::move(next));
    return Status::Ok();
  }
  Tensor logits;
  int64_t rows = 0;
  const Tensor* source = patched ? &launched_.back().pending->device_tokens() : nullptr;
  FERRY_RETURN_IF_ERROR(Run(steps, logits, rows, source));
  const Tensor wanted = logits.dim(0) == rows ? logits : logits.Slice(0, rows);
  FillDeviceSampling(steps);
  FERRY_ASSIGN_OR_RETURN(next.pending, be.SampleTokensAsync(wanted, device_sampling_, next.score_rows));
  launched_.push_back(std::move(next));
  return Status::Ok();
}

Result<std::vector<SeqResult>> StepExecutor::Collect() {
  if (launched_.empty()) return FailedPrecondition("no step was launched");
  Launched done = std::move(launched_.front());
  launched_.pop_front();
  if (done.pending == nullptr) return std::move(done.results);
  std::vector<int32_t> tokens;
  FERRY_RETURN_IF_ERROR(done.pending->Wait(tokens));
  if (tokens.size() != done.sample.size()) return Internal("the launched step drew the wrong number of tokens");
  std::vector<SeqResult> out(done.sample.size());
  for (size_t i = 0; i < out.size(); ++i) {
    if (!done.sample[i]) continue;
    out[i].token = tokens[i];
    out[i].finite = tokens[i] >= 0;
    out[i].sampled.token = tokens[i];
  }
  // Log-probabilities from the rows that came back with the ids, as ScoreOnHost computes them.
  const std::span<const float> rows = done.pending->host_rows();
  const size_t vocab = done.score_rows.empty() ? 0 : rows.size() / done.score_rows.size();
  for (size_t k = 0; k < done.score_rows.size(); ++k) {
    SeqResult& r = out[static_cast<size_t>(done.score_rows[k])];
    if (r.token < 0) continue;
    r.sampled = sampler_.Logprobs(rows.subspan(k * vocab, vocab), r.token, done.logprobs[done.score_rows[k]]);
  }
  return out;
}

void StepExecutor::Drain() {
  std::vector<int32_t> ignored;
  for (Launched& l : launched_) {
    if (l.pending != nullptr) (void)l.pending->Wait(ignored);
  }
  launched_.clear();
}

}  // namespace ferry::engine
