// The engine core without threads, on the demo decoder: batching equals each request
// alone, the scheduler's KV accounting, validation at the edge, seeded sampling that does
// not depend on the batch, logits kept for offline tools, and asynchronous steps (the same
// tokens as synchronous ones).
#include "sched/engine_core.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "decoder_test_util.h"
#include "engine/step_executor.h"
#include "test_util.h"

namespace ferry::sched {
namespace {

class EngineCoreTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto e = engine::Engine::Load(testing::SourcePath("models/demo/kjv-decoder"), engine::EngineOptions{2, true});
    ASSERT_TRUE(e.ok()) << e.status().ToString();
    engine_ = e.value();
  }
  static void TearDownTestSuite() { engine_.reset(); }

  static std::unique_ptr<EngineCore> MakeCore(int max_num_seqs, int budget, int max_seq_len, int kv_seqs = 0,
                                              AsyncScheduling async = AsyncScheduling::kAuto) {
    EngineCoreOptions o;
    o.batching.max_num_seqs = max_num_seqs;
    o.batching.max_num_batched_tokens = budget;
    o.batching.max_seq_len = max_seq_len;
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
    auto sync = MakeCore(max_num_seqs, budget, max_seq_len, kv_seqs, AsyncScheduling::kOff);
    auto async = MakeCore(max_num_seqs, budget, max_seq_len, kv_seqs, AsyncScheduling::kOn);
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

std::shared_ptr<engine::Engine> EngineCoreTest::engine_;

TEST_F(EngineCoreTest, ChunkedBatchEqualsEachRequestAloneAndFreesEveryBlock) {
  const std::vector<std::vector<int32_t>> prompts = {
      Prompt("And the LORD said unto Moses,"), Prompt("In the beginning"),
      Prompt("Blessed are the poor in spirit: for theirs is the kingdom of heaven."), Prompt("Praise ye the LORD.")};
  std::vector<std::vector<int32_t>> alone;
  {
    auto core = MakeCore(1, 512, 128);
    for (const auto& p : prompts) {
      auto r = GenerateAll(*core, {Request(p, 12)});
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      alone.push_back(Tokens((*r)[0]));
    }
  }
  auto core = MakeCore(4, 8, 128);  // a budget of 8 tokens: prompts are chunked, decodes share steps
  std::vector<GenerationRequest> requests;
  for (const auto& p : prompts) requests.push_back(Request(p, 12));
  auto r = GenerateAll(*core, std::move(requests));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  for (size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_TRUE((*r)[i].finished);
    EXPECT_EQ((*r)[i].finish_reason, FinishReason::kLength);
    EXPECT_EQ(Tokens((*r)[i]), alone[i]) << i;
    EXPECT_EQ((*r)[i].generated_tokens_count, 12);
  }
  EXPECT_GT(core->steps(), 12u);
  EXPECT_TRUE(core->empty());
  EXPECT_EQ(core->cache().num_free_blocks(), core->cache().num_blocks());
}

// Requests that share a prompt prefix: the later ones start after it (no recompute), and
// their outputs are exactly those of a core without the prefix cache.
TEST_F(EngineCoreTest, PrefixCachingSkipsSharedPrefixesAndKeepsOutputs) {
  const std::vector<int32_t> system = Prompt(
      "And God said, Let there be light: and there was light. And God saw the light, that it was good: and God "
      "divided the light from the darkness.");
  ASSERT_GE(system.size(), 32u);
  std::vector<std::vector<int32_t>> prompts;
  for (const char* q : {" In the beginning", " And the evening", " Let the waters"}) {
    std::vector<int32_t> p = system;
    auto more = engine_->tokenizer()->Encode(q);
    ASSERT_TRUE(more.ok());
    p.insert(p.end(), more->begin(), more->end());
    prompts.push_back(p);
  }
  auto run = [&](bool caching, int64_t* hits) {
    EngineCoreOptions o;
    o.batching.max_num_seqs = 4;
    o.batching.max_num_batched_tokens = 64;
    o.batching.max_seq_len = 128;
    o.batching.enable_prefix_caching = caching;
    auto core = std::move(EngineCore::Create("kjv", engine_, o)).value();
    std::vector<std::vector<int32_t>> outs;
    for (const auto& p : prompts) {  // one after another: each finds the earlier ones' blocks
      auto ev = GenerateAll(*core, {Request(p, 12)});
      EXPECT_TRUE(ev.ok());
      outs.push_back(Tokens((*ev)[0]));
    }
    // And all at once (they share the prefix within one batch too).
    std::vector<GenerationRequest> batch;
    for (const auto& p : prompts) batch.push_back(Request(p, 12));
    auto ev = GenerateAll(*core, std::move(batch));
    EXPECT_TRUE(ev.ok());
    for (const auto& e : *ev) outs.push_back(Tokens(e));
    *hits = core->prefix_hit_tokens();
    EXPECT_EQ(core->cache().num_free_blocks(), core->cache().num_blocks());
    return outs;
  };
  int64_t hits_on = 0, hits_off = 0;
  const auto with = run(true, &hits_on);
  const auto without = run(false, &hits_off);
  EXPECT_EQ(with, without);
  EXPECT_EQ(hits_off, 0);
  const int64_t shared_blocks = static_cast<int64_t>(system.size()) / 16;
  EXPECT_GE(hits_on, 2 * shared_blocks * 16);  // at least the 2nd and 3rd sequential requests hit
}

TEST_F(EngineCoreTest, TheSchedulerReservesAndFreesKvBlocks) {
  auto core = MakeCore(2, 64, 128);
  const int all = core->cache().num_blocks();
  core->Add(1, Request(Prompt("And it came to pass"), 40));
  std::vector<GenerationEvent> out;
  ASSERT_TRUE(core->Step(out));  // prefill: blocks for the prompt (+ the first token) are reserved
  const int after_prefill = core->cache().num_free_blocks();
  EXPECT_LT(after_prefill, all);
  for (int i = 0; i < 20; ++i) ASSERT_TRUE(core->Step(out));
  EXPECT_LT(core->cache().num_free_blocks(), after_prefill) << "decoding grew the block table";
  ASSERT_TRUE(core->Finish(1, FinishReason::kAbort, out));
  EXPECT_EQ(out.back().finish_reason, FinishReason::kAbort);
  EXPECT_TRUE(out.back().finished);
  EXPECT_EQ(core->cache().num_free_blocks(), all);
  EXPECT_FALSE(core->Finish(1, FinishReason::kAbort, out)) << "a finished request is unknown";
}

TEST_F(EngineCoreTest, PreemptionByRecomputeKeepsGreedyAndSeededOutputs) {
  const std::vector<int32_t> p1 = Prompt("The LORD is my shepherd; I shall not want.");
  const std::vector<int32_t> p2 = Prompt("For God so loved the world,");
  const std::vector<int32_t> p3 = Prompt("Now the serpent was more subtil than any beast of the field");
  auto roomy = MakeCore(3, 64, 96);
  auto reference = GenerateAll(*roomy, {Request(p1, 70), Request(p2, 70, 0.9f, 7), Request(p3, 70, 0.9f, 8)});
  ASSERT_TRUE(reference.ok());
  // KV for two sequences while three run: decodes run out of blocks and evict.
  EngineCoreOptions o;
  o.batching.max_num_seqs = 3;
  o.batching.max_num_batched_tokens = 64;
  o.batching.max_seq_len = 96;
  o.kv_seqs = 2;
  auto core = EngineCore::Create("tight", engine_, o);
  ASSERT_TRUE(core.ok());
  auto got = GenerateAll(**core, {Request(p1, 70), Request(p2, 70, 0.9f, 7), Request(p3, 70, 0.9f, 8)});
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_GT((*core)->preemptions(), 0u);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(Tokens((*got)[i]), Tokens((*reference)[i])) << i;
}

// A seeded request's n-th token is a function of its seed and n: the same alone, in a
// batch, or next to a request that asks for log-probabilities.
TEST_F(EngineCoreTest, SeededSamplingDoesNotDependOnTheBatch) {
  const std::vector<int32_t> p = Prompt("And God said,");
  auto core = MakeCore(4, 256, 128);
  auto alone = GenerateAll(*core, {Request(p, 24, 1.0f, 1234)});
  ASSERT_TRUE(alone.ok());
  GenerationRequest with_logprobs = Request(Prompt("In the beginning"), 24, 0.7f, 5);
  with_logprobs.logprobs = 3;
  auto together = GenerateAll(*core, {Request(Prompt("Praise ye"), 10), Request(p, 24, 1.0f, 1234),
                                      std::move(with_logprobs)});
  ASSERT_TRUE(together.ok());
  EXPECT_EQ(Tokens((*together)[1]), Tokens((*alone)[0]));
  ASSERT_EQ((*together)[2].tokens.size(), 24u);
  EXPECT_EQ((*together)[2].tokens[0].top_logprobs.size(), 3u);
  auto other_seed = GenerateAll(*core, {Request(p, 24, 1.0f, 1235)});
  EXPECT_NE(Tokens((*other_seed)[0]), Tokens((*alone)[0]));
}

TEST_F(EngineCoreTest, ValidationIsClearAndHappensOnce) {
  auto core = MakeCore(2, 64, 64);
  const int vocab = engine_->config().vocab_size;
  GenerationRequest r = Request({1, 2, vocab}, 2);
  Status st = core->Validate(r);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("outside the vocabulary"), std::string::npos) << st.message();
  EXPECT_EQ(core->Validate(Request(std::vector<int32_t>(60, 5), 10)).code(), StatusCode::kOutOfRange);
  EXPECT_EQ(core->Validate(Request({}, 10)).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(core->Validate(Request({5}, 0)).code(), StatusCode::kInvalidArgument);
  GenerationRequest hot = Request({5}, 2);
  hot.sampling.top_p = 0;
  EXPECT_EQ(core->Validate(hot).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(core->Validate(Request({5, 6}, 10)).ok());
  // GenerateAll refuses the whole call on a bad request and runs nothing.
  EXPECT_FALSE(GenerateAll(*core, {Request({5}, 2), Request({1, vocab + 3}, 2)}).ok());
  EXPECT_TRUE(core->empty());
}

TEST_F(EngineCoreTest, DeadlinesAndStopIdsEndRequests) {
  auto core = MakeCore(2, 64, 128);
  GenerationRequest late = Request(Prompt("And it came to pass"), 30);
  late.deadline = Clock::now() - std::chrono::milliseconds(1);
  core->Add(1, std::move(late));
  std::vector<GenerationEvent> out;
  core->ExpireDeadlines(Clock::now(), out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].error.code(), StatusCode::kDeadlineExceeded);
  EXPECT_EQ(out[0].failure_reason, "timeout");
  EXPECT_TRUE(core->empty());
  // A stop id ends the request with kStop right after the token that matched.
  auto greedy = GenerateAll(*core, {Request(Prompt("And it came to pass"), 8)});
  ASSERT_TRUE(greedy.ok());
  GenerationRequest stop = Request(Prompt("And it came to pass"), 8);
  stop.ignore_eos = false;
  stop.stop_ids = {(*greedy)[0].tokens[2].token};
  auto stopped = GenerateAll(*core, {std::move(stop)});
  ASSERT_TRUE(stopped.ok());
  EXPECT_EQ((*stopped)[0].finish_reason, FinishReason::kStop);
  EXPECT_LE((*stopped)[0].tokens.size(), 3u);
}

// A request that has waited longer than max_queue_time_ms before its first step is refused
// as overload; one that has started is never cut by it.
TEST_F(EngineCoreTest, QueueTimeLimitRefusesOnlyRequestsThatNeverStarted) {
  EngineCoreOptions o;
  o.batching.max_num_seqs = 1;
  o.batching.max_num_batched_tokens = 64;
  o.batching.max_seq_len = 128;
  o.batching.max_queue_time_ms = 1000;
  auto core = EngineCore::Create("kjv", engine_, o);
  ASSERT_TRUE(core.ok());
  GenerationRequest running = Request(Prompt("And it came to pass"), 30);
  running.arrival = Clock::now() - std::chrono::seconds(5);
  (*core)->Add(1, std::move(running));
  std::vector<GenerationEvent> out;
  ASSERT_TRUE((*core)->Step(out));  // request 1 starts (one sequence at a time)
  GenerationRequest waiting = Request(Prompt("In the beginning"), 4);
  waiting.arrival = Clock::now() - std::chrono::seconds(2);
  (*core)->Add(2, std::move(waiting));
  GenerationRequest fresh = Request(Prompt("Praise ye"), 4);
  (*core)->Add(3, std::move(fresh));
  out.clear();
  (*core)->ExpireDeadlines(Clock::now(), out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].handle, 2u);
  EXPECT_EQ(out[0].error.code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(out[0].failure_reason, "queue_timeout");
  EXPECT_TRUE((*core)->Contains(1)) << "a started request is not cut by the queue limit";
  EXPECT_TRUE((*core)->Contains(3));
}

TEST_F(EngineCoreTest, KeptLogitsAreTheRowsThatChoseEachToken) {
  auto core = MakeCore(1, 256, 64);
  const int vocab = engine_->config().vocab_size;
  const std::vector<int32_t> p = Prompt("Blessed are");
  GenerationRequest r = Request(p, 3);
  r.keep_logits = true;
  auto out = GenerateAll(*core, {std::move(r)});
  ASSERT_TRUE(out.ok());
  ASSERT_EQ((*out)[0].logits.size(), static_cast<size_t>(3 * vocab));
  for (int t = 0; t < 3; ++t) {
    const std::span<const float> row((*out)[0].logits.data() + t * vocab, vocab);
    EXPECT_EQ(engine::Argmax(row), (*out)[0].tokens[t].token) << t;
  }
}

// max_step_ms: while sequences decode, a long prompt is prefilled in chunks that fit the step
// time the core learns (here each token costs an extra millisecond), not in one step of the
// whole max_num_batched_tokens; outputs do not change, and the prefill always progresses.
TEST_F(EngineCoreTest, AStepTimeTargetChunksPrefillsWhileOthersDecode) {
  struct Steps : BatcherObserver {
    std::vector<StepStats> stats;
    void OnStep(const StepStats& s) override { stats.push_back(s); }
    void OnPreemption(int) override {}
  } observer;
  const std::vector<int32_t> long_prompt = [&] {
    std::vector<int32_t> p;
    while (p.size() < 200) {
      for (int32_t id : Prompt("And the LORD spake unto Moses, saying, Speak unto the children of Israel.")) {
        p.push_back(id);
      }
    }
    p.resize(200);
    return p;
  }();
  std::vector<int32_t> alone;
  {
    auto core = MakeCore(1, 512, 256);
    auto r = GenerateAll(*core, {Request(long_prompt, 4)});
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    alone = Tokens((*r)[0]);
  }
  EngineCoreOptions o;
  o.batching.max_num_seqs = 4;
  o.batching.max_num_batched_tokens = 512;
  o.batching.max_seq_len = 256;
  o.batching.max_step_ms = 20;
  auto made = EngineCore::Create("kjv", engine_, o);
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  EngineCore& core = **made;
  core.SetObserver(&observer);
  core.SetStepFunction([&core](const std::vector<engine::SeqStep>& steps) {
    size_t tokens = 0;
    for (const engine::SeqStep& s : steps) tokens += s.tokens.size();
    std::this_thread::sleep_for(std::chrono::milliseconds(static_cast<int64_t>(tokens)));
    return core.executor().Step(steps);
  });
  std::vector<GenerationEvent> out;
  for (uint64_t h = 1; h <= 3; ++h) core.Add(h, Request(Prompt("In the beginning"), 40));
  for (int i = 0; i < 6; ++i) ASSERT_TRUE(core.Step(out));  // the three decode
  const size_t before = observer.stats.size();
  core.Add(4, Request(long_prompt, 4));
  std::vector<int32_t> got;
  for (int i = 0; i < 400 && !core.empty(); ++i) {
    out.clear();
    ASSERT_TRUE(core.Step(out));
    for (const GenerationEvent& ev : out) {
      if (ev.handle == 4) {
        for (const auto& t : ev.tokens) got.push_back(t.token);
      }
    }
  }
  ASSERT_TRUE(core.empty());
  EXPECT_EQ(got, alone);
  // The steps that prefilled the long prompt next to the decodes: more than one, each within
  // the budget, the budget below max_num_batched_tokens and never below a block per step.
  int mixed = 0;
  for (size_t i = before; i < observer.stats.size(); ++i) {
    const StepStats& s = observer.stats[i];
    EXPECT_LE(s.num_tokens, s.token_budget);
    if (s.num_tokens > s.num_seqs) {
      ++mixed;
      EXPECT_LT(s.token_budget, 512) << "step " << i;
      EXPECT_GE(s.token_budget, 3 + 16) << "step " << i;
    }
  }
  EXPECT_GE(mixed, 2) << "200 prompt tokens at ~1 ms each do not fit one 20-ms step";
}

// Asynchronous scheduling (async_scheduling: on; the CPU runs each launch at once, so these
// check the scheduling itself): the tokens and finish reasons of synchronous steps, tokens
// taken from the previous launch, rows of finished or cancelled sequences dropped, requests
// that need the host run synchronously, every block freed.
// Chunked prefills (a budget of 8 tokens), decodes sharing steps, greedy and seeded rows,
// different lengths, and a stop id that ends a request on a token whose next row was
// already launched.
TEST_F(EngineCoreTest, AsyncStepsGiveTheTokensOfSynchronousSteps) {
  auto probe = MakeCore(1, 64, 128, 0, AsyncScheduling::kOff);
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
TEST_F(EngineCoreTest, AsyncTheNextStepIsLaunchedBeforeThePreviousIsCollected) {
  auto core = MakeCore(2, 64, 128, 0, AsyncScheduling::kOn);
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
TEST_F(EngineCoreTest, AsyncACancelWithARowInFlightDropsTheRow) {
  auto reference = MakeCore(2, 64, 128, 0, AsyncScheduling::kOff);
  auto want = GenerateAll(*reference, {Request(Prompt("For God so loved the world,"), 10, 0.8f, 3)});
  ASSERT_TRUE(want.ok());
  auto core = MakeCore(2, 64, 128, 0, AsyncScheduling::kOn);
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
TEST_F(EngineCoreTest, AsyncRequestsThatNeedTheHostRunSynchronously) {
  auto requests = [&] {
    std::vector<GenerationRequest> r;
    r.push_back(Request(Prompt("And God said,"), 16, 1.0f, 1234));
    GenerationRequest echo = Request(Prompt("In the beginning"), 6, 0.7f, 5);
    echo.prompt_logprobs = true;
    echo.logprobs = 1;
    r.push_back(std::move(echo));
    GenerationRequest penalty = Request(Prompt("Praise ye the LORD."), 4, 0.0f);
    penalty.sampling.repetition_penalty = 1.3f;
    r.push_back(std::move(penalty));
    return r;
  };
  ExpectSameAsSync(requests, 4, 64, 128);

  auto core = MakeCore(4, 64, 128, 0, AsyncScheduling::kOn);
  GenerationRequest penalty = Request(Prompt("In the beginning"), 3);
  penalty.sampling.frequency_penalty = 0.5f;
  core->Add(1, Request(Prompt("And God said,"), 12));
  std::vector<GenerationEvent> out;
  ASSERT_TRUE(core->Step(out));
  EXPECT_EQ(core->in_flight(), 1);
  core->Add(2, std::move(penalty));
  while (core->Contains(2)) {
    ASSERT_TRUE(core->Step(out));
    EXPECT_EQ(core->in_flight(), 0) << "a step launched while a request needs the host";
  }
  ASSERT_TRUE(core->Step(out));
  EXPECT_EQ(core->in_flight(), 1) << "asynchronous again once it has gone";
}

// Log-probabilities of the drawn tokens come back with them: such requests stay
// asynchronous, with the values of synchronous steps.
TEST_F(EngineCoreTest, AsyncLogprobsComeWithTheDraws) {
  auto requests = [&] {
    std::vector<GenerationRequest> r;
    GenerationRequest a = Request(Prompt("In the beginning"), 8, 0.7f, 5);
    a.logprobs = 3;
    r.push_back(std::move(a));
    r.push_back(Request(Prompt("And God said,"), 10, 1.0f, 1234));
    GenerationRequest b = Request(Prompt("Praise ye the LORD."), 5);
    b.logprobs = 0;
    r.push_back(std::move(b));
    return r;
  };
  auto sync = MakeCore(4, 64, 128, 0, AsyncScheduling::kOff);
  auto async = MakeCore(4, 64, 128, 0, AsyncScheduling::kOn);
  auto want = GenerateAll(*sync, requests());
  ASSERT_TRUE(want.ok());
  std::vector<GenerationRequest> reqs = requests();
  for (size_t i = 0; i < reqs.size(); ++i) async->Add(i + 1, std::move(reqs[i]));
  std::vector<GenerationEvent> out;
  int launched_steps = 0;
  while (!async->empty()) {
    ASSERT_TRUE(async->Step(out));
    launched_steps += async->in_flight();
  }
  EXPECT_GT(launched_steps, 5) << "steps were launched asynchronously";
  for (size_t i = 0; i < want->size(); ++i) {
    std::vector<TokenOutput> got;
    for (GenerationEvent& ev : out) {
      if (ev.handle == i + 1) got.insert(got.end(), ev.tokens.begin(), ev.tokens.end());
    }
    const std::vector<TokenOutput>& w = (*want)[i].tokens;
    ASSERT_EQ(got.size(), w.size()) << i;
    for (size_t t = 0; t < w.size(); ++t) {
      EXPECT_EQ(got[t].token, w[t].token);
      EXPECT_EQ(got[t].logprob, w[t].logprob);
      ASSERT_EQ(got[t].top_logprobs.size(), w[t].top_logprobs.size());
      for (size_t k = 0; k < w[t].top_logprobs.size(); ++k) {
        EXPECT_EQ(got[t].top_logprobs[k].first, w[t].top_logprobs[k].first);
        EXPECT_EQ(got[t].top_logprobs[k].second, w[t].top_logprobs[k].second);
      }
    }
  }
  EXPECT_EQ((*want)[0].tokens[0].top_logprobs.size(), 3u);
}

// Shared prefixes found in the cache, and a KV cache too small for the batch (preemption):
// the same tokens as synchronous steps.
TEST_F(EngineCoreTest, AsyncPrefixCachingAndPreemptionKeepTheTokens) {
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
TEST_F(EngineCoreTest, AsyncExecutorLaunchesTakeThePreviousDraw) {
  auto core = MakeCore(2, 64, 128, 0, AsyncScheduling::kOff);
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
  known.keep_logits = true;
  EXPECT_EQ(ex.Launch({known}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ex.launched(), 0);
  EXPECT_EQ(ex.Collect().status().code(), StatusCode::kFailedPrecondition);
  cache.Free(1);
  cache.Free(2);
}

}  // namespace
}  // namespace ferry::sched
