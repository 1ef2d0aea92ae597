// The output processor on the demo decoder's tokenizer: text from token events, stop strings
// across token boundaries with hold-back, partial UTF-8, echo with prompt log-probabilities,
// and finish reasons.
#include "serve/output_processor.h"

#include <gtest/gtest.h>

#include "engine/engine.h"
#include "test_util.h"

namespace ferry::serve {
namespace {

class OutputProcessorTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto t = engine::LoadTokenizerFor(testing::SourcePath("models/demo/kjv-decoder"));
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    tok_ = std::move(t).value();
  }
  static void TearDownTestSuite() { tok_.reset(); }

  std::vector<int32_t> Encode(const std::string& text) {
    auto e = tok_->Encode(text);
    EXPECT_TRUE(e.ok());
    return e.value();
  }

  // The text the ids decode to after a prompt (what a streaming detokenizer produces).
  std::string Continuation(const std::vector<int32_t>& ids) {
    tokenizer::IncrementalDetokenizer d(*tok_, true, false);
    std::string text;
    for (int32_t id : ids) d.Add(id, &text);
    return text + d.Flush();
  }

  static sched::GenerationEvent Tokens(const std::vector<int32_t>& ids, bool finished = false,
                                       sched::FinishReason reason = sched::FinishReason::kLength) {
    sched::GenerationEvent ev;
    for (int32_t id : ids) ev.tokens.push_back(sched::TokenOutput{id, -0.5f, {{id, -0.5f}}});
    ev.finished = finished;
    ev.finish_reason = finished ? reason : sched::FinishReason::kNone;
    return ev;
  }

  static std::unique_ptr<tokenizer::Tokenizer> tok_;
};

std::unique_ptr<tokenizer::Tokenizer> OutputProcessorTest::tok_;

TEST_F(OutputProcessorTest, StreamedDeltasAddUpToTheWholeText) {
  const std::vector<int32_t> ids = Encode("And God said, Let there be light: and there was light.");
  OutputProcessor p(tok_.get(), OutputSpec{});
  std::string streamed;
  for (size_t i = 0; i < ids.size(); ++i) {
    const bool last = i + 1 == ids.size();
    EXPECT_EQ(p.Add(Tokens({ids[i]}, last)), last);
    OutputDelta d = p.TakeDelta();
    streamed += d.text;
    EXPECT_EQ(d.token_ids, std::vector<int32_t>{ids[i]});
    EXPECT_EQ(d.finished, last);
  }
  EXPECT_EQ(streamed, p.text());
  EXPECT_EQ(p.text(), Continuation(ids));
  EXPECT_NE(p.text().find("Let there be light"), std::string::npos);
  EXPECT_EQ(p.finish_reason(), "length");
  EXPECT_EQ(p.generated_tokens(), static_cast<int64_t>(ids.size()));
}

TEST_F(OutputProcessorTest, StopStringAcrossTokensCutsTheTextAndNothingOfItIsStreamed) {
  const std::vector<int32_t> ids = Encode("And God said, Let there be light: and there was light.");
  const std::string whole = Continuation(ids);
  OutputSpec spec;
  spec.stops = {"be light", "never"};
  OutputProcessor p(tok_.get(), spec);
  std::string streamed;
  bool ended = false;
  size_t used = 0;
  for (int32_t id : ids) {
    ++used;
    ended = p.Add(Tokens({id}));
    streamed += p.TakeDelta().text;
    if (ended) break;
  }
  ASSERT_TRUE(ended);
  EXPECT_TRUE(p.stopped());
  EXPECT_LT(used, ids.size());
  EXPECT_EQ(p.finish_reason(), "stop");
  EXPECT_EQ(p.text(), whole.substr(0, whole.find("be light")));
  EXPECT_EQ(streamed, p.text()) << "the held-back part of a possible stop string was never sent";
  EXPECT_EQ(p.generated_tokens(), static_cast<int64_t>(used));
  // The engine's later events (the sequence is cancelled asynchronously) change nothing.
  EXPECT_FALSE(p.Add(Tokens({ids.back()}, true, sched::FinishReason::kAbort)));
  EXPECT_EQ(p.finish_reason(), "stop");
  EXPECT_EQ(p.generated_tokens(), static_cast<int64_t>(used));
}

TEST_F(OutputProcessorTest, EchoStartsWithThePromptAndItsLogprobs) {
  const std::vector<int32_t> prompt = Encode("In the beginning");
  OutputSpec spec;
  spec.echo = "In the beginning";
  spec.logprobs = 1;
  OutputProcessor p(tok_.get(), spec);
  const std::vector<int32_t> god = Encode("God");
  sched::GenerationEvent ev = Tokens(god, true);
  for (size_t i = 0; i < prompt.size(); ++i) {
    ev.prompt_tokens.push_back(sched::TokenOutput{prompt[i], -1.0f * static_cast<float>(i), {}});
  }
  ASSERT_TRUE(p.Add(ev));
  EXPECT_EQ(p.text(), "In the beginning" + Continuation(god));
  const auto& lp = p.logprobs();
  ASSERT_EQ(lp.size(), prompt.size() + god.size());
  EXPECT_FALSE(lp[0].logprob.has_value()) << "nothing predicts the first prompt token";
  EXPECT_FALSE(lp[0].has_top);
  EXPECT_EQ(lp[0].text_offset, 0u);
  size_t offset = 0;
  for (size_t i = 0; i < prompt.size(); ++i) {
    EXPECT_EQ(lp[i].text_offset, offset) << i;
    offset += lp[i].token.size();
  }
  EXPECT_EQ(lp[prompt.size()].text_offset, std::string("In the beginning").size());
  EXPECT_FLOAT_EQ(*lp.back().logprob, -0.5f);
  ASSERT_EQ(lp.back().top.size(), 1u);
}

TEST_F(OutputProcessorTest, FinishReasonsAbortAndErrors) {
  {
    OutputProcessor p(tok_.get(), OutputSpec{});
    EXPECT_TRUE(p.Add(Tokens(Encode(" Amen"), true, sched::FinishReason::kStop)));
    EXPECT_EQ(p.finish_reason(), "stop");
  }
  {
    OutputProcessor p(tok_.get(), OutputSpec{});
    p.Add(Tokens(Encode(" And")));
    EXPECT_TRUE(p.Add(Tokens({}, true, sched::FinishReason::kAbort)));
    EXPECT_EQ(p.finish_reason(), "abort");
  }
  {
    OutputProcessor p(tok_.get(), OutputSpec{});
    sched::GenerationEvent ev = Tokens({}, true, sched::FinishReason::kAbort);
    ev.error = Internal("boom");
    ev.failure_reason = "engine_error";
    EXPECT_TRUE(p.Add(ev));
    EXPECT_TRUE(p.finish_reason().empty());
    EXPECT_EQ(p.error().code(), StatusCode::kInternal);
    EXPECT_EQ(p.failure_reason(), "engine_error");
  }
  {
    // Token-id models have no tokenizer: ids come through, the text stays empty.
    OutputProcessor p(nullptr, OutputSpec{});
    p.Add(Tokens({5, 6, 7}, true));
    EXPECT_EQ(p.token_ids(), (std::vector<int32_t>{5, 6, 7}));
    EXPECT_TRUE(p.text().empty());
  }
}

}  // namespace
}  // namespace ferry::serve
