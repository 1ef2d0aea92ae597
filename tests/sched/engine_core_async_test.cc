// Asynchronous scheduling (the next step planned and launched before the one in flight is
// collected), on the demo decoder with async_scheduling: on. The CPU runs each launch at
// once, so these tests check the scheduling itself: the same tokens and finish reasons as
// synchronous steps (greedy, seeded, stop ids, chunked prefills, prefix caching,
// preemption), tokens taken from the previous launch, rows of finished or cancelled
// sequences dropped, requests that need the host run synchronously, and every block freed.
#include <gtest/gtest.h>

#include <optional>

#include "engine/step_executor.h"
#include "sched/engine_core.h"
#include "test_util.h"

namespace ferry::sched {
namespace {

class EngineCoreAsyncTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto e = engine::Engine::Load(testing::SourcePath("models/demo/kjv-decoder"), engine::EngineOptions{2, true});
    ASSERT_TRUE(e.ok()) << e.status().ToString();
    engine_ = e.value();
  }
  static void TearDownTestSuite() { engine_.reset(); }

  static std::unique_ptr<EngineCore> MakeCore(AsyncScheduling async, int max_num_seqs, int budget, int max_seq_len,
                                              int kv_seqs = 0, bool prefix_caching = true) {
    EngineCoreOptions o;
    o.batching.max_num_seqs = max_num_seqs;
    o.batching.max_num_batched_tokens = budget;
    o.batching.max_seq_len = max_seq_len;
    o.batching.enable_prefix_caching = prefix_caching;
    o.batching.async_scheduling = async;
    o.kv_seqs = kv_seqs;
    auto core = EngineCore::Create("kjv", engine_, o);
    EXPECT_TRUE(core.ok()) << core.status().ToString();
    return std::move(core).value();
  }

  static std::vector<int32_t> Prompt(const char* text) {
    auto ids = engine_->EncodePrompt(text);
    EXPECT_TRUE(ids.ok());
    return ids.value();
  }

  static GenerationRequest Request(std::vector<int32_t> prompt, int max_tokens, float temperature = 0.0f,
                                   std::optional<uint64_t> seed = std::nullopt) {
    GenerationRequest r;
    r.prompt = std::move(prompt);
    r.sampling.temperature = temperature;
    r.sampling.seed = seed;
    r.max_tokens = max_tokens;
    r.ignore_eos = true;
    return r;
  }

  static std::vector<int32_t> Tokens(const GenerationEvent& ev) {
    std::vector<int32_t> out;
    for (const auto& t : ev.tokens) out.push_back(t.token);
    return out;
  }

  // The requests through a synchronous and an asynchronous core of the same shape: equal
  // tokens, finish reasons and counts, and every block back.
  static void ExpectSameAsSync(const std::function<std::vector<GenerationRequest>()>& requests, int max_num_seqs,
                               int budget, int max_seq_len, int kv_seqs = 0, bool preempts = false) {
    auto sync = MakeCore(AsyncScheduling::kOff, max_num_seqs, budget, max_seq_len, kv_seqs);
    auto async = MakeCore(AsyncScheduling::kOn, max_num_seqs, budget, max_seq_len, kv_seqs);
    EXPECT_FALSE(sync->async_scheduling());
    ASSERT_TRUE(async->async_scheduling());
    auto want = GenerateAll(*sync, requests());
    ASSERT_TRUE(want.ok()) << want.status().ToString();
    auto got = GenerateAll(*async, requests());
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    ASSERT_EQ(got->size(), want->size());
    for (size_t i = 0; i < want->size(); ++i) {
      EXPECT_EQ(Tokens((*got)[i]), Tokens((*want)[i])) << "request " << i;
      EXPECT_EQ((*got)[i].finish_reason, (*want)[i].finish_reason) << "request " << i;
      EXPECT_EQ((*got)[i].generated_tokens_count, (*want)[i].generated_tokens_count) << "request " << i;
      EXPECT_TRUE((*got)[i].error.ok()) << (*got)[i].error.ToString();
    }
    EXPECT_TRUE(async->empty());
    EXPECT_EQ(async->cache().num_free_blocks(), async->cache().num_blocks());
    EXPECT_EQ(async->preemptions(), sync->preemptions());
    EXPECT_EQ(sync->preemptions() > 0, preempts);
  }

  static std::shared_ptr<engine::Engine> engine_;
};

std::shared_ptr<engine::Engine> EngineCoreAsyncTest::engine_;

// Chunked prefills (a budget of 8 tokens), decodes sharing steps, greedy and seeded rows,
// different lengths, and a stop id that ends a request on a token whose next row was
// already launched.
TEST_F(EngineCoreAsyncTest, StepsGiveTheTokensOfSynchronousSteps) {
  auto probe = MakeCore(AsyncScheduling::kOff, 1, 64, 128);
  auto greedy = GenerateAll(*probe, {Request(Prompt("And the LORD said unto Moses,"), 12)});
  ASSERT_TRUE(greedy.ok());
  const int32_t stop_id = (*greedy)[0].tokens[4].token;
  auto requests = [&] {
    std::vector<GenerationRequest> r;
    r.push_back(Request(Prompt("And the LORD said unto Moses,"), 12));
    r.push_back(Request(Prompt("In the beginning"), 3, 0.9f, 11));
    r.push_back(Request(Prompt("Blessed are the poor in spirit: for theirs is the kingdom of heaven."), 20, 1.0f, 12));
    r.push_back(Request(Prompt("Praise ye the LORD."), 1));
    GenerationRequest stopped = Request(Prompt("And the LORD said unto Moses,"), 12);
    stopped.ignore_eos = false;
    stopped.stop_token_ids = {stop_id};
    r.push_back(std::move(stopped));
    GenerationRequest at_least = Request(Prompt("And the LORD said unto Moses,"), 12);
    at_least.ignore_eos = false;
    at_least.stop_token_ids = {stop_id};
    at_least.min_tokens = 8;  // the stop id is banned for the first 8 tokens: the counter is ahead
    r.push_back(std::move(at_least));
    return r;
  };
  ExpectSameAsSync(requests, 4, 8, 128);
  ExpectSameAsSync(requests, 8, 512, 128);
}

// One step in flight between calls, and the first call's events come with the second.
TEST_F(EngineCoreAsyncTest, TheNextStepIsLaunchedBeforeThePreviousIsCollected) {
  auto core = MakeCore(AsyncScheduling::kOn, 2, 64, 128);
  core->Add(1, Request(Prompt("And it came to pass"), 5));
  std::vector<GenerationEvent> out;
  ASSERT_TRUE(core->Step(out));  // the prefill, launched
  EXPECT_TRUE(out.empty());
  EXPECT_EQ(core->in_flight(), 1);
  EXPECT_EQ(core->executor().launched(), 1);
  ASSERT_TRUE(core->Step(out));  // the first decode launched (its input: the prefill's draw), the prefill collected
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].tokens.size(), 1u);
  EXPECT_EQ(core->in_flight(), 1);
  int tokens = 1;
  for (int i = 0; i < 10 && !core->empty(); ++i) {
    out.clear();
    ASSERT_TRUE(core->Step(out));
    for (const GenerationEvent& ev : out) tokens += static_cast<int>(ev.tokens.size());
  }
  EXPECT_TRUE(core->empty());
  EXPECT_EQ(tokens, 5);
  // The last token's row was not launched again: nothing is in flight once it is out.
  EXPECT_EQ(core->in_flight(), 0);
  out.clear();
  EXPECT_FALSE(core->Step(out));
  EXPECT_EQ(core->cache().num_free_blocks(), core->cache().num_blocks());
}

// A request cancelled while its row is in flight: the row is dropped, the others go on as
// if it had never been there.
TEST_F(EngineCoreAsyncTest, ACancelWithARowInFlightDropsTheRow) {
  auto reference = MakeCore(AsyncScheduling::kOff, 2, 64, 128);
  auto want = GenerateAll(*reference, {Request(Prompt("For God so loved the world,"), 10, 0.8f, 3)});
  ASSERT_TRUE(want.ok());
  auto core = MakeCore(AsyncScheduling::kOn, 2, 64, 128);
  core->Add(1, Request(Prompt("And it came to pass"), 30));
  core->Add(2, Request(Prompt("For God so loved the world,"), 10, 0.8f, 3));
  std::vector<GenerationEvent> out;
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(core->Step(out));
  ASSERT_EQ(core->in_flight(), 1);
  ASSERT_TRUE(core->Finish(1, FinishReason::kAbort, out));
  std::vector<int32_t> tokens;
  for (int i = 0; i < 40 && !core->empty(); ++i) ASSERT_TRUE(core->Step(out));
  bool finished1 = false;
  for (const GenerationEvent& ev : out) {
    if (ev.handle == 1) {
      EXPECT_FALSE(finished1) << "an event after the cancel";
      finished1 = finished1 || ev.finished;
    } else {
      for (const auto& t : ev.tokens) tokens.push_back(t.token);
    }
  }
  EXPECT_TRUE(finished1);
  EXPECT_EQ(tokens, Tokens((*want)[0]));
  EXPECT_TRUE(core->empty());
  EXPECT_EQ(core->cache().num_free_blocks(), core->cache().num_blocks());
}

// Requests that need the host between tokens (log-probabilities, penalties) make the steps
// synchronous while they are here; the others keep their tokens.
TEST_F(EngineCoreAsyncTest, RequestsThatNeedTheHostRunSynchronously) {
  auto requests = [&] {
    std::vector<GenerationRequest> r;
    r.push_back(Request(Prompt("And God said,"), 16, 1.0f, 1234));
    GenerationRequest logprobs = Request(Prompt("In the beginning"), 6, 0.7f, 5);
    logprobs.logprobs = 2;
    r.push_back(std::move(logprobs));
    GenerationRequest penalty = Request(Prompt("Praise ye the LORD."), 4, 0.0f);
    penalty.sampling.repetition_penalty = 1.3f;
    r.push_back(std::move(penalty));
    return r;
  };
  ExpectSameAsSync(requests, 4, 64, 128);

  auto core = MakeCore(AsyncScheduling::kOn, 4, 64, 128);
  GenerationRequest logprobs = Request(Prompt("In the beginning"), 3);
  logprobs.logprobs = 0;
  core->Add(1, Request(Prompt("And God said,"), 12));
  std::vector<GenerationEvent> out;
  ASSERT_TRUE(core->Step(out));
  EXPECT_EQ(core->in_flight(), 1);
  core->Add(2, std::move(logprobs));
  while (core->Contains(2)) {
    ASSERT_TRUE(core->Step(out));
    EXPECT_EQ(core->in_flight(), 0) << "a step launched while a request needs the host";
  }
  ASSERT_TRUE(core->Step(out));
  EXPECT_EQ(core->in_flight(), 1) << "asynchronous again once it has gone";
}

// Shared prefixes found in the cache, and a KV cache too small for the batch (preemption):
// the same tokens as synchronous steps.
TEST_F(EngineCoreAsyncTest, PrefixCachingAndPreemptionKeepTheTokens) {
  const std::vector<int32_t> system = Prompt(
      "And God said, Let there be light: and there was light. And God saw the light, that it was good: and God "
      "divided the light from the darkness.");
  auto shared = [&] {
    std::vector<GenerationRequest> r;
    for (const char* q : {" In the beginning", " And the evening", " Let the waters"}) {
      std::vector<int32_t> p = system;
      auto more = engine_->tokenizer()->Encode(q);
      EXPECT_TRUE(more.ok());
      p.insert(p.end(), more->begin(), more->end());
      r.push_back(Request(p, 20, 0.9f, r.size() + 1));
    }
    return r;
  };
  ExpectSameAsSync(shared, 4, 64, 128);
  auto tight = [&] {
    std::vector<GenerationRequest> r;
    r.push_back(Request(Prompt("The LORD is my shepherd; I shall not want."), 70));
    r.push_back(Request(Prompt("For God so loved the world,"), 70, 0.9f, 7));
    r.push_back(Request(Prompt("Now the serpent was more subtil than any beast of the field"), 70, 0.9f, 8));
    return r;
  };
  // KV for two sequences while three run: decodes run out of blocks and evict.
  ExpectSameAsSync(tight, 3, 64, 96, 2, /*preempts=*/true);
}

// The executor alone: a launched step whose decode row takes the previous launch's draw
// gives what Step gives with the id written in; rows that cannot be launched are refused.
TEST_F(EngineCoreAsyncTest, ExecutorLaunchesTakeThePreviousDraw) {
  auto core = MakeCore(AsyncScheduling::kOff, 2, 64, 128);
  engine::StepExecutor& ex = core->executor();
  engine::KvCache& cache = ex.cache();
  const std::vector<int32_t> prompt = Prompt("And it came to pass");
  const int32_t n = static_cast<int32_t>(prompt.size());
  ASSERT_TRUE(cache.Reserve(1, n + 2).ok());
  ASSERT_TRUE(cache.Reserve(2, n + 2).ok());
  auto row = [](int64_t seq, std::span<const int32_t> tokens, int32_t pos) {
    engine::SeqStep s;
    s.seq_id = seq;
    s.tokens = tokens;
    s.start_pos = pos;
    s.sample = true;
    s.sampling.temperature = 0.0f;
    return s;
  };
  engine::SeqStep prefill = row(1, prompt, 0);
  ASSERT_TRUE(ex.Launch({prefill}).ok());
  const int32_t placeholder = 0;
  engine::SeqStep decode = row(1, std::span<const int32_t>(&placeholder, 1), n);
  decode.from_previous = 0;
  ASSERT_TRUE(ex.Launch({decode}).ok());
  EXPECT_EQ(ex.launched(), 2);
  auto first = ex.Collect();
  auto second = ex.Collect();
  ASSERT_TRUE(first.ok() && second.ok());
  // The same two steps, synchronously, on the second sequence.
  prefill.seq_id = 2;
  auto a = ex.Step({prefill});
  ASSERT_TRUE(a.ok());
  const int32_t id = (*a)[0].token;
  EXPECT_EQ(id, (*first)[0].token);
  engine::SeqStep known = row(2, std::span<const int32_t>(&id, 1), n);
  auto b = ex.Step({known});
  ASSERT_TRUE(b.ok());
  EXPECT_EQ((*b)[0].token, (*second)[0].token);

  decode.from_previous = 0;  // nothing launched before it
  EXPECT_EQ(ex.Launch({decode}).code(), StatusCode::kInvalidArgument);
  known.logprobs = 1;
  EXPECT_EQ(ex.Launch({known}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ex.launched(), 0);
  EXPECT_EQ(ex.Collect().status().code(), StatusCode::kFailedPrecondition);
  cache.Free(1);
  cache.Free(2);
}

}  // namespace
}  // namespace ferry::sched
