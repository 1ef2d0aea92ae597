#include "sched/continuous_batcher.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <condition_variable>
#include <future>
#include <mutex>
#include <thread>

#include "core/thread_pool.h"
#include "engine/engine.h"
#include "decoder_test_util.h"
#include "test_util.h"

namespace ferry::sched {
namespace {

using namespace std::chrono_literals;

constexpr auto kWait = 60s;

// Collects one request's events; Wait() blocks (bounded) until the final one.
struct Collector {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<int32_t> tokens;
  std::vector<TokenOutput> outputs;
  std::vector<TokenOutput> prompt;
  bool finished = false;
  FinishReason reason = FinishReason::kNone;
  Status error;
  std::string failure;
  int events = 0;
  int stop_after = 0;  // >0: ask the batcher to stop after this many tokens

  std::function<EventAction(GenerationEvent&)> Handler() {
    return [this](const GenerationEvent& ev) {
      std::lock_guard<std::mutex> lock(mu);
      ++events;
      for (const TokenOutput& t : ev.tokens) {
        tokens.push_back(t.token);
        outputs.push_back(t);
      }
      if (!ev.prompt_tokens.empty()) prompt = ev.prompt_tokens;
      if (ev.finished) {
        finished = true;
        reason = ev.finish_reason;
        error = ev.error;
        failure = ev.failure_reason;
      }
      cv.notify_all();
      const bool stop = stop_after > 0 && static_cast<int>(tokens.size()) >= stop_after;
      return stop ? EventAction::kStop : EventAction::kContinue;
    };
  }
  bool Wait() {
    std::unique_lock<std::mutex> lock(mu);
    return cv.wait_for(lock, kWait, [this] { return finished; });
  }
  bool WaitTokens(size_t n) {
    std::unique_lock<std::mutex> lock(mu);
    return cv.wait_for(lock, kWait, [&] { return finished || tokens.size() >= n; });
  }
};

class ContinuousBatcherTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto e = engine::Engine::Load(testing::SourcePath("models/demo/kjv-decoder"), engine::EngineOptions{2, true});
    ASSERT_TRUE(e.ok()) << e.status().ToString();
    engine_ = e.value();
  }
  static void TearDownTestSuite() { engine_.reset(); }

  // The model's engine core, with a KV cache of `kv_seqs` sequences of `max_seq_len` tokens;
  // made by MakeBatcher, which knows the batching limits.
  struct Runner {
    int kv_seqs = 0;
    int max_seq_len = 0;
    std::unique_ptr<EngineCore> core;
    engine::StepExecutor& executor() { return core->executor(); }
    engine::KvCache& cache() { return core->cache(); }
  };
  std::unique_ptr<Runner> MakeRunner(int kv_seqs, int max_seq_len) {
    auto r = std::make_unique<Runner>();
    r->kv_seqs = kv_seqs;
    r->max_seq_len = max_seq_len;
    return r;
  }

  // A batcher over a new core for `runner`.
  std::unique_ptr<ContinuousBatcher> MakeBatcher(Runner& runner, int max_num_seqs, int budget,
                                                 int max_queue_requests = 256) {
    EngineCoreOptions o;
    o.batching.max_num_seqs = max_num_seqs;
    o.batching.max_num_batched_tokens = budget;
    o.batching.max_queue_requests = max_queue_requests;
    o.batching.max_seq_len = runner.max_seq_len;
    o.batching.kv_block_tokens = 16;
    o.kv_seqs = runner.kv_seqs;
    auto core = EngineCore::Create("kjv", engine_, o);
    EXPECT_TRUE(core.ok()) << core.status().ToString();
    runner.core = std::move(core).value();
    return std::make_unique<ContinuousBatcher>(*runner.core);
  }

  std::vector<std::vector<int32_t>> Prompts(int n) {
    const char* texts[] = {"And the LORD said unto Moses,", "In the beginning",
                           "Blessed are the poor in spirit: for theirs is the kingdom of heaven.",
                           "The LORD is my shepherd; I shall not want. He maketh me to lie down",
                           "And it came to pass", "For God so loved the world,", "Praise ye the LORD.",
                           "Now the serpent was more subtil than any beast of the field"};
    std::vector<std::vector<int32_t>> out;
    for (int i = 0; i < n; ++i) {
      auto ids = engine_->EncodePrompt(texts[i % 8]);
      EXPECT_TRUE(ids.ok());
      std::vector<int32_t> p = ids.value();
      for (int k = 0; k < i / 8; ++k) p.push_back(static_cast<int32_t>(100 + i + k));  // distinct variants
      out.push_back(p);
    }
    return out;
  }

  // Greedy reference: each prompt generated alone.
  std::vector<std::vector<int32_t>> Sequential(const std::vector<std::vector<int32_t>>& prompts, int max_tokens) {
    auto h = testing::DecoderHarness::Create(engine_, 1, 256);
    std::vector<std::vector<int32_t>> out;
    for (const auto& p : prompts) {
      auto r = h->Greedy(p, max_tokens, engine_->StopIds());
      EXPECT_TRUE(r.ok()) << r.status().ToString();
      out.push_back(r.value());
    }
    return out;
  }

  GenerationRequest Greedy(const std::vector<int32_t>& prompt, int max_tokens, Collector& c) {
    GenerationRequest r;
    r.prompt = prompt;
    r.sampling.temperature = 0;
    r.max_tokens = max_tokens;
    r.stop_ids = engine_->StopIds();
    r.on_event = c.Handler();
    return r;
  }

  // Submits every prompt at once and checks each greedy output against `expected`.
  void ExpectGreedyOutputs(ContinuousBatcher& b, const std::vector<std::vector<int32_t>>& prompts, int max_tokens,
                           const std::vector<std::vector<int32_t>>& expected) {
    std::vector<Collector> cs(prompts.size());
    for (size_t i = 0; i < prompts.size(); ++i) ASSERT_TRUE(b.Submit(Greedy(prompts[i], max_tokens, cs[i])).ok());
    for (size_t i = 0; i < prompts.size(); ++i) {
      ASSERT_TRUE(cs[i].Wait());
      EXPECT_TRUE(cs[i].error.ok()) << cs[i].error.ToString();
      EXPECT_EQ(cs[i].tokens, expected[i]) << "prompt " << i;
    }
  }

  static std::shared_ptr<engine::Engine> engine_;
};

std::shared_ptr<engine::Engine> ContinuousBatcherTest::engine_;

TEST_F(ContinuousBatcherTest, ConcurrentGreedyEqualsSequentialWithChunkedPrefill) {
  const auto prompts = Prompts(12);
  const auto expected = Sequential(prompts, 24);
  auto runner = MakeRunner(8, 256);
  auto batcher = MakeBatcher(*runner, 8, 16);
  ContinuousBatcher& b = *batcher;
  ASSERT_TRUE(b.Start().ok());
  ExpectGreedyOutputs(b, prompts, 24, expected);
  b.Stop(1s);
  EXPECT_EQ(runner->cache().num_free_blocks(), runner->cache().num_blocks());
}

TEST_F(ContinuousBatcherTest, PreemptionByRecomputeKeepsOutputsExact) {
  const auto prompts = Prompts(6);
  const auto expected = Sequential(prompts, 40);
  // KV for 2 sequences of 64 tokens (8 blocks) but 4 running: decodes run out of blocks.
  auto runner = MakeRunner(2, 64);
  auto batcher = MakeBatcher(*runner, 4, 64);
  ContinuousBatcher& b = *batcher;
  ASSERT_TRUE(b.Start().ok());
  ExpectGreedyOutputs(b, prompts, 40, expected);
  EXPECT_GT(b.Snapshot().preemptions, 0u);
  b.Stop(1s);
  EXPECT_EQ(runner->cache().num_free_blocks(), runner->cache().num_blocks());
}

TEST_F(ContinuousBatcherTest, CancelFreesKvBlocksMidGeneration) {
  auto runner = MakeRunner(4, 256);
  auto batcher = MakeBatcher(*runner, 4, 64);
  ContinuousBatcher& b = *batcher;
  // The fourth step waits until the test has cancelled, so the request is mid-generation.
  std::promise<void> release;
  std::shared_future<void> gate = release.get_future().share();
  int steps = 0;
  b.SetStepFunction([&, gate](const std::vector<engine::SeqStep>& s) {
    if (++steps == 4) gate.wait_for(kWait);
    return runner->executor().Step(s);
  });
  ASSERT_TRUE(b.Start().ok());
  Collector c;
  GenerationRequest r = Greedy(Prompts(1)[0], 200, c);
  r.ignore_eos = true;
  auto h = b.Submit(std::move(r));
  ASSERT_TRUE(h.ok());
  ASSERT_TRUE(c.WaitTokens(3));
  EXPECT_LT(b.Snapshot().kv_free_blocks, runner->cache().num_blocks());
  EXPECT_TRUE(b.Cancel(h.value()));
  release.set_value();
  ASSERT_TRUE(c.Wait());
  EXPECT_EQ(c.reason, FinishReason::kAbort);
  EXPECT_LT(c.tokens.size(), 200u);
  b.Stop(1s);  // joins the loop: every effect of the cancellation is visible
  EXPECT_EQ(runner->cache().num_free_blocks(), runner->cache().num_blocks());
  EXPECT_FALSE(b.Cancel(h.value()));
}

TEST_F(ContinuousBatcherTest, CancelWhileQueued) {
  auto runner = MakeRunner(1, 256);
  auto batcher = MakeBatcher(*runner, 1, 64);
  ContinuousBatcher& b = *batcher;
  std::promise<void> release;
  std::shared_future<void> gate = release.get_future().share();
  b.SetStepFunction([&, gate](const std::vector<engine::SeqStep>& s) {
    gate.wait_for(kWait);
    return runner->executor().Step(s);
  });
  ASSERT_TRUE(b.Start().ok());
  Collector first, second;
  ASSERT_TRUE(b.Submit(Greedy(Prompts(1)[0], 4, first)).ok());
  auto h2 = b.Submit(Greedy(Prompts(2)[1], 4, second));
  ASSERT_TRUE(h2.ok());
  EXPECT_TRUE(b.Cancel(h2.value()));
  release.set_value();
  ASSERT_TRUE(second.Wait());
  EXPECT_EQ(second.reason, FinishReason::kAbort);
  EXPECT_TRUE(second.tokens.empty());
  ASSERT_TRUE(first.Wait());
  EXPECT_EQ(first.tokens.size(), 4u);
  b.Stop(1s);
}

// What a QoS switch does with requests still waiting: only movable ones that have never been
// scheduled leave, with their handlers, and finish on the other batcher exactly as there.
TEST_F(ContinuousBatcherTest, WaitingRequestsMoveToAnotherBatcherAndFinishThere) {
  auto r1 = MakeRunner(1, 256);
  auto b1 = MakeBatcher(*r1, 1, 64);
  auto r2 = MakeRunner(2, 256);
  auto b2 = MakeBatcher(*r2, 2, 64);
  b1->SetStepFunction([&](const std::vector<engine::SeqStep>& s) {
    std::this_thread::sleep_for(5ms);  // keeps the first request running while the others wait
    return r1->executor().Step(s);
  });
  ASSERT_TRUE(b1->Start().ok());
  ASSERT_TRUE(b2->Start().ok());
  const auto prompts = Prompts(3);
  const auto expected = Sequential(prompts, 6);
  Collector a, b, c;
  GenerationRequest ra = Greedy(prompts[0], 64, a);
  ra.movable = true;
  ASSERT_TRUE(b1->Submit(std::move(ra)).ok());
  ASSERT_TRUE(a.WaitTokens(1));  // running: it stays
  GenerationRequest rb = Greedy(prompts[1], 6, b);
  rb.movable = true;
  ASSERT_TRUE(b1->Submit(std::move(rb)).ok());
  ASSERT_TRUE(b1->Submit(Greedy(prompts[2], 6, c)).ok());  // not movable: it stays
  std::vector<GenerationRequest> taken = b1->TakeWaiting([](const GenerationRequest&) { return true; }, kWait);
  ASSERT_EQ(taken.size(), 1u);
  EXPECT_EQ(taken[0].prompt, prompts[1]);
  ASSERT_TRUE(taken[0].on_event != nullptr);
  auto moved = b2->SubmitMoved(taken[0]);
  ASSERT_TRUE(moved.ok()) << moved.status().ToString();
  ASSERT_TRUE(b.Wait());
  EXPECT_TRUE(b.error.ok()) << b.error.ToString();
  EXPECT_EQ(b.tokens, expected[1]);
  ASSERT_TRUE(c.Wait());
  EXPECT_EQ(c.tokens, expected[2]);
  ASSERT_TRUE(a.Wait());
  EXPECT_TRUE(a.error.ok());
  EXPECT_EQ(std::vector<int32_t>(a.tokens.begin(), a.tokens.begin() + std::min<size_t>(6, a.tokens.size())),
            std::vector<int32_t>(expected[0].begin(), expected[0].begin() + std::min<size_t>(6, a.tokens.size())));
  // A stopped batcher hands nothing over.
  b1->Stop(1s);
  EXPECT_TRUE(b1->TakeWaiting([](const GenerationRequest&) { return true; }, 1s).empty());
  b2->Stop(1s);
}

TEST_F(ContinuousBatcherTest, FullQueueIsRejectedAndValidationErrorsAreClear) {
  auto runner = MakeRunner(1, 128);
  auto batcher = MakeBatcher(*runner, 1, 64, 2);
  ContinuousBatcher& b = *batcher;
  std::promise<void> release;
  std::shared_future<void> gate = release.get_future().share();
  b.SetStepFunction([&, gate](const std::vector<engine::SeqStep>& s) {
    gate.wait_for(kWait);
    return runner->executor().Step(s);
  });
  ASSERT_TRUE(b.Start().ok());
  const auto p = Prompts(1)[0];
  std::vector<Collector> cs(3);
  ASSERT_TRUE(b.Submit(Greedy(p, 2, cs[0])).ok());
  ASSERT_TRUE(b.Submit(Greedy(p, 2, cs[1])).ok());
  // Two waiting (or one running and one waiting, depending on timing); one of the next two
  // submissions must be refused with the queue at 2.
  Collector extra;
  Result<uint64_t> third = b.Submit(Greedy(p, 2, cs[2]));
  Result<uint64_t> fourth = b.Submit(Greedy(p, 2, extra));
  const bool refused = (!third.ok() && third.status().code() == StatusCode::kResourceExhausted) ||
                       (!fourth.ok() && fourth.status().code() == StatusCode::kResourceExhausted);
  EXPECT_TRUE(refused);

  Collector bad;
  auto too_long = b.Submit(Greedy(std::vector<int32_t>(120, 5), 20, bad));
  EXPECT_EQ(too_long.status().code(), StatusCode::kOutOfRange);
  auto bad_id = b.Submit(Greedy({1, 2, 999999}, 2, bad));
  EXPECT_EQ(bad_id.status().code(), StatusCode::kInvalidArgument);
  auto empty = b.Submit(Greedy({}, 2, bad));
  EXPECT_EQ(empty.status().code(), StatusCode::kInvalidArgument);
  GenerationRequest neg = Greedy(p, 2, bad);
  neg.sampling.temperature = -1;
  EXPECT_EQ(b.Submit(std::move(neg)).status().code(), StatusCode::kInvalidArgument);
  release.set_value();
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(cs[i].Wait());
  b.Stop(5s);
  EXPECT_EQ(b.Submit(Greedy(p, 2, bad)).status().code(), StatusCode::kUnavailable);
}

// A step that fails whenever a poisoned token is in the batch: only that request fails.
TEST_F(ContinuousBatcherTest, FailingBatchIsRetriedRequestByRequest) {
  const auto prompts = Prompts(4);
  const auto expected = Sequential(prompts, 8);
  auto runner = MakeRunner(5, 128);
  auto batcher = MakeBatcher(*runner, 5, 128);
  ContinuousBatcher& b = *batcher;
  constexpr int32_t kPoison = 4001;
  std::atomic<int> failures{0};
  b.SetStepFunction([&](const std::vector<engine::SeqStep>& steps) -> Result<std::vector<engine::SeqResult>> {
    for (const auto& s : steps) {
      for (int32_t t : s.tokens) {
        if (t == kPoison) {
          ++failures;
          return Internal("poisoned input");
        }
      }
    }
    return runner->executor().Step(steps);
  });
  ASSERT_TRUE(b.Start().ok());
  std::vector<Collector> cs(prompts.size());
  Collector poisoned;
  std::vector<int32_t> bad = prompts[0];
  bad.push_back(kPoison);
  ASSERT_TRUE(b.Submit(Greedy(bad, 8, poisoned)).ok());
  for (size_t i = 0; i < prompts.size(); ++i) ASSERT_TRUE(b.Submit(Greedy(prompts[i], 8, cs[i])).ok());
  ASSERT_TRUE(poisoned.Wait());
  EXPECT_FALSE(poisoned.error.ok());
  EXPECT_EQ(poisoned.failure, "engine_error");
  for (size_t i = 0; i < prompts.size(); ++i) {
    ASSERT_TRUE(cs[i].Wait());
    EXPECT_TRUE(cs[i].error.ok()) << cs[i].error.ToString();
    EXPECT_EQ(cs[i].tokens, expected[i]);
  }
  EXPECT_GE(failures.load(), 1);
  b.Stop(1s);
  EXPECT_EQ(runner->cache().num_free_blocks(), runner->cache().num_blocks());
}

TEST_F(ContinuousBatcherTest, NonFiniteLogitsFailOnlyThatRequest) {
  const auto prompts = Prompts(3);
  const auto expected = Sequential(prompts, 6);
  auto runner = MakeRunner(4, 128);
  auto batcher = MakeBatcher(*runner, 4, 128);
  ContinuousBatcher& b = *batcher;
  constexpr int32_t kPoison = 4002;
  const int V = engine_->config().vocab_size;
  b.SetStepFunction([&](const std::vector<engine::SeqStep>& steps) -> Result<std::vector<engine::SeqResult>> {
    auto r = runner->executor().Logits(steps);
    if (!r.ok()) return r.status();
    Tensor t = std::move(r).value();
    int64_t row = 0;
    for (const auto& s : steps) {
      const int64_t rows = s.targets.empty() ? 1 : static_cast<int64_t>(s.tokens.size());
      if (std::find(s.tokens.begin(), s.tokens.end(), kPoison) != s.tokens.end()) {
        t.data<float>()[(row + rows - 1) * V + 7] = NAN;
      }
      row += rows;
    }
    return runner->executor().SampleOnHost(t, steps);
  });
  ASSERT_TRUE(b.Start().ok());
  Collector poisoned;
  std::vector<int32_t> bad = prompts[1];
  bad.push_back(kPoison);
  std::vector<Collector> cs(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    ASSERT_TRUE(b.Submit(Greedy(prompts[i], 6, cs[i])).ok());
    if (i == 0) {
      ASSERT_TRUE(b.Submit(Greedy(bad, 6, poisoned)).ok());
    }
  }
  ASSERT_TRUE(poisoned.Wait());
  EXPECT_EQ(poisoned.failure, "nonfinite_logits");
  for (size_t i = 0; i < prompts.size(); ++i) {
    ASSERT_TRUE(cs[i].Wait());
    EXPECT_EQ(cs[i].tokens, expected[i]);
  }
  b.Stop(1s);
}

TEST_F(ContinuousBatcherTest, DeadlineAndStopStringAndLength) {
  auto runner = MakeRunner(2, 128);
  auto batcher = MakeBatcher(*runner, 2, 64);
  ContinuousBatcher& b = *batcher;
  ASSERT_TRUE(b.Start().ok());
  const auto p = Prompts(1)[0];
  Collector late;
  GenerationRequest r = Greedy(p, 10, late);
  r.deadline = Clock::now() - 1ms;
  ASSERT_TRUE(b.Submit(std::move(r)).ok());
  ASSERT_TRUE(late.Wait());
  EXPECT_EQ(late.error.code(), StatusCode::kDeadlineExceeded);
  EXPECT_EQ(late.failure, "timeout");

  Collector stopper;
  stopper.stop_after = 3;
  GenerationRequest s = Greedy(p, 50, stopper);
  s.ignore_eos = true;
  ASSERT_TRUE(b.Submit(std::move(s)).ok());
  ASSERT_TRUE(stopper.Wait());
  EXPECT_EQ(stopper.reason, FinishReason::kStop);
  EXPECT_EQ(stopper.tokens.size(), 3u);

  Collector len;
  GenerationRequest l = Greedy(p, 5, len);
  l.ignore_eos = true;
  ASSERT_TRUE(b.Submit(std::move(l)).ok());
  ASSERT_TRUE(len.Wait());
  EXPECT_EQ(len.reason, FinishReason::kLength);
  EXPECT_EQ(len.tokens.size(), 5u);
  b.Stop(1s);
}

TEST_F(ContinuousBatcherTest, PromptLogprobsAcrossChunksMatchOneFullPass) {
  const auto p = Prompts(3)[2];
  ASSERT_GT(p.size(), 8u);
  // Reference: one step with every row's logits.
  auto ref_runner = testing::DecoderHarness::Create(engine_, 1, 128);
  auto ref = ref_runner->Step({{1, p, 0, true}});
  ASSERT_TRUE(ref.ok());
  ref_runner->cache().Free(1);
  const int V = engine_->config().vocab_size;

  auto runner = MakeRunner(2, 128);
  auto batcher = MakeBatcher(*runner, 2, 5);
  ContinuousBatcher& b = *batcher;
  ASSERT_TRUE(b.Start().ok());
  Collector c;
  GenerationRequest r = Greedy(p, 3, c);
  r.prompt_logprobs = true;
  r.logprobs = 2;
  ASSERT_TRUE(b.Submit(std::move(r)).ok());
  ASSERT_TRUE(c.Wait());
  ASSERT_EQ(c.prompt.size(), p.size());
  std::vector<float> lp;
  for (size_t q = 1; q < p.size(); ++q) {
    engine::Sampler::LogSoftmax(std::span<const float>(ref.value().data<float>() + (q - 1) * V, V), lp);
    EXPECT_EQ(c.prompt[q].token, p[q]);
    EXPECT_NEAR(c.prompt[q].logprob, lp[p[q]], 1e-3) << q;
    ASSERT_EQ(c.prompt[q].top_logprobs.size(), 2u);
  }
  ASSERT_EQ(c.outputs.size(), 3u);
  EXPECT_LE(c.outputs[0].logprob, 0.0f);
  EXPECT_EQ(c.outputs[0].top_logprobs[0].first, c.outputs[0].token);  // greedy picks the top one
  b.Stop(1s);
}

TEST_F(ContinuousBatcherTest, StopFinishesInFlightWork) {
  auto runner = MakeRunner(4, 128);
  auto batcher = MakeBatcher(*runner, 4, 64);
  ContinuousBatcher& b = *batcher;
  ASSERT_TRUE(b.Start().ok());
  std::vector<Collector> cs(3);
  for (int i = 0; i < 3; ++i) {
    GenerationRequest r = Greedy(Prompts(3)[i], 12, cs[i]);
    r.ignore_eos = true;
    ASSERT_TRUE(b.Submit(std::move(r)).ok());
  }
  b.Stop(30s);
  for (auto& c : cs) {
    ASSERT_TRUE(c.Wait());
    EXPECT_EQ(c.reason, FinishReason::kLength);
    EXPECT_EQ(c.tokens.size(), 12u);
  }
}

// One sequence at a time, a 400 ms queue-time limit.
EngineCoreOptions OneAtATimeWithQueueLimit() {
  EngineCoreOptions o;
  o.batching.max_num_seqs = 1;
  o.batching.max_num_batched_tokens = 64;
  o.batching.max_seq_len = 256;
  o.batching.max_queue_time_ms = 400;
  return o;
}

// Each step takes at least 3 ms, so that one request (30 tokens) takes 90 ms or more
// whatever the machine: arrivals every 20 ms are then several times what it can serve.
void SlowSteps(ContinuousBatcher& b, EngineCore& core) {
  b.SetStepFunction([&core](const std::vector<engine::SeqStep>& s) {
    std::this_thread::sleep_for(std::chrono::milliseconds(3));
    return core.executor().Step(s);
  });
}

// Overload: with one sequence at a time and long generations, requests queue up. Those
// that would wait longer than max_queue_time_ms are refused at Submit once the admission
// rate is known, or when their wait runs out; every request admitted runs to completion, and
// none starts after waiting much longer than the limit.
TEST_F(ContinuousBatcherTest, QueueTimeLimitAndEstimatedWaitShedLoad) {
  auto core = EngineCore::Create("kjv", engine_, OneAtATimeWithQueueLimit());
  ASSERT_TRUE(core.ok());
  ContinuousBatcher b(**core);
  SlowSteps(b, **core);
  ASSERT_TRUE(b.Start().ok());
  const auto p = Prompts(1)[0];
  std::vector<Collector> cs(40);
  int refused_at_submit = 0;
  std::vector<Clock::time_point> submitted(cs.size());
  for (size_t i = 0; i < cs.size(); ++i) {
    GenerationRequest r = Greedy(p, 30, cs[i]);
    r.ignore_eos = true;
    submitted[i] = Clock::now();
    auto h = b.Submit(std::move(r));
    if (!h.ok()) {
      EXPECT_EQ(h.status().code(), StatusCode::kResourceExhausted) << h.status().ToString();
      ++refused_at_submit;
      cs[i].finished = true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  int completed = 0, timed_out = 0;
  for (auto& c : cs) {
    ASSERT_TRUE(c.Wait());
    if (c.error.ok() && c.tokens.size() == 30u) ++completed;
    if (c.failure == "queue_timeout") {
      ++timed_out;
      EXPECT_EQ(c.error.code(), StatusCode::kResourceExhausted);
      EXPECT_TRUE(c.tokens.empty());
    }
  }
  EXPECT_GT(completed, 0);
  EXPECT_GT(refused_at_submit + timed_out, 0) << "load was shed";
  RecordProperty("completed", completed);
  RecordProperty("refused_at_submit", refused_at_submit);
  RecordProperty("timed_out", timed_out);
  EXPECT_EQ(completed + refused_at_submit + timed_out, static_cast<int>(cs.size()));
  b.Stop(std::chrono::seconds(5));
}

// Admission by estimated wait counts only the requests that run first: once a backlog of
// low-priority requests refuses the next one, a high-priority request (which the scheduler
// runs ahead of that backlog) is still admitted, and finishes.
//
// The high-priority request still waits for the low one that is running. That one is
// short (10 steps) and the queue-time limit long (3 s), so the wait stays far inside the
// limit under a sanitizer's slowdown with another test beside it: ThreadSanitizer's slower
// steps made it time out now and then with 30-step requests and 400 ms, and once in CI
// with 2 s. The backlog that refuses a low request then needs more arrivals (about 120 at
// 3 ms steps), hence 200 collectors.
TEST_F(ContinuousBatcherTest, EstimatedWaitCountsOnlyTheRequestsThatRunFirst) {
  EngineCoreOptions options = OneAtATimeWithQueueLimit();
  options.batching.max_queue_time_ms = 3000;
  auto core = EngineCore::Create("kjv", engine_, options);
  ASSERT_TRUE(core.ok());
  ContinuousBatcher b(**core);
  SlowSteps(b, **core);
  ASSERT_TRUE(b.Start().ok());
  const auto p = Prompts(1)[0];
  std::vector<Collector> low(200);
  bool refused = false;
  size_t submitted = 0;
  for (; submitted < low.size() && !refused; ++submitted) {
    GenerationRequest r = Greedy(p, 10, low[submitted]);
    r.ignore_eos = true;
    r.priority = 2;
    auto h = b.Submit(std::move(r));
    if (!h.ok()) {
      EXPECT_EQ(h.status().code(), StatusCode::kResourceExhausted) << h.status().ToString();
      if (h.status().message().find("would hold this request") != std::string::npos) refused = true;
      low[submitted].finished = true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_TRUE(refused) << "the low-priority backlog never refused a request";
  Collector high;
  GenerationRequest r = Greedy(p, 4, high);
  r.ignore_eos = true;
  r.priority = 1;
  auto h = b.Submit(std::move(r));
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  ASSERT_TRUE(high.Wait());
  EXPECT_TRUE(high.error.ok()) << high.error.ToString();
  EXPECT_EQ(high.tokens.size(), 4u);
  for (size_t i = submitted; i < low.size(); ++i) low[i].finished = true;
  b.Stop(std::chrono::seconds(0));
  for (auto& c : low) ASSERT_TRUE(c.Wait());
}

}  // namespace
}  // namespace ferry::sched

namespace ferry::sched {
namespace {

// What a load monitor sees of each request: one report per event, timed on the loop.
class ProgressRecorder : public BatcherObserver {
 public:
  struct Seen {
    std::string tier;
    std::optional<double> queue, ttft;
    double gap = 0;
    int tokens = 0;
    bool finished = false;
    std::string failure;
    int prompt_tokens = 0, generated = 0;
  };
  void OnStep(const StepStats&) override {}
  void OnPreemption(int) override {}
  bool wants_requests() const override { return true; }
  void OnRequest(const RequestProgress& p) override {
    std::lock_guard<std::mutex> lock(mu);
    seen.push_back(Seen{std::string(p.tier), p.queue_seconds, p.ttft_seconds, p.token_gap_seconds, p.new_tokens,
                        p.finished, std::string(p.failure_reason), p.prompt_tokens, p.generated_tokens});
  }
  std::mutex mu;
  std::vector<Seen> seen;
};

TEST_F(ContinuousBatcherTest, ReportsEachRequestsQueueWaitFirstTokenGapsAndOutcome) {
  auto runner = MakeRunner(4, 256);
  EngineCoreOptions o;
  o.batching.max_num_seqs = 4;
  o.batching.max_num_batched_tokens = 64;
  o.batching.max_seq_len = 256;
  o.kv_seqs = 4;
  auto core = EngineCore::Create("kjv", engine_, o);
  ASSERT_TRUE(core.ok());
  runner->core = std::move(core).value();
  ProgressRecorder rec;
  ContinuousBatcher b(*runner->core, &rec);
  // The third request's steps fail: it ends with an engine error.
  int calls = 0;
  b.SetStepFunction([&](const std::vector<engine::SeqStep>& s) -> Result<std::vector<engine::SeqResult>> {
    ++calls;
    for (const engine::SeqStep& st : s) {
      if (st.tokens.size() == 3) return Internal("injected");
    }
    return runner->executor().Step(s);
  });
  ASSERT_TRUE(b.Start().ok());
  const auto prompts = Prompts(2);
  Collector gold, silver, broken;
  GenerationRequest g = Greedy(prompts[0], 6, gold);
  g.tier = "gold";
  g.ignore_eos = true;
  GenerationRequest s = Greedy(prompts[1], 4, silver);
  s.tier = "silver";
  s.ignore_eos = true;
  GenerationRequest x = Greedy({5, 6, 7}, 4, broken);
  x.tier = "silver";
  ASSERT_TRUE(b.Submit(std::move(g)).ok());
  ASSERT_TRUE(b.Submit(std::move(s)).ok());
  ASSERT_TRUE(b.Submit(std::move(x)).ok());
  ASSERT_TRUE(gold.Wait());
  ASSERT_TRUE(silver.Wait());
  ASSERT_TRUE(broken.Wait());
  b.Stop(1s);
  std::lock_guard<std::mutex> lock(rec.mu);
  int gold_tokens = 0, gold_ttft = 0, gold_queue = 0, finished = 0, failed = 0;
  for (const ProgressRecorder::Seen& e : rec.seen) {
    ASSERT_TRUE(e.tier == "gold" || e.tier == "silver") << e.tier;
    if (e.tier == "gold") {
      gold_tokens += e.tokens;
      gold_ttft += e.ttft.has_value();
      gold_queue += e.queue.has_value();
      if (e.ttft) {
        EXPECT_GT(*e.ttft, 0.0);
      } else if (e.tokens > 0) {
        EXPECT_GT(e.gap, 0.0);  // a later token: the time since the one before
      }
      if (e.finished) {
        EXPECT_EQ(e.generated, 6);
        EXPECT_EQ(e.prompt_tokens, static_cast<int>(prompts[0].size()));
      }
    }
    finished += e.finished;
    if (e.finished && !e.failure.empty()) {
      ++failed;
      EXPECT_EQ(e.failure, "engine_error");
    }
  }
  EXPECT_EQ(gold_tokens, 6);
  EXPECT_EQ(gold_ttft, 1);
  EXPECT_EQ(gold_queue, 1);
  EXPECT_EQ(finished, 3);
  EXPECT_EQ(failed, 1);
  EXPECT_GT(calls, 0);
}

// Polls `done` until it holds or `timeout` passes.
bool WaitUntil(const std::function<bool()>& done, std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  while (!done()) {
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(1ms);
  }
  return true;
}

// Step pacing: records when each step starts (the step function's call).
struct StepTimes {
  std::mutex mu;
  std::vector<Clock::time_point> starts;
  void Record() {
    std::lock_guard<std::mutex> lock(mu);
    starts.push_back(Clock::now());
  }
  std::vector<Clock::time_point> Get() {
    std::lock_guard<std::mutex> lock(mu);
    return starts;
  }
};

TEST_F(ContinuousBatcherTest, StepPacingSpacesTheStepsOfRunningSequences) {
  auto runner = MakeRunner(2, 128);
  auto batcher = MakeBatcher(*runner, 2, 64);
  ContinuousBatcher& b = *batcher;
  StepTimes times;
  b.SetStepFunction([&](const std::vector<engine::SeqStep>& s) {
    times.Record();
    return runner->executor().Step(s);
  });
  EXPECT_EQ(b.step_pacing(), 0us);
  b.SetStepPacing(300ms);
  EXPECT_EQ(b.step_pacing(), 300ms);
  ASSERT_TRUE(b.Start().ok());
  Collector c;
  GenerationRequest r = Greedy(Prompts(1)[0], 5, c);
  r.ignore_eos = true;
  ASSERT_TRUE(b.Submit(std::move(r)).ok());
  ASSERT_TRUE(c.Wait());
  EXPECT_EQ(c.tokens.size(), 5u);
  const std::vector<Clock::time_point> starts = times.Get();
  ASSERT_EQ(starts.size(), 5u);  // the prompt in one step, then four decode steps
  for (size_t i = 1; i < starts.size(); ++i) {
    // The loop times a step from just before it plans it; the step function is called a
    // moment later, so allow the planning's jitter (well under a millisecond).
    EXPECT_GE(starts[i] - starts[i - 1], 299ms) << "step " << i;
  }
  const BatcherSnapshot snap = b.Snapshot();
  EXPECT_EQ(snap.step_pacing_us, 300000);
  // A wait after each decode step but the last, unless a step outlasted the pace itself.
  EXPECT_GE(snap.paced_waits, 1u);
  EXPECT_LE(snap.paced_waits, 4u);
  EXPECT_GT(snap.paced_seconds, 0.0);
  b.Stop(1s);
}

// Under a core share the loop runs each step on its share of the cores: all of them while it
// is the only member with work, half while another member has work too.
TEST_F(ContinuousBatcherTest, CoreShareSetsTheComputeThreadsOfEachStep) {
  auto runner = MakeRunner(2, 128);
  auto batcher = MakeBatcher(*runner, 2, 64);
  ContinuousBatcher& b = *batcher;
  auto share = std::make_shared<CoreShare>(4);
  b.SetCoreShare(share);
  const int other = share->Join();
  std::mutex mu;
  std::vector<int> threads;  // GUARDED_BY(mu): the compute threads each step ran on
  b.SetStepFunction([&](const std::vector<engine::SeqStep>& s) {
    auto out = runner->executor().Step(s);  // the model binds the engine's threads as it starts
    std::lock_guard<std::mutex> lock(mu);
    threads.push_back(ComputeThreads());
    return out;
  });
  ASSERT_TRUE(b.Start().ok());
  const auto run = [&] {
    Collector c;
    GenerationRequest r = Greedy(Prompts(1)[0], 4, c);
    r.ignore_eos = true;
    EXPECT_TRUE(b.Submit(std::move(r)).ok());
    EXPECT_TRUE(c.Wait());
    std::lock_guard<std::mutex> lock(mu);
    std::vector<int> seen;
    seen.swap(threads);
    return seen;
  };
  EXPECT_EQ(run(), std::vector<int>(4, 4));  // alone: every core
  share->Busy(other);
  EXPECT_EQ(run(), std::vector<int>(4, 2));  // another member has work
  EXPECT_EQ(b.Snapshot().compute_threads, 2);
  share->Idle(other);
  EXPECT_EQ(run(), std::vector<int>(4, 4));
  b.Stop(1s);
  engine_->backend().SetThreads(0);  // the shared test engine back to its own count
}

// An arrival during a paced wait is stepped at once (its time to first token is not paced);
// pacing 0 then restores back-to-back steps.
TEST_F(ContinuousBatcherTest, ArrivalDuringAPacedWaitIsSteppedAtOnceAndPacingZeroEndsThePacing) {
  auto runner = MakeRunner(4, 256);
  auto batcher = MakeBatcher(*runner, 4, 64);
  ContinuousBatcher& b = *batcher;
  b.SetStepPacing(10s);
  ASSERT_TRUE(b.Start().ok());
  const auto prompts = Prompts(2);
  Collector first, second;
  GenerationRequest r1 = Greedy(prompts[0], 20, first);
  r1.ignore_eos = true;
  ASSERT_TRUE(b.Submit(std::move(r1)).ok());
  // The loop is in a 10 s wait after the first step (a wait is counted as it starts).
  ASSERT_TRUE(WaitUntil([&] { return b.Snapshot().paced_waits >= 1; }, 5s));
  {
    std::lock_guard<std::mutex> lock(first.mu);
    EXPECT_EQ(first.tokens.size(), 1u);
  }
  const auto submitted = Clock::now();
  GenerationRequest r2 = Greedy(prompts[1], 20, second);
  r2.ignore_eos = true;
  ASSERT_TRUE(b.Submit(std::move(r2)).ok());
  {
    std::unique_lock<std::mutex> lock(second.mu);
    ASSERT_TRUE(second.cv.wait_for(lock, 5s, [&] { return second.tokens.size() >= 1; }))
        << "the arrival waited for the paced interval";
  }
  EXPECT_LT(Clock::now() - submitted, 5s);
  // Both decoding now: the next wait starts.
  ASSERT_TRUE(WaitUntil([&] { return b.Snapshot().paced_waits >= 2; }, 5s));
  {
    std::lock_guard<std::mutex> lock(first.mu);
    EXPECT_EQ(first.tokens.size(), 2u);  // the arrival's step was its second
  }
  const uint64_t paced_before = b.Snapshot().paced_waits;
  EXPECT_EQ(paced_before, 2u);
  // Off: the rest runs back to back (36-odd steps that would take minutes paced), and no
  // further paced wait is made.
  b.SetStepPacing(0us);
  EXPECT_EQ(b.step_pacing(), 0us);
  {
    std::unique_lock<std::mutex> lock(first.mu);
    ASSERT_TRUE(first.cv.wait_for(lock, 5s, [&] { return first.finished; }));
  }
  {
    std::unique_lock<std::mutex> lock(second.mu);
    ASSERT_TRUE(second.cv.wait_for(lock, 5s, [&] { return second.finished; }));
  }
  EXPECT_EQ(first.tokens.size(), 20u);
  EXPECT_EQ(second.tokens.size(), 20u);
  const BatcherSnapshot snap = b.Snapshot();
  EXPECT_EQ(snap.paced_waits, paced_before);
  EXPECT_EQ(snap.step_pacing_us, 0);
  b.Stop(1s);
}

// Pacing never holds a request past its deadline, and Stop ends a paced wait at once (the
// drain then runs flat out).
TEST_F(ContinuousBatcherTest, DeadlinesAndStopEndAPacedWait) {
  auto runner = MakeRunner(2, 256);
  auto batcher = MakeBatcher(*runner, 2, 64);
  ContinuousBatcher& b = *batcher;
  b.SetStepPacing(10s);
  ASSERT_TRUE(b.Start().ok());
  const auto prompts = Prompts(2);
  Collector late;
  GenerationRequest r = Greedy(prompts[0], 100, late);
  r.ignore_eos = true;
  r.deadline = Clock::now() + 500ms;
  ASSERT_TRUE(b.Submit(std::move(r)).ok());
  {
    std::unique_lock<std::mutex> lock(late.mu);
    ASSERT_TRUE(late.cv.wait_for(lock, 5s, [&] { return late.finished; })) << "the deadline waited for the pacing";
  }
  EXPECT_EQ(late.error.code(), StatusCode::kDeadlineExceeded);
  EXPECT_EQ(late.failure, "timeout");

  Collector running;
  GenerationRequest s = Greedy(prompts[1], 30, running);
  s.ignore_eos = true;
  ASSERT_TRUE(b.Submit(std::move(s)).ok());
  {
    std::unique_lock<std::mutex> lock(running.mu);
    ASSERT_TRUE(running.cv.wait_for(lock, 5s, [&] { return running.tokens.size() >= 1; }));
  }
  auto stopped = std::async(std::launch::async, [&b] { b.Stop(30s); });
  ASSERT_EQ(stopped.wait_for(5s), std::future_status::ready) << "Stop waited for the paced interval";
  ASSERT_TRUE(running.Wait());
  EXPECT_EQ(running.reason, FinishReason::kLength);  // drained, not cut off
  EXPECT_EQ(running.tokens.size(), 30u);
}

}  // namespace
}  // namespace ferry::sched
