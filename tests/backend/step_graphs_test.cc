// The step-graph policy with a recorder that keeps its "recordings" on the host: first sight
// runs eagerly and records, later steps of the key only copy their inputs and replay, a
// different layout fails and is recorded afresh, a failed recording makes the key eager, and
// recordings go with their owner.
#include "backend/step_graphs.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

namespace ferry::backend {
namespace {

// out[i] = 2 * token_ids[i] + positions[i], as f32 [T]: the step's "device work".
Result<Tensor> Body(const StepTensors& in) {
  const int64_t T = in.token_ids.numel();
  Tensor out = Tensor::Empty({T}, DType::kF32);
  for (int64_t i = 0; i < T; ++i) {
    out.data<float>()[i] = static_cast<float>(2 * in.token_ids.data<int32_t>()[i] + in.positions.data<int32_t>()[i]);
  }
  return out;
}

// Recordings on the host: a buffer that stands for the device's persistent inputs, and the
// body run again on views of it (a stand-in for launching the recorded work), its result
// copied into the recorded output buffer.
class HostRecorder final : public GraphRecorder {
 public:
  struct HostRecording final : Recording {
    std::vector<int32_t> inputs;
    StepBody body;
    StepTensors views;
    Tensor output;
  };

  Result<Tensor> RunEager(const StepInputs& inputs, const StepBody& body) override {
    ++eager_runs;
    return body(HostStepTensors(inputs));
  }
  Result<std::unique_ptr<Recording>> Record(const StepInputs& inputs, const StepInputLayout& layout,
                                            const StepBody& body, Tensor& output) override {
    ++records;
    if (fail_records) return Internal("recording refused");
    auto rec = std::make_unique<HostRecording>();
    rec->inputs.resize(static_cast<size_t>(layout.total));
    PackStepInputs(inputs, layout, rec->inputs.data());
    rec->views = StepTensorsAt(inputs, layout, rec->inputs.data(), Device::Cpu());
    rec->views.attention.spans = {};  // only what was uploaded may be read
    rec->body = body;
    FERRY_ASSIGN_OR_RETURN(rec->output, body(rec->views));
    output = rec->output;
    return std::unique_ptr<Recording>(std::move(rec));
  }
  Status Replay(Recording& recording, const StepInputs& inputs, const StepInputLayout& layout) override {
    ++replays;
    auto& rec = static_cast<HostRecording&>(recording);
    PackStepInputs(inputs, layout, rec.inputs.data());
    FERRY_ASSIGN_OR_RETURN(const Tensor out, rec.body(rec.views));
    std::copy(out.data<float>(), out.data<float>() + out.numel(), rec.output.data<float>());
    return Status::Ok();
  }

  int eager_runs = 0;
  int records = 0;
  int replays = 0;
  bool fail_records = false;
};

struct Step {
  std::vector<int32_t> ids;
  std::vector<int32_t> positions;
  StepInputs inputs() const {
    StepInputs in;
    in.token_ids = ids;
    in.positions = positions;
    return in;
  }
};

std::vector<float> Values(const Tensor& t) { return std::vector<float>(t.data<float>(), t.data<float>() + t.numel()); }

TEST(StepGraphsTest, RecordsOnFirstSightThenReplaysWithEachStepsInputs) {
  HostRecorder recorder;
  StepGraphs graphs(recorder);
  const GraphKey key{1, 4, 128};
  auto first = graphs.Run(key, Step{{1, 2}, {10, 20}}.inputs(), Body);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_EQ(Values(*first), (std::vector<float>{12, 24}));
  EXPECT_EQ(recorder.eager_runs, 1);
  EXPECT_EQ(recorder.records, 1);
  EXPECT_EQ(graphs.count(), 1);

  auto second = graphs.Run(key, Step{{5, 6}, {0, 1}}.inputs(), Body);
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  EXPECT_EQ(Values(*second), (std::vector<float>{10, 13}));
  EXPECT_EQ(second->raw(), first->raw()) << "every replay writes the recording's output buffer";
  EXPECT_EQ(recorder.eager_runs, 1);
  EXPECT_EQ(recorder.replays, 1);
}

TEST(StepGraphsTest, AnotherLayoutFailsTheStepAndIsRecordedAfresh) {
  HostRecorder recorder;
  StepGraphs graphs(recorder);
  const GraphKey key{1, 4, 128};
  ASSERT_TRUE(graphs.Run(key, Step{{1, 2}, {0, 0}}.inputs(), Body).ok());
  auto longer = graphs.Run(key, Step{{1, 2, 3}, {0, 0, 0}}.inputs(), Body);
  EXPECT_EQ(longer.status().code(), StatusCode::kInternal) << longer.status().ToString();
  EXPECT_NE(longer.status().message().find("diverged"), std::string::npos) << longer.status().ToString();
  EXPECT_EQ(graphs.count(), 0);
  EXPECT_EQ(recorder.replays, 0);
  auto again = graphs.Run(key, Step{{1, 2, 3}, {0, 0, 1}}.inputs(), Body);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(Values(*again), (std::vector<float>{2, 4, 7}));
  EXPECT_EQ(recorder.records, 2);
  EXPECT_EQ(graphs.count(), 1);
}

TEST(StepGraphsTest, AKeyWhoseRecordingFailsRunsEagerlyFromThenOn) {
  HostRecorder recorder;
  recorder.fail_records = true;
  StepGraphs graphs(recorder);
  const GraphKey key{1, 2, 128};
  for (int step = 0; step < 3; ++step) {
    auto out = graphs.Run(key, Step{{step, 1}, {1, 1}}.inputs(), Body);
    ASSERT_TRUE(out.ok()) << out.status().ToString();
    EXPECT_EQ(Values(*out), (std::vector<float>{2.0f * step + 1, 3}));
  }
  EXPECT_EQ(recorder.records, 1) << "never retried";
  EXPECT_EQ(recorder.eager_runs, 4) << "first sight, its rerun, then one per step";
  EXPECT_EQ(graphs.count(), 0);
  // Released with its owner, the key may be recorded again.
  graphs.Release(1);
  recorder.fail_records = false;
  ASSERT_TRUE(graphs.Run(key, Step{{0, 1}, {1, 1}}.inputs(), Body).ok());
  EXPECT_EQ(graphs.count(), 1);
}

TEST(StepGraphsTest, RecordingsBelongToTheirOwner) {
  HostRecorder recorder;
  StepGraphs graphs(recorder);
  for (int64_t owner : {1, 2}) {
    for (int64_t id : {1, 2}) ASSERT_TRUE(graphs.Run({owner, id, 64}, Step{{1}, {1}}.inputs(), Body).ok());
  }
  EXPECT_EQ(graphs.count(), 4);
  graphs.Release(1);
  EXPECT_EQ(graphs.count(), 2);
  ASSERT_TRUE(graphs.Run({2, 1, 64}, Step{{3}, {0}}.inputs(), Body).ok());
  EXPECT_EQ(recorder.replays, 1) << "owner 2's recordings stay";
  graphs.Clear();
  EXPECT_EQ(graphs.count(), 0);
}

TEST(StepGraphsTest, RefusesStepsOutsideThePlan) {
  HostRecorder recorder;
  StepGraphs graphs(recorder);
  EXPECT_EQ(graphs.Run({1, 1, 0}, Step{{1}, {1}}.inputs(), Body).status().code(), StatusCode::kInvalidArgument);
  const std::vector<int32_t> table = {0, 1, 2};
  const std::vector<SeqSpan> spans = {{0, 1, 40, table.data()}};
  const std::vector<int32_t> ids = {1}, positions = {39}, slots = {39};
  StepInputs in;
  in.token_ids = ids;
  in.positions = positions;
  in.slots = slots;
  in.spans = spans;
  in.block_tokens = 16;
  EXPECT_EQ(graphs.Run({1, 1, 32}, in, Body).status().code(), StatusCode::kOutOfRange);
  EXPECT_EQ(recorder.eager_runs + recorder.records, 0);
  EXPECT_EQ(graphs.count(), 0);
}

}  // namespace
}  // namespace ferry::backend
