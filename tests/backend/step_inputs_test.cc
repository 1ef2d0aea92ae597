// Step inputs: how a step's arrays are checked and laid out in the one buffer a device
// uploads (and a step graph's recording keeps), that the views over a packed buffer read
// back exactly the inputs, and that the CPU's upload is views of the host arrays.
#include "backend/step_inputs.h"

#include <gtest/gtest.h>

#include <vector>

namespace ferry::backend {
namespace {

std::vector<int32_t> Read(const Tensor& t) {
  const int32_t* p = t.data<int32_t>();
  return std::vector<int32_t>(p, p + t.numel());
}

// Two decode rows and a three-token prefill over 4-token blocks.
struct Batch {
  std::vector<int32_t> ids = {11, 12, 13, 14, 15};
  std::vector<int32_t> positions = {9, 2, 0, 1, 2};
  std::vector<int32_t> slots = {21, 6, 12, 13, 14};
  std::vector<int32_t> table0 = {7, 3, 5};  // context 10: three blocks
  std::vector<int32_t> table1 = {1};        // context 3
  std::vector<int32_t> table2 = {3};        // context 3 (the prefill)
  std::vector<SeqSpan> spans = {{0, 1, 10, table0.data()}, {1, 1, 3, table1.data()}, {2, 3, 3, table2.data()}};
  std::vector<int32_t> rows = {0, 1, 4};

  StepInputs inputs() const {
    StepInputs in;
    in.token_ids = ids;
    in.positions = positions;
    in.slots = slots;
    in.spans = spans;
    in.logit_rows = rows;
    in.block_tokens = 4;
    return in;
  }
};

TEST(StepInputsTest, LayoutPlansAttentionForTheBatchOrTheGraphContext) {
  const Batch b;
  auto own = PlanStepInputs(b.inputs(), 0);
  ASSERT_TRUE(own.ok()) << own.status().ToString();
  EXPECT_EQ(own->tokens, 5);
  EXPECT_EQ(own->rows, 3);
  EXPECT_EQ(own->num_seqs, 3);
  EXPECT_EQ(own->max_q_len, 3);
  EXPECT_EQ(own->max_context_len, 10);
  EXPECT_EQ(own->max_blocks_per_seq, 3);
  EXPECT_TRUE(own->has_positions && own->has_slots && !own->has_types);
  for (int64_t at : {own->token_ids_at, own->positions_at, own->slots_at, own->type_ids_at, own->logit_rows_at,
                     own->meta_at, own->total}) {
    EXPECT_EQ(at % StepInputLayout::kAlign, 0) << at;
  }
  EXPECT_GE(own->total, own->meta_at + 3 * 3 + 3 * 3);

  auto planned = PlanStepInputs(b.inputs(), 64);
  ASSERT_TRUE(planned.ok()) << planned.status().ToString();
  EXPECT_EQ(planned->max_context_len, 64);
  EXPECT_EQ(planned->max_blocks_per_seq, 16);
  EXPECT_FALSE(*planned == *own);

  auto too_long = PlanStepInputs(b.inputs(), 8);
  EXPECT_EQ(too_long.status().code(), StatusCode::kOutOfRange) << too_long.status().ToString();
}

TEST(StepInputsTest, EqualSizesGiveEqualLayoutsWhateverTheValues) {
  Batch a, b;
  b.ids = {1, 2, 3, 4, 5};
  b.table0 = {0, 1, 2};
  b.spans[0].block_table = b.table0.data();
  b.spans[0].context_len = 12;  // still three blocks, and within the plan
  auto la = PlanStepInputs(a.inputs(), 32), lb = PlanStepInputs(b.inputs(), 32);
  ASSERT_TRUE(la.ok() && lb.ok());
  EXPECT_TRUE(*la == *lb) << la->ToString() << " vs " << lb->ToString();
  b.rows.push_back(2);
  auto lc = PlanStepInputs(b.inputs(), 32);
  ASSERT_TRUE(lc.ok());
  EXPECT_FALSE(*la == *lc) << "one more output row";
}

TEST(StepInputsTest, PackedBufferReadsBackAsTheInputs) {
  const Batch b;
  auto layout = PlanStepInputs(b.inputs(), 32);
  ASSERT_TRUE(layout.ok()) << layout.status().ToString();
  std::vector<int32_t> buffer(static_cast<size_t>(layout->total), -7);
  PackStepInputs(b.inputs(), *layout, buffer.data());
  const StepTensors t = StepTensorsAt(b.inputs(), *layout, buffer.data(), Device::Cpu());
  EXPECT_EQ(Read(t.token_ids), b.ids);
  EXPECT_EQ(Read(t.positions), b.positions);
  EXPECT_EQ(Read(t.slots), b.slots);
  EXPECT_EQ(t.type_ids.numel(), 0);
  EXPECT_EQ(Read(t.logit_rows), b.rows);
  EXPECT_EQ(t.token_ids.raw(), buffer.data() + layout->token_ids_at);

  const AttentionBatch& a = t.attention;
  EXPECT_EQ(a.num_seqs, 3);
  EXPECT_EQ(a.max_q_len, 3);
  EXPECT_EQ(a.max_context_len, 32);
  ASSERT_EQ(a.max_blocks_per_seq, 8);
  const std::vector<int32_t> meta = Read(a.meta);
  ASSERT_EQ(meta.size(), 3u * 3 + 3u * 8);
  EXPECT_EQ(std::vector<int32_t>(meta.begin(), meta.begin() + 9), (std::vector<int32_t>{0, 1, 2, 1, 1, 3, 10, 3, 3}));
  // Each block table at a stride of max_blocks_per_seq, zero beyond the sequence's blocks.
  std::vector<int32_t> tables(24, 0);
  tables[0] = 7, tables[1] = 3, tables[2] = 5, tables[8] = 1, tables[16] = 3;
  EXPECT_EQ(std::vector<int32_t>(meta.begin() + 9, meta.end()), tables);
  // Nothing of the earlier contents survives, so equal inputs pack to equal bytes.
  for (int32_t v : buffer) EXPECT_NE(v, -7);
}

TEST(StepInputsTest, RejectsInconsistentInputs) {
  {
    Batch b;
    b.positions.pop_back();
    EXPECT_EQ(PlanStepInputs(b.inputs(), 0).status().code(), StatusCode::kInvalidArgument);
  }
  {
    Batch b;
    b.rows.push_back(5);
    EXPECT_EQ(PlanStepInputs(b.inputs(), 0).status().code(), StatusCode::kInvalidArgument) << "row past the tokens";
  }
  {
    Batch b;
    b.spans[2].q_len = 4;
    EXPECT_EQ(PlanStepInputs(b.inputs(), 0).status().code(), StatusCode::kInvalidArgument) << "span past the tokens";
  }
  {
    Batch b;
    b.spans[0].context_len = 0;
    EXPECT_EQ(PlanStepInputs(b.inputs(), 0).status().code(), StatusCode::kInvalidArgument) << "context < q_len";
  }
  {
    Batch b;
    b.spans[1].block_table = nullptr;
    EXPECT_EQ(PlanStepInputs(b.inputs(), 0).status().code(), StatusCode::kInvalidArgument) << "no block table";
  }
  {
    // Without a cache (an encoder) context lengths and block tables are not read.
    Batch b;
    StepInputs in = b.inputs();
    in.slots = {};
    in.block_tokens = 0;
    b.spans[1].block_table = nullptr;
    b.spans[1].context_len = 0;
    auto l = PlanStepInputs(in, 0);
    ASSERT_TRUE(l.ok()) << l.status().ToString();
    EXPECT_EQ(l->max_blocks_per_seq, 0);
    EXPECT_FALSE(l->has_slots);
  }
}

TEST(StepInputsTest, HostUploadIsViewsOfTheArrays) {
  const Batch b;
  const StepTensors t = HostStepTensors(b.inputs());
  EXPECT_EQ(t.token_ids.raw(), b.ids.data());
  EXPECT_EQ(t.positions.raw(), b.positions.data());
  EXPECT_EQ(t.slots.raw(), b.slots.data());
  EXPECT_EQ(t.logit_rows.raw(), b.rows.data());
  EXPECT_EQ(t.token_ids.dtype(), DType::kI32);
  EXPECT_TRUE(t.token_ids.device().is_cpu());
  EXPECT_FALSE(t.attention.meta.defined());
  EXPECT_EQ(t.attention.spans.data(), b.spans.data());
  EXPECT_EQ(t.attention.num_seqs, 3);
  EXPECT_EQ(t.attention.max_q_len, 3);
  EXPECT_EQ(t.attention.max_context_len, 10);
  EXPECT_EQ(HostIndices(b.rows).raw(), b.rows.data());
}

}  // namespace
}  // namespace ferry::backend
