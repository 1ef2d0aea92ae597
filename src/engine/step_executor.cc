#include "engine/step_executor.h"

#include <string>

namespace ferry::engine {

Result<Tensor> StepExecutor::Step(const std::vector<SeqStep>& steps) {
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
  }
  Tensor logits;
  FERRY_RETURN_IF_ERROR(model_.Forward(b, cache_.layers(), logits));
  return model_.backend().ToHost(logits);
}

}  // namespace ferry::engine
