#include "engine/step_executor.h"

#include <algorithm>
#include <atomic>
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

StepExecutor::~StepExecutor() { model_.backend().ReleaseGraphs(graph_owner_); }

void StepExecutor::SetGraphOptions(const StepGraphOptions& options) {
  model_.backend().ReleaseGraphs(graph_owner_);  // recorded for the old planning context
  graph_options_ = options;
  if (!model_.backend().supports_graphs() || options.plan_context <= 0) graph_options_.max_batch = 0;
  graph_buckets_ = GraphBatchBuckets(graph_options_.max_batch);
  padding_table_.assign(1, cache_.padding_block());
}

Status StepExecutor::Run(const std::vector<SeqStep>& steps, Tensor& logits, int64_t& rows) {
  if (steps.empty()) return InvalidArgument("empty step");
  const int max_pos = model_.config().max_position_embeddings;
  for (const SeqStep& s : steps) {
    if (s.tokens.empty()) return InvalidArgument("sequence " + std::to_string(s.seq_id) + " has no new tokens");
    if (s.start_pos < 0) return InvalidArgument("negative start position");
    const int64_t end = static_cast<int64_t>(s.start_pos) + static_cast<int64_t>(s.tokens.size());
    if (max_pos > 0 && end > max_pos) {
      return OutOfRange("sequence of " + std::to_string(end) + " tokens exceeds the model's context of " +
                        std::to_string(max_pos));
    }
  }
  // Reserve everything first; on failure release what this call added for new sequences.
  std::vector<int64_t> fresh;
  for (const SeqStep& s : steps) {
    const bool existed = cache_.Contains(s.seq_id);
    Status st = cache_.Reserve(s.seq_id, s.start_pos + static_cast<int32_t>(s.tokens.size()));
    if (!st.ok()) {
      for (int64_t id : fresh) cache_.Free(id);
      return st;
    }
    if (!existed) fresh.push_back(s.seq_id);
  }

  model::DecoderBatch& b = batch_;
  b.token_ids.clear();
  b.positions.clear();
  b.slots.clear();
  b.spans.clear();
  b.logit_rows.clear();
  bool decode_only = true;
  int32_t longest = 0;
  for (const SeqStep& s : steps) {
    backend::SeqSpan span;
    span.q_begin = static_cast<int32_t>(b.token_ids.size());
    span.q_len = static_cast<int32_t>(s.tokens.size());
    span.context_len = s.start_pos + span.q_len;
    span.block_table = cache_.BlockTable(s.seq_id).data();
    for (int32_t i = 0; i < span.q_len; ++i) {
      const int32_t pos = s.start_pos + i;
      b.token_ids.push_back(s.tokens[i]);
      b.positions.push_back(pos);
      b.slots.push_back(cache_.Slot(s.seq_id, pos));
      if (s.all_logits || i == span.q_len - 1) b.logit_rows.push_back(span.q_begin + i);
    }
    b.spans.push_back(span);
    decode_only = decode_only && span.q_len == 1 && !s.all_logits;
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
  const backend::GraphKey key{graph_owner_, bucket, graph_options_.plan_context};
  FERRY_ASSIGN_OR_RETURN(logits, model_.backend().RunGraph(key, b.inputs(cache_.config().block_tokens),
                                                           [this](const backend::StepTensors& in) {
                                                             return model_.Forward(in, cache_.layers());
                                                           }));
  return Status::Ok();
}

Result<Tensor> StepExecutor::Step(const std::vector<SeqStep>& steps) {
  Tensor logits;
  int64_t rows = 0;
  FERRY_RETURN_IF_ERROR(Run(steps, logits, rows));
  return model_.backend().ToHost(logits.dim(0) == rows ? logits : logits.Slice(0, rows));
}

Result<std::vector<int32_t>> StepExecutor::StepAndSample(const std::vector<SeqStep>& steps,
                                                         std::span<const backend::TokenSampling> sampling) {
  if (sampling.size() != steps.size()) return InvalidArgument("one sampling setting per step is needed");
  for (const SeqStep& s : steps) {
    if (s.all_logits) return InvalidArgument("StepAndSample returns no logits; all_logits needs Step");
  }
  Tensor logits;
  int64_t rows = 0;
  FERRY_RETURN_IF_ERROR(Run(steps, logits, rows));
  std::vector<int32_t> tokens;
  FERRY_RETURN_IF_ERROR(model_.backend().SampleTokens(logits, sampling, tokens));
  return tokens;
}

}  // namespace ferry::engine
