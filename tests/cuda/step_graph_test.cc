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
#include "decoder_test_util.h"
#include "engine/sampler.h"
#include "sched/continuous_batcher.h"
#include "sched/engine_core.h"
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

std::unique_ptr<testing::DecoderHarness> MakeRunner(const std::shared_ptr<engine::Engine>& e, bool graphs) {
  auto r = testing::DecoderHarness::Create(e, 8, 128, graphs);
  EXPECT_NE(r, nullptr);
  return r;
}

// Greedy generation with the argmax taken on the host from the step's logits, no graphs.
std::vector<int32_t> HostGreedy(testing::DecoderHarness& h, const std::vector<int32_t>& prompt, int max_tokens) {
  const int vocab = h.executor().model().config().vocab_size;
  std::vector<int32_t> seq = prompt;
  std::vector<int32_t> out;
  int32_t pos = 0;
  while (static_cast<int>(out.size()) < max_tokens) {
    auto l = h.Step({{77, std::span<const int32_t>(seq.data() + pos, seq.size() - pos), pos, false}});
    EXPECT_TRUE(l.ok()) << l.status().ToString();
    if (!l.ok()) break;
    pos = static_cast<int32_t>(seq.size());
    const int32_t next = engine::Argmax(std::span<const float>(l->data<float>(), vocab));
    out.push_back(next);
    seq.push_back(next);
  }
  h.cache().Free(77);
  return out;
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
      auto l = r->Step({{s, std::span<const int32_t>(ids[s].data(), pos[s]), 0, false}});
      ASSERT_TRUE(l.ok()) << l.status().ToString();
    }
  }
  const double tol = act == DType::kF32 ? 1e-4 : 2e-2;
  int live = kSeqs;
  for (int step = 0; step < 30; ++step) {
    // 5, 4, 3, 2 and 1 live sequences: buckets 8, 4, 4, 2 and 1.
    if (step == 8 || step == 14 || step == 20 || step == 25) --live;
    std::vector<testing::RawStep> steps;
    for (int s = 0; s < live; ++s) steps.push_back({s, std::span<const int32_t>(ids[s].data() + pos[s], 1), pos[s], false});
    auto a = graphed->Step(steps);
    auto b = eager->Step(steps);
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
  EXPECT_EQ(e->backend().graph_count(), graphs_before) << "an executor's recordings go with its KV cache";
}

TEST_P(StepGraphTest, DeviceGreedySamplingEqualsHostArgmax) {
  FERRY_SKIP_WITHOUT_GPU();
  auto e = LoadOnGpu("qwen2-tiny", GetParam());
  ASSERT_NE(e, nullptr);
  const int vocab = e->config().vocab_size;
  auto runner = MakeRunner(e, true);
  engine::StepExecutor& ex = runner->executor();
  ASSERT_TRUE(e->backend().samples_on_device());
  std::vector<std::vector<int32_t>> ids = {Ids(40, vocab, 1), Ids(40, vocab, 2), Ids(40, vocab, 3)};
  for (int s = 0; s < 3; ++s) ASSERT_TRUE(runner->Step({{s, std::span<const int32_t>(ids[s].data(), 10 + s), 0, false}}).ok());
  for (int step = 0; step < 8; ++step) {
    std::vector<testing::RawStep> raw;
    std::vector<engine::SeqStep> steps;
    for (int s = 0; s < 3; ++s) {
      const int p = 10 + s + step;
      raw.push_back({s, std::span<const int32_t>(ids[s].data() + p, 1), p, false});
      engine::SeqStep st;
      st.seq_id = s;
      st.tokens = raw.back().tokens;
      st.start_pos = p;
      st.sample = true;
      st.sampling.temperature = 0.0f;
      steps.push_back(st);
    }
    // The same step twice (rewriting the same K/V): host logits, then sampling on the device.
    auto logits = runner->Step(raw);
    auto tokens = ex.Step(steps);
    ASSERT_TRUE(logits.ok() && tokens.ok()) << tokens.status().ToString();
    ASSERT_EQ(tokens->size(), 3u);
    for (int s = 0; s < 3; ++s) {
      EXPECT_EQ((*tokens)[s].token, engine::Argmax(std::span<const float>(logits->data<float>() + s * vocab, vocab)))
          << "step " << step << " seq " << s;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Activations, StepGraphTest, ::testing::Values(DType::kBF16, DType::kF32),
                         [](const ::testing::TestParamInfo<DType>& i) { return std::string(DTypeName(i.param)); });

// The first column of each row of a step-graph test's output, on the host.
Result<std::vector<float>> FirstColumn(backend::Backend& b, const Tensor& out) {
  FERRY_ASSIGN_OR_RETURN(const Tensor host, b.ToHost(out));
  std::vector<float> first;
  for (int64_t r = 0; r < host.dim(0); ++r) first.push_back(host.data<float>()[r * host.dim(1)]);
  return first;
}

// A host table whose row r holds r in every column.
Tensor CountingTable(int64_t rows, int64_t cols) {
  Tensor table = Tensor::Empty({rows, cols}, DType::kF32);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) table.data<float>()[r * cols + c] = static_cast<float>(r);
  }
  return table;
}

// A replay copies the step's own inputs into the recording's buffers (the body does not run
// again), steps of another layout fail and drop the recording, and the next one records afresh.
TEST(StepGraphBackendTest, ReplayReadsEachStepsInputsAndAnotherLayoutIsRecaptured) {
  FERRY_SKIP_WITHOUT_GPU();
  auto be = backend::MakeCudaBackend({});
  ASSERT_TRUE(be.ok()) << be.status().ToString();
  backend::Backend& b = **be;
  const Tensor table = CountingTable(16, 8);
  int body_runs = 0;
  const backend::StepBody body = [&](const backend::StepTensors& in) -> Result<Tensor> {
    ++body_runs;
    FERRY_ASSIGN_OR_RETURN(Tensor out, b.Allocate({in.token_ids.dim(0), 8}, DType::kBF16));
    FERRY_RETURN_IF_ERROR(b.Embedding(table, in.token_ids, out));
    return out;
  };
  const backend::GraphKey key{7, 1, 64};
  auto step = [&](const std::vector<int32_t>& ids) -> Result<std::vector<float>> {
    backend::StepInputs in;
    in.token_ids = ids;
    FERRY_ASSIGN_OR_RETURN(const Tensor out, b.RunGraph(key, in, body));
    return FirstColumn(b, out);
  };
  auto first = step({1, 2, 3, 4});
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_EQ(*first, (std::vector<float>{1, 2, 3, 4}));
  EXPECT_EQ(b.graph_count(), 1);
  EXPECT_EQ(body_runs, 2) << "an eager run, then the recording";
  auto replayed = step({9, 8, 7, 6});
  ASSERT_TRUE(replayed.ok()) << replayed.status().ToString();
  EXPECT_EQ(*replayed, (std::vector<float>{9, 8, 7, 6})) << "the replay reads this step's ids";
  EXPECT_EQ(body_runs, 2) << "a replay runs no host code of the step";
  auto longer = step({1, 2, 3, 4, 5});
  EXPECT_EQ(longer.status().code(), StatusCode::kInternal) << longer.status().ToString();
  EXPECT_NE(longer.status().message().find("diverged"), std::string::npos) << longer.status().ToString();
  EXPECT_EQ(b.graph_count(), 0);
  auto recaptured = step({5, 4, 3, 2, 1});  // recorded afresh for the new layout
  ASSERT_TRUE(recaptured.ok()) << recaptured.status().ToString();
  EXPECT_EQ(*recaptured, (std::vector<float>{5, 4, 3, 2, 1}));
  EXPECT_EQ(b.graph_count(), 1);
  b.ReleaseGraphs(7);
  EXPECT_EQ(b.graph_count(), 0);
}

// A body that waits for the stream or copies a host array inside the recording cannot be
// recorded: its key runs eagerly from then on, with correct results, and nothing is kept.
TEST(StepGraphBackendTest, ABodyThatCannotBeRecordedRunsEagerly) {
  FERRY_SKIP_WITHOUT_GPU();
  auto be = backend::MakeCudaBackend({});
  ASSERT_TRUE(be.ok()) << be.status().ToString();
  backend::Backend& b = **be;
  const Tensor table = CountingTable(16, 8);
  const std::vector<int32_t> host_ids = {3, 1, 2};
  const backend::StepBody synchronizes = [&](const backend::StepTensors& in) -> Result<Tensor> {
    FERRY_RETURN_IF_ERROR(b.Synchronize());
    FERRY_ASSIGN_OR_RETURN(Tensor out, b.Allocate({in.token_ids.dim(0), 8}, DType::kBF16));
    FERRY_RETURN_IF_ERROR(b.Embedding(table, in.token_ids, out));
    return out;
  };
  const backend::StepBody stages = [&](const backend::StepTensors& in) -> Result<Tensor> {
    FERRY_ASSIGN_OR_RETURN(Tensor out, b.Allocate({in.token_ids.dim(0), 8}, DType::kBF16));
    FERRY_RETURN_IF_ERROR(b.Embedding(table, backend::HostIndices(host_ids), out));  // not the step's inputs
    return out;
  };
  for (const auto& [id, body] : {std::pair{int64_t{1}, synchronizes}, std::pair{int64_t{2}, stages}}) {
    for (int round = 0; round < 2; ++round) {
      const std::vector<int32_t> ids = {3, 1, 2};
      backend::StepInputs in;
      in.token_ids = ids;
      auto out = b.RunGraph(backend::GraphKey{9, id, 64}, in, body);
      ASSERT_TRUE(out.ok()) << "body " << id << ": " << out.status().ToString();
      auto first = FirstColumn(b, *out);
      ASSERT_TRUE(first.ok()) << first.status().ToString();
      EXPECT_EQ(*first, (std::vector<float>{3, 1, 2})) << "body " << id << ", round " << round;
      EXPECT_EQ(b.graph_count(), 0) << "body " << id;
    }
  }
  b.ReleaseGraphs(9);
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
    for (const auto& p : prompts) expected.push_back(HostGreedy(*alone, p, 20));
  }
  sched::EngineCoreOptions o;
  o.batching.max_num_seqs = 8;
  o.batching.max_num_batched_tokens = 32;
  o.batching.max_seq_len = 128;
  auto core = sched::EngineCore::Create("gpu", e, o);
  ASSERT_TRUE(core.ok()) << core.status().ToString();
  sched::ContinuousBatcher b(**core);
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
    r.on_event = [out](sched::GenerationEvent& ev) {
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
  EXPECT_GT((*core)->executor().graphed_steps(), 0);
}

// Asynchronous steps on the GPU: each decode row's input is the previous launch's draw,
// patched in on the device (into a graph's recorded inputs too), and the next step is queued
// before the previous one's ids reach the host. Greedy and seeded rows, chunked prefills, a
// stop id and log-probabilities give exactly the tokens and values of synchronous steps.
TEST(GpuContinuousBatcherTest, AsynchronousStepsEqualSynchronousSteps) {
  FERRY_SKIP_WITHOUT_GPU();
  auto e = LoadOnGpu("llama3-tiny", DType::kBF16);
  ASSERT_NE(e, nullptr);
  const int vocab = e->config().vocab_size;
  auto requests = [&](int32_t stop_id) {
    std::vector<sched::GenerationRequest> out;
    for (int i = 0; i < 10; ++i) {
      sched::GenerationRequest r;
      r.prompt = Ids(5 + 7 * i, vocab, 40 + i);
      r.sampling.temperature = i % 2 == 0 ? 0.0f : 0.9f;
      r.sampling.seed = 100 + i;
      r.max_tokens = 4 + 3 * i;
      r.ignore_eos = true;
      if (i == 3 && stop_id >= 0) r.stop_token_ids = {stop_id};
      if (i == 5 || i == 6) r.logprobs = i - 5;  // their rows' logits come back with the ids
      out.push_back(std::move(r));
    }
    return out;
  };
  auto run = [&](sched::AsyncScheduling async, int32_t stop_id, int64_t* graphed) {
    sched::EngineCoreOptions o;
    o.batching.max_num_seqs = 8;
    o.batching.max_num_batched_tokens = 32;  // prompts are chunked; decodes share steps with them
    o.batching.max_seq_len = 128;
    o.batching.async_scheduling = async;
    auto core = sched::EngineCore::Create("gpu", e, o);
    EXPECT_TRUE(core.ok()) << core.status().ToString();
    EXPECT_EQ((*core)->async_scheduling(), async != sched::AsyncScheduling::kOff);
    auto got = sched::GenerateAll(**core, requests(stop_id));
    EXPECT_TRUE(got.ok()) << got.status().ToString();
    EXPECT_EQ((*core)->cache().num_free_blocks(), (*core)->cache().num_blocks());
    *graphed = (*core)->executor().graphed_steps();
    return got.ok() ? std::move(got).value() : std::vector<sched::GenerationEvent>();
  };
  int64_t graphed_sync = 0, graphed_async = 0;
  const auto probe = run(sched::AsyncScheduling::kOff, -1, &graphed_sync);
  ASSERT_EQ(probe.size(), 10u);
  ASSERT_GE(probe[3].tokens.size(), 6u);
  const int32_t stop_id = probe[3].tokens[5].token;
  const auto want = run(sched::AsyncScheduling::kOff, stop_id, &graphed_sync);
  const auto got = run(sched::AsyncScheduling::kAuto, stop_id, &graphed_async);
  ASSERT_EQ(want.size(), got.size());
  for (size_t i = 0; i < want.size(); ++i) {
    std::vector<int32_t> a, b;
    for (const auto& t : want[i].tokens) a.push_back(t.token);
    for (const auto& t : got[i].tokens) b.push_back(t.token);
    EXPECT_EQ(b, a) << "request " << i;
    EXPECT_EQ(got[i].finish_reason, want[i].finish_reason) << "request " << i;
    for (size_t t = 0; t < std::min(want[i].tokens.size(), got[i].tokens.size()); ++t) {
      EXPECT_EQ(got[i].tokens[t].logprob, want[i].tokens[t].logprob) << "request " << i << " token " << t;
      EXPECT_EQ(got[i].tokens[t].top_logprobs, want[i].tokens[t].top_logprobs) << "request " << i << " token " << t;
    }
  }
  ASSERT_FALSE(got[6].tokens.empty());
  EXPECT_EQ(got[6].tokens[0].top_logprobs.size(), 1u);
  EXPECT_LE(got[6].tokens[0].logprob, 0.0f);  // a random tiny model's greedy pick may have probability 1
  EXPECT_EQ(want[3].finish_reason, sched::FinishReason::kStop);
  EXPECT_GT(graphed_async, 0);
}

}  // namespace
}  // namespace ferry
