// The step executor's graph policy: the batch buckets that get recordings; that asking for
// graphs changes nothing on a backend without them (the CPU); and, on a CPU backend with
// host-side step graphs, that graphed decode steps (padded to their bucket, inputs packed into
// each recording's own buffer, replayed without the model's host code) equal eager steps.
#include "engine/step_executor.h"

#include <gtest/gtest.h>

#include "backend/backend.h"
#include "engine/engine.h"
#include "decoder_test_util.h"
#include "engine/kv_cache.h"
#include "host_graph_backend.h"
#include "io/model_config.h"
#include "io/safetensors.h"
#include "model/decoder.h"
#include "test_util.h"

namespace ferry::engine {
namespace {

TEST(GraphBatchBucketsTest, PowersOfTwoThenHalfStepsEndingAtTheLimit) {
  EXPECT_EQ(GraphBatchBuckets(0), (std::vector<int>{}));
  EXPECT_EQ(GraphBatchBuckets(1), (std::vector<int>{1}));
  EXPECT_EQ(GraphBatchBuckets(3), (std::vector<int>{1, 2, 3}));
  EXPECT_EQ(GraphBatchBuckets(8), (std::vector<int>{1, 2, 4, 8}));
  EXPECT_EQ(GraphBatchBuckets(64), (std::vector<int>{1, 2, 4, 8, 16, 24, 32, 48, 64}));
  EXPECT_EQ(GraphBatchBuckets(100), (std::vector<int>{1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 100}));
  // Sorted and distinct for every limit, so the smallest bucket >= n is a lower_bound.
  for (int max = 1; max <= 600; ++max) {
    const std::vector<int> b = GraphBatchBuckets(max);
    ASSERT_FALSE(b.empty());
    EXPECT_EQ(b.back(), max);
    for (size_t i = 1; i < b.size(); ++i) EXPECT_LT(b[i - 1], b[i]) << max;
  }
}

TEST(StepExecutorTest, GraphsStayOffOnABackendWithoutThem) {
  auto e = Engine::Load(testing::FixturePath("models/llama3-tiny"));
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  ASSERT_FALSE((*e)->backend().supports_graphs());
  auto h = testing::DecoderHarness::Create(*e, 4, 64, /*graphs=*/true);
  ASSERT_NE(h, nullptr);
  StepExecutor& ex = h->executor();
  EXPECT_EQ(ex.graph_options().max_batch, 0);
  const std::vector<int32_t> ids = {5, 6, 7, 8};
  ASSERT_TRUE(h->Step({{1, ids, 0, false}}).ok());
  auto decode = h->Step({{1, std::span<const int32_t>(ids.data(), 1), 4, false}});
  ASSERT_TRUE(decode.ok()) << decode.status().ToString();
  EXPECT_EQ(decode->dim(0), 1);
  EXPECT_EQ(ex.graphed_steps(), 0);
  EXPECT_EQ((*e)->backend().graph_count(), 0);
  // The CPU's logits are host memory: it draws on the host, and says it does not on the device.
  EXPECT_FALSE((*e)->backend().samples_on_device());
}

// The KV blocks are the scheduler's to reserve; a step over a sequence without them is
// refused instead of writing outside its blocks.
TEST(StepExecutorTest, UnreservedSequenceIsRefused) {
  auto e = Engine::Load(testing::FixturePath("models/llama3-tiny"));
  ASSERT_TRUE(e.ok());
  auto h = testing::DecoderHarness::Create(*e, 2, 64);
  const std::vector<int32_t> ids = {5, 6, 7, 8};
  SeqStep s;
  s.seq_id = 3;
  s.tokens = ids;
  s.start_pos = 14;  // positions 14..17: two blocks of 16
  s.sample = true;
  EXPECT_EQ(h->executor().Step({s}).status().code(), StatusCode::kFailedPrecondition);
  ASSERT_TRUE(h->cache().Reserve(3, 16).ok());  // one block: too few
  EXPECT_EQ(h->executor().Step({s}).status().code(), StatusCode::kFailedPrecondition);
  ASSERT_TRUE(h->cache().Reserve(3, 18).ok());
  EXPECT_TRUE(h->executor().Step({s}).ok());
}

// One step returns what each sequence asked for: a sampled token, its log-probability and
// top k, the prompt targets' log-probabilities, the logits — all equal to what the logits say.
TEST(StepExecutorTest, TokensAndLogprobsFollowTheLogits) {
  auto e = Engine::Load(testing::FixturePath("models/llama3-tiny"));
  ASSERT_TRUE(e.ok());
  const int vocab = (*e)->config().vocab_size;
  auto h = testing::DecoderHarness::Create(*e, 4, 64);
  const std::vector<int32_t> a = {5, 6, 7, 8, 9, 10};
  const std::vector<int32_t> b = {40, 41, 42};
  auto logits = h->Step({{1, a, 0, true}, {2, b, 0, false}});  // reference rows: 6 for a, 1 for b
  ASSERT_TRUE(logits.ok()) << logits.status().ToString();
  h->cache().Free(1);
  h->cache().Free(2);
  ASSERT_EQ(logits->dim(0), 7);

  std::vector<SeqStep> steps(2);
  steps[0].seq_id = 11;
  steps[0].tokens = a;
  steps[0].targets = std::span<const int32_t>(a.data() + 1, a.size() - 1);  // row q scores a[q + 1]
  steps[0].top_logprobs = 3;
  steps[0].sample = true;
  steps[0].logprobs = 2;
  steps[0].sampling.temperature = 0;
  steps[1].seq_id = 12;
  steps[1].tokens = b;
  steps[1].sample = true;
  steps[1].keep_logits = true;
  steps[1].sampling.temperature = 0;
  ASSERT_TRUE(h->cache().Reserve(11, 6).ok());
  ASSERT_TRUE(h->cache().Reserve(12, 3).ok());
  auto out = h->executor().Step(steps);
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  ASSERT_EQ(out->size(), 2u);
  const float* rows = logits->data<float>();
  std::vector<float> lp;
  for (size_t q = 0; q + 1 < a.size(); ++q) {
    Sampler::LogSoftmax(std::span<const float>(rows + q * vocab, vocab), lp);
    const TokenOutput& t = (*out)[0].targets.at(q);
    EXPECT_EQ(t.token, a[q + 1]);
    EXPECT_NEAR(t.logprob, lp[a[q + 1]], 1e-4) << q;
    ASSERT_EQ(t.top_logprobs.size(), 3u);
    EXPECT_EQ(t.top_logprobs[0].first, Argmax(std::span<const float>(rows + q * vocab, vocab)));
  }
  const std::span<const float> last_a(rows + 5 * vocab, vocab);
  EXPECT_EQ((*out)[0].token, Argmax(last_a));
  EXPECT_TRUE((*out)[0].finite);
  ASSERT_EQ((*out)[0].sampled.top_logprobs.size(), 2u);
  EXPECT_EQ((*out)[0].sampled.top_logprobs[0].first, (*out)[0].token);
  EXPECT_TRUE((*out)[0].logits.empty());
  const std::span<const float> last_b(rows + 6 * vocab, vocab);
  EXPECT_EQ((*out)[1].token, Argmax(last_b));
  ASSERT_EQ((*out)[1].logits.size(), static_cast<size_t>(vocab));
  for (int v = 0; v < vocab; ++v) ASSERT_NEAR((*out)[1].logits[v], last_b[v], 1e-4f) << v;
}

std::vector<int32_t> Ids(int n, int vocab, int salt) {
  std::vector<int32_t> ids;
  for (int i = 0; i < n; ++i) ids.push_back((i * 37 + salt * 101 + 11) % vocab);
  return ids;
}

// A decoder on the host-graph backend with its own KV cache and executor.
struct GraphedDecoder {
  testing::HostGraphBackend backend;
  std::unique_ptr<model::DecoderModel> model;
  std::unique_ptr<KvCache> cache;
  std::unique_ptr<StepExecutor> executor;

  Status Load(const std::string& dir, int max_seqs, int max_seq_len) {
    FERRY_ASSIGN_OR_RETURN(const io::ModelConfig config, io::LoadModelConfig(dir));
    FERRY_ASSIGN_OR_RETURN(std::shared_ptr<io::Checkpoint> ckpt, io::Checkpoint::Open(dir));
    const model::WeightSource src{[ckpt](const std::string& name) { return ckpt->Get(name); },
                                  [ckpt](const std::string& name) { return ckpt->Has(name); }};
    FERRY_ASSIGN_OR_RETURN(model, model::DecoderModel::Load(config, src, backend));
    KvCacheConfig kc;
    kc.num_layers = config.num_layers;
    kc.num_kv_heads = config.num_kv_heads;
    kc.head_dim = config.head_dim;
    kc.block_tokens = 16;
    kc.num_blocks = max_seqs * ((max_seq_len + kc.block_tokens - 1) / kc.block_tokens);
    kc.dtype = backend.kv_cache_dtype();
    FERRY_ASSIGN_OR_RETURN(cache, KvCache::Create(kc, backend));
    executor = std::make_unique<StepExecutor>(*model, *cache);
    executor->SetGraphOptions(StepGraphOptions{max_seqs, max_seq_len});
    return Status::Ok();
  }
};

// Reserves the blocks (as the scheduler would) and returns the step's host logits.
Result<Tensor> Logits(StepExecutor& x, const std::vector<testing::RawStep>& raw) {
  std::vector<SeqStep> steps;
  for (const testing::RawStep& r : raw) {
    FERRY_RETURN_IF_ERROR(x.cache().Reserve(r.seq_id, r.start_pos + static_cast<int32_t>(r.tokens.size())));
    SeqStep s;
    s.seq_id = r.seq_id;
    s.tokens = r.tokens;
    s.start_pos = r.start_pos;
    steps.push_back(s);
  }
  return x.Logits(steps);
}

// Five sequences decode together, then drop out one by one, so the batch walks through the
// buckets 8, 4, 2 and 1 (with padding rows) while contexts grow across block boundaries; the
// graphed logits equal those of the plain CPU backend stepping eagerly.
TEST(StepExecutorGraphTest, GraphedDecodeMatchesEagerAcrossBucketsAndContexts) {
  const std::string dir = testing::FixturePath("models/llama3-tiny");
  auto e = Engine::Load(dir);
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  auto eager = testing::DecoderHarness::Create(*e, 8, 128);
  ASSERT_NE(eager, nullptr);
  auto graphed = std::make_unique<GraphedDecoder>();
  const Status loaded = graphed->Load(dir, 8, 128);
  ASSERT_TRUE(loaded.ok()) << loaded.ToString();
  StepExecutor& gx = *graphed->executor;
  StepExecutor& ex = eager->executor();
  ASSERT_EQ(gx.graph_options().max_batch, 8);

  const int vocab = (*e)->config().vocab_size;
  constexpr int kSeqs = 5;
  std::vector<std::vector<int32_t>> ids;
  for (int s = 0; s < kSeqs; ++s) ids.push_back(Ids(70, vocab, s));
  std::vector<int> pos(kSeqs);
  for (int s = 0; s < kSeqs; ++s) {
    pos[s] = 5 + 7 * s;  // prompts of 5..33 tokens: prefills run eagerly
    for (StepExecutor* x : {&gx, &ex}) {
      auto l = Logits(*x, {{s, std::span<const int32_t>(ids[s].data(), pos[s]), 0, false}});
      ASSERT_TRUE(l.ok()) << l.status().ToString();
    }
  }
  int live = kSeqs;
  for (int step = 0; step < 30; ++step) {
    // 5, 4, 3, 2 and 1 live sequences: buckets 8, 4, 4, 2 and 1.
    if (step == 8 || step == 14 || step == 20 || step == 25) --live;
    std::vector<testing::RawStep> steps;
    for (int s = 0; s < live; ++s) steps.push_back({s, std::span<const int32_t>(ids[s].data() + pos[s], 1), pos[s], false});
    auto a = Logits(gx, steps);
    auto b = Logits(ex, steps);
    ASSERT_TRUE(a.ok()) << a.status().ToString();
    ASSERT_TRUE(b.ok()) << b.status().ToString();
    ASSERT_EQ(a->dim(0), live);
    ASSERT_EQ(b->dim(0), live);
    const std::vector<float> fa = testing::ToFloats(*a), fb = testing::ToFloats(*b);
    EXPECT_LE(testing::MaxDiff(fa.data(), fb.data(), fa.size()), 1e-4 * testing::MaxAbs(fb))
        << "step " << step << ", " << live << " live";
    for (int s = 0; s < live; ++s) ++pos[s];
  }
  EXPECT_EQ(gx.graphed_steps(), 30);
  EXPECT_EQ(graphed->backend.graph_count(), 4);  // buckets 8, 4, 2 and 1
  EXPECT_EQ(graphed->backend.records(), 4);
  EXPECT_EQ(graphed->backend.replays(), 26);
  // A different planning context drops the recordings (they were made for the old one).
  gx.SetGraphOptions(StepGraphOptions{8, 64});
  EXPECT_EQ(graphed->backend.graph_count(), 0);
  gx.SetGraphOptions(StepGraphOptions{8, 128});
  ASSERT_TRUE(Logits(gx, {{0, std::span<const int32_t>(ids[0].data() + pos[0], 1), pos[0], false}}).ok());
  EXPECT_EQ(graphed->backend.graph_count(), 1);
  // The executor's recordings go with it.
  graphed->executor.reset();
  EXPECT_EQ(graphed->backend.graph_count(), 0);
}

// A step longer than the planning context, or a mixed prefill/decode step, runs eagerly.
TEST(StepExecutorGraphTest, StepsOutsideTheGraphsRunEagerly) {
  auto graphed = std::make_unique<GraphedDecoder>();
  const Status loaded = graphed->Load(testing::FixturePath("models/llama3-tiny"), 4, 48);
  ASSERT_TRUE(loaded.ok()) << loaded.ToString();
  StepExecutor& gx = *graphed->executor;
  const std::vector<int32_t> ids = Ids(60, graphed->model->config().vocab_size, 3);
  ASSERT_TRUE(Logits(gx, {{1, std::span<const int32_t>(ids.data(), 40), 0, false},
                          {2, std::span<const int32_t>(ids.data(), 3), 0, false}})
                  .ok());
  ASSERT_TRUE(Logits(gx, {{1, std::span<const int32_t>(ids.data() + 40, 1), 40, false},
                          {2, std::span<const int32_t>(ids.data() + 3, 2), 3, false}})
                  .ok());  // mixed
  EXPECT_EQ(gx.graphed_steps(), 0);
  ASSERT_TRUE(Logits(gx, {{1, std::span<const int32_t>(ids.data() + 41, 1), 41, false}}).ok());
  EXPECT_EQ(gx.graphed_steps(), 1);
  EXPECT_EQ(graphed->backend.graph_count(), 1);
  // A context past the plan (48 tokens) steps eagerly (the executor sends no such step to a
  // recording), with the recordings kept.
  for (int p = 42; p < 50; ++p) {
    auto r = Logits(gx, {{1, std::span<const int32_t>(ids.data() + p, 1), p, false}});
    ASSERT_TRUE(r.ok()) << "position " << p << ": " << r.status().ToString();
  }
  EXPECT_EQ(gx.graphed_steps(), 7);  // positions 41..47 end at contexts 42..48
  EXPECT_EQ(graphed->backend.graph_count(), 1);
}

}  // namespace
}  // namespace ferry::engine
