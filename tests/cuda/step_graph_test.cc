// Step graphs (CUDA graphs for decode buckets) and sampling on the device: graphed decode
// against eager decode, replays across batch sizes and growing contexts, the divergence
// check, greedy device sampling against the host argmax, non-finite rows, and the
// continuous batcher sampling on the GPU against sequential generation.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <condition_variable>
#include <mutex>

#include "backend/cuda_backend.h"
#include "engine/engine.h"
#include "engine/generator.h"
#include "engine/sampler.h"
#include "sched/continuous_batcher.h"
#include "cuda_test_util.h"
#include "test_util.h"

namespace ferry {
namespace {

using testing::MaxAbs;
using testing::MaxDiff;
using testing::ToFloats;

std::shared_ptr<engine::Engine> LoadOnGpu(const std::string& model, DType activations) {
  engine::EngineOptions o;
  o.device = DeviceSpec::Cuda();
  o.cuda_activations = activations;
  auto e = engine::Engine::Load(testing::FixturePath("models/" + model), o);
  EXPECT_TRUE(e.ok()) << e.status().ToString();
  return e.ok() ? e.value() : nullptr;
}

std::unique_ptr<engine::DecoderRunner> MakeRunner(const std::shared_ptr<engine::Engine>& e, bool graphs) {
  engine::RunnerOptions ro;
  ro.max_batch_seqs = 8;
  ro.max_seq_len = 128;
  ro.step_graphs = graphs;
  auto r = engine::DecoderRunner::Create(e, ro);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return std::move(r).value();
}

std::vector<int32_t> Ids(int n, int vocab, int salt) {
  std::vector<int32_t> ids;
  for (int i = 0; i < n; ++i) ids.push_back((i * 37 + salt * 101 + 11) % vocab);
  return ids;
}

class StepGraphTest : public ::testing::TestWithParam<DType> {};

// Five sequences of different lengths decode together, then drop out one by one, so the
// batch walks through the buckets 8, 4, 2 and 1 (with padding rows) while contexts grow.
TEST_P(StepGraphTest, GraphedDecodeMatchesEagerAcrossBucketsAndContexts) {
  FERRY_SKIP_WITHOUT_GPU();
  const DType act = GetParam();
  auto e = LoadOnGpu("llama3-tiny", act);
  ASSERT_NE(e, nullptr);
  const int vocab = e->config().vocab_size;
  auto graphed = MakeRunner(e, true);
  auto eager = MakeRunner(e, false);
  const int graphs_before = e->backend().graph_count();

  constexpr int kSeqs = 5;
  std::vector<std::vector<int32_t>> ids;
  for (int s = 0; s < kSeqs; ++s) ids.push_back(Ids(70, vocab, s));
  std::vector<int> pos(kSeqs);
  for (int s = 0; s < kSeqs; ++s) {
    pos[s] = 5 + 7 * s;  // prompts of 5..33 tokens
    for (auto* r : {graphed.get(), eager.get()}) {
      auto l = r->executor().Step({{s, std::span<const int32_t>(ids[s].data(), pos[s]), 0, false}});
      ASSERT_TRUE(l.ok()) << l.status().ToString();
    }
  }
  const double tol = act == DType::kF32 ? 1e-4 : 2e-2;
  int live = kSeqs;
  for (int step = 0; step < 30; ++step) {
    // 5, 4, 3, 2 and 1 live sequences: buckets 8, 4, 4, 2 and 1.
    if (step == 8 || step == 14 || step == 20 || step == 25) --live;
    std::vector<engine::SeqStep> steps;
    for (int s = 0; s < live; ++s) steps.push_back({s, std::span<const int32_t>(ids[s].data() + pos[s], 1), pos[s], false});
    auto a = graphed->executor().Step(steps);
    auto b = eager->executor().Step(steps);
    ASSERT_TRUE(a.ok()) << a.status().ToString();
    ASSERT_TRUE(b.ok()) << b.status().ToString();
    ASSERT_EQ(a->dim(0), live);
    ASSERT_EQ(b->dim(0), live);
    const std::vector<float> fa = ToFloats(*a), fb = ToFloats(*b);
    EXPECT_LE(MaxDiff(fa.data(), fb.data(), fa.size()), tol * MaxAbs(fb)) << "step " << step << ", " << live << " live";
    for (int s = 0; s < live; ++s) ++pos[s];
  }
  EXPECT_EQ(graphed->executor().graphed_steps(), 30);
  EXPECT_EQ(eager->executor().graphed_steps(), 0);
  EXPECT_EQ(e->backend().graph_count() - graphs_before, 4);  // buckets 8, 4, 2 and 1
  graphed.reset();
  EXPECT_EQ(e->backend().graph_count(), graphs_before) << "a runner's recordings go with its KV cache";
}

TEST_P(StepGraphTest, DeviceGreedySamplingEqualsHostArgmax) {
  FERRY_SKIP_WITHOUT_GPU();
  auto e = LoadOnGpu("qwen2-tiny", GetParam());
  ASSERT_NE(e, nullptr);
  const int vocab = e->config().vocab_size;
  auto runner = MakeRunner(e, true);
  engine::StepExecutor& ex = runner->executor();
  std::vector<std::vector<int32_t>> ids = {Ids(40, vocab, 1), Ids(40, vocab, 2), Ids(40, vocab, 3)};
  for (int s = 0; s < 3; ++s) ASSERT_TRUE(ex.Step({{s, std::span<const int32_t>(ids[s].data(), 10 + s), 0, false}}).ok());
  std::vector<backend::TokenSampling> greedy(3);
  for (auto& g : greedy) g.temperature = 0.0f;
  for (int step = 0; step < 8; ++step) {
    std::vector<engine::SeqStep> steps;
    for (int s = 0; s < 3; ++s) {
      const int p = 10 + s + step;
      steps.push_back({s, std::span<const int32_t>(ids[s].data() + p, 1), p, false});
    }
    // The same step twice (rewriting the same K/V): host logits, then device sampling.
    auto logits = ex.Step(steps);
    auto tokens = ex.StepAndSample(steps, greedy);
    ASSERT_TRUE(logits.ok() && tokens.ok()) << tokens.status().ToString();
    ASSERT_EQ(tokens->size(), 3u);
    for (int s = 0; s < 3; ++s) {
      EXPECT_EQ((*tokens)[s], engine::Argmax(std::span<const float>(logits->data<float>() + s * vocab, vocab)))
          << "step " << step << " seq " << s;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Activations, StepGraphTest, ::testing::Values(DType::kBF16, DType::kF32),
                         [](const ::testing::TestParamInfo<DType>& i) { return std::string(DTypeName(i.param)); });

TEST(StepGraphBackendTest, ReplayThatDiffersFromTheRecordingFailsAndIsRecaptured) {
  FERRY_SKIP_WITHOUT_GPU();
  auto be = backend::MakeCudaBackend({});
  ASSERT_TRUE(be.ok()) << be.status().ToString();
  backend::Backend& b = **be;
  int rows = 4;
  Tensor out;
  auto body = [&]() -> Status {
    out = b.Allocate({rows, 8}, DType::kBF16);
    Tensor x = b.Allocate({rows, 8}, DType::kBF16);
    return b.Add(out, x);
  };
  const backend::GraphKey key{7, 1, 64};
  ASSERT_TRUE(b.RunGraph(key, body).ok());
  EXPECT_EQ(b.graph_count(), 1);
  ASSERT_TRUE(b.RunGraph(key, body).ok());  // a faithful replay
  rows = 5;
  Status st = b.RunGraph(key, body);
  EXPECT_EQ(st.code(), StatusCode::kInternal) << st.ToString();
  EXPECT_NE(st.message().find("diverged"), std::string::npos) << st.ToString();
  EXPECT_EQ(b.graph_count(), 0);
  EXPECT_TRUE(b.RunGraph(key, body).ok());  // recorded afresh for the new shape
  EXPECT_EQ(b.graph_count(), 1);
  EXPECT_FALSE(b.RunGraph(key, [&] { return b.Synchronize(); }).ok()) << "no synchronization inside a graph";
  b.ReleaseGraphs(7);
  EXPECT_EQ(b.graph_count(), 0);
}

TEST(DeviceSamplingTest, NonFiniteRowsGetMinusOneAndOthersTheirArgmax) {
  FERRY_SKIP_WITHOUT_GPU();
  auto be = backend::MakeCudaBackend({});
  ASSERT_TRUE(be.ok());
  constexpr int kVocab = 3000;
  Tensor logits = Tensor::Zeros({4, kVocab}, DType::kF32);
  float* p = logits.data<float>();
  for (int r = 0; r < 4; ++r) {
    for (int i = 0; i < kVocab; ++i) p[r * kVocab + i] = std::sin(0.37f * static_cast<float>(i + 11 * r));
  }
  p[0 * kVocab + 1234] = 9.0f;
  p[1 * kVocab + 17] = std::nanf("");
  p[2 * kVocab + 2999] = INFINITY;
  p[3 * kVocab + 2] = 7.5f;
  std::vector<backend::TokenSampling> rows(4);
  for (auto& r : rows) r.temperature = 0.0f;
  rows[3].temperature = 0.7f;  // a sampled row with one dominant logit
  rows[3].top_k = 1;
  std::vector<int32_t> tokens;
  ASSERT_TRUE((*be)->SampleTokens(logits, rows, tokens).ok());
  EXPECT_EQ(tokens, (std::vector<int32_t>{1234, -1, -1, 2}));
}

// The continuous batcher samples on the GPU (only token ids come back) and runs its decode
// steps as graphs; with f32 activations its greedy outputs equal each prompt generated alone
// with host sampling and no graphs.
TEST(GpuContinuousBatcherTest, DeviceSamplingAndGraphsEqualSequentialGreedy) {
  FERRY_SKIP_WITHOUT_GPU();
  using namespace std::chrono_literals;
  auto e = LoadOnGpu("llama3-tiny", DType::kF32);
  ASSERT_NE(e, nullptr);
  const int vocab = e->config().vocab_size;
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 6; ++i) prompts.push_back(Ids(6 + 5 * i, vocab, 20 + i));
  std::vector<std::vector<int32_t>> expected;
  {
    auto alone = MakeRunner(e, false);
    for (const auto& p : prompts) {
      engine::GenerateRequest g;
      g.prompt = p;
      g.sampling.temperature = 0;
      g.max_tokens = 20;
      auto r = alone->Generate({g});
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      expected.push_back(r.value()[0].tokens);
    }
  }
  auto runner = MakeRunner(e, true);
  sched::ContinuousBatchingOptions o;
  o.max_num_seqs = 8;
  o.max_num_batched_tokens = 32;
  sched::ContinuousBatcher b("gpu", runner->executor(), vocab, runner->options().max_seq_len, o);
  ASSERT_TRUE(b.Start().ok());
  struct Out {
    std::mutex mu;
    std::condition_variable cv;
    std::vector<int32_t> tokens;
    bool done = false;
    Status error;
  };
  std::vector<Out> outs(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    sched::GenerationRequest r;
    r.prompt = prompts[i];
    r.sampling.temperature = 0;
    r.max_tokens = 20;
    Out* out = &outs[i];
    r.on_event = [out](const sched::GenerationEvent& ev) {
      std::lock_guard<std::mutex> lock(out->mu);
      for (const auto& t : ev.tokens) out->tokens.push_back(t.token);
      if (ev.finished) {
        out->done = true;
        out->error = ev.error;
      }
      out->cv.notify_all();
      return sched::EventAction::kContinue;
    };
    ASSERT_TRUE(b.Submit(std::move(r)).ok());
  }
  for (size_t i = 0; i < prompts.size(); ++i) {
    std::unique_lock<std::mutex> lock(outs[i].mu);
    ASSERT_TRUE(outs[i].cv.wait_for(lock, 60s, [&] { return outs[i].done; }));
    EXPECT_TRUE(outs[i].error.ok()) << outs[i].error.ToString();
    EXPECT_EQ(outs[i].tokens, expected[i]) << "prompt " << i;
  }
  b.Stop(1s);
  EXPECT_GT(runner->executor().graphed_steps(), 0);
}

}  // namespace
}  // namespace ferry
