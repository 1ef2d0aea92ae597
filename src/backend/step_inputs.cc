#include "backend/step_inputs.h"

#include <algorithm>
#include <cstring>

namespace ferry::backend {

namespace {

int64_t AlignUp(int64_t n) {
  return (n + StepInputLayout::kAlign - 1) / StepInputLayout::kAlign * StepInputLayout::kAlign;
}

// Ops read the views only; Tensor has no const storage, so the host arrays are wrapped as is.
Tensor View(std::span<const int32_t> values) {
  return Tensor::FromBorrowed(const_cast<int32_t*>(values.data()), {static_cast<int64_t>(values.size())}, DType::kI32,
                              nullptr);
}

Tensor ViewAt(void* base, int64_t at, int64_t n, Device device) {
  return Tensor::FromBorrowed(static_cast<int32_t*>(base) + at, {n}, DType::kI32, nullptr, device);
}

void Put(std::span<const int32_t> values, int32_t* dst) {
  if (!values.empty()) std::memcpy(dst, values.data(), values.size() * sizeof(int32_t));
}

}  // namespace

AttentionBatch::AttentionBatch(std::span<const SeqSpan> host_spans)
    : spans(host_spans), num_seqs(static_cast<int>(host_spans.size())) {
  for (const SeqSpan& s : host_spans) {
    max_q_len = std::max(max_q_len, s.q_len);
    max_context_len = std::max(max_context_len, s.context_len);
  }
}

Tensor HostIndices(std::span<const int32_t> values) { return View(values); }

StepTensors HostStepTensors(const StepInputs& in) {
  StepTensors t;
  t.token_ids = View(in.token_ids);
  t.positions = View(in.positions);
  t.slots = View(in.slots);
  t.type_ids = View(in.type_ids);
  t.logit_rows = View(in.logit_rows);
  t.attention = AttentionBatch(in.spans);
  return t;
}

std::string StepInputLayout::ToString() const {
  return std::to_string(tokens) + " tokens, " + std::to_string(num_seqs) + " sequences, " + std::to_string(rows) +
         " output rows, queries up to " + std::to_string(max_q_len) + ", context " + std::to_string(max_context_len) +
         " in " + std::to_string(max_blocks_per_seq) + " blocks of " + std::to_string(block_tokens) +
         (has_positions ? ", positions" : "") + (has_slots ? ", slots" : "") + (has_types ? ", types" : "");
}

Result<StepInputLayout> PlanStepInputs(const StepInputs& in, int plan_context) {
  StepInputLayout l;
  l.tokens = static_cast<int64_t>(in.token_ids.size());
  l.rows = static_cast<int64_t>(in.logit_rows.size());
  l.num_seqs = static_cast<int>(in.spans.size());
  l.block_tokens = in.block_tokens;
  l.has_positions = !in.positions.empty();
  l.has_slots = !in.slots.empty();
  l.has_types = !in.type_ids.empty();
  auto fits = [&](std::span<const int32_t> a) { return a.empty() || static_cast<int64_t>(a.size()) == l.tokens; };
  if (!fits(in.positions) || !fits(in.slots) || !fits(in.type_ids)) {
    return InvalidArgument("step inputs: positions, slots and token types must have one entry per token (" +
                           std::to_string(l.tokens) + ")");
  }
  if (in.block_tokens < 0) return InvalidArgument("step inputs: negative block size");
  for (int32_t r : in.logit_rows) {
    if (r < 0 || r >= l.tokens)
      return InvalidArgument("step inputs: output row " + std::to_string(r) + " outside the batch");
  }
  for (const SeqSpan& s : in.spans) {
    // Without a cache (encoders) context_len is not read.
    if (s.q_begin < 0 || s.q_len < 0 || static_cast<int64_t>(s.q_begin) + s.q_len > l.tokens ||
        (in.block_tokens > 0 && s.context_len < s.q_len)) {
      return InvalidArgument("step inputs: a span of rows [" + std::to_string(s.q_begin) + ", +" +
                             std::to_string(s.q_len) + ") with context " + std::to_string(s.context_len) +
                             " does not fit " + std::to_string(l.tokens) + " tokens");
    }
    if (in.block_tokens > 0 && s.context_len > 0 && s.block_table == nullptr) {
      return InvalidArgument("step inputs: a sequence has no block table");
    }
    if (plan_context > 0 && s.context_len > plan_context) {
      return OutOfRange("a sequence of " + std::to_string(s.context_len) + " tokens exceeds the step graph's " +
                        std::to_string(plan_context));
    }
    l.max_q_len = std::max(l.max_q_len, s.q_len);
    l.max_context_len = std::max(l.max_context_len, s.context_len);
  }
  if (plan_context > 0) l.max_context_len = plan_context;
  if (in.block_tokens > 0) l.max_blocks_per_seq = (l.max_context_len + in.block_tokens - 1) / in.block_tokens;
  int64_t at = 0;
  auto place = [&](int64_t n) {
    const int64_t here = at;
    at += AlignUp(n);
    return here;
  };
  l.token_ids_at = place(l.tokens);
  l.positions_at = place(l.has_positions ? l.tokens : 0);
  l.slots_at = place(l.has_slots ? l.tokens : 0);
  l.type_ids_at = place(l.has_types ? l.tokens : 0);
  l.logit_rows_at = place(l.rows);
  l.meta_at = place(l.meta_elements());
  l.total = at;
  return l;
}

void PackAttentionMeta(std::span<const SeqSpan> spans, int block_tokens, int max_blocks_per_seq, int32_t* dst) {
  const int64_t S = static_cast<int64_t>(spans.size());
  std::fill(dst, dst + 3 * S + S * max_blocks_per_seq, 0);
  for (int64_t i = 0; i < S; ++i) {
    const SeqSpan& s = spans[i];
    dst[i] = s.q_begin;
    dst[S + i] = s.q_len;
    dst[2 * S + i] = s.context_len;
    if (block_tokens <= 0 || s.block_table == nullptr) continue;
    const int nb = std::min((s.context_len + block_tokens - 1) / block_tokens, max_blocks_per_seq);
    std::copy(s.block_table, s.block_table + nb, dst + 3 * S + i * max_blocks_per_seq);
  }
}

void PackStepInputs(const StepInputs& in, const StepInputLayout& l, int32_t* dst) {
  // Every element is written (the gaps between arrays with zeros), so equal inputs pack to
  // equal bytes.
  auto put = [&](std::span<const int32_t> values, int64_t at, int64_t end) {
    Put(values, dst + at);
    std::fill(dst + at + static_cast<int64_t>(values.size()), dst + end, 0);
  };
  put(in.token_ids, l.token_ids_at, l.positions_at);
  put(in.positions, l.positions_at, l.slots_at);
  put(in.slots, l.slots_at, l.type_ids_at);
  put(in.type_ids, l.type_ids_at, l.logit_rows_at);
  put(in.logit_rows, l.logit_rows_at, l.meta_at);
  PackAttentionMeta(in.spans, l.block_tokens, l.max_blocks_per_seq, dst + l.meta_at);
  std::fill(dst + l.meta_at + l.meta_elements(), dst + l.total, 0);
}

StepTensors StepTensorsAt(const StepInputs& in, const StepInputLayout& l, void* base, Device device) {
  StepTensors t;
  t.token_ids = ViewAt(base, l.token_ids_at, l.tokens, device);
  t.positions = ViewAt(base, l.positions_at, l.has_positions ? l.tokens : 0, device);
  t.slots = ViewAt(base, l.slots_at, l.has_slots ? l.tokens : 0, device);
  t.type_ids = ViewAt(base, l.type_ids_at, l.has_types ? l.tokens : 0, device);
  t.logit_rows = ViewAt(base, l.logit_rows_at, l.rows, device);
  AttentionBatch& a = t.attention;
  a.spans = in.spans;
  a.num_seqs = l.num_seqs;
  a.max_q_len = l.max_q_len;
  a.max_context_len = l.max_context_len;
  a.max_blocks_per_seq = l.max_blocks_per_seq;
  a.meta = ViewAt(base, l.meta_at, l.meta_elements(), device);
  return t;
}

}  // namespace ferry::backend
