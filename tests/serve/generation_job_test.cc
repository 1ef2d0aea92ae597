// The conventions both generation routes share, through the server on the demo decoder:
// log-probability tables that spell the text (leading spaces, offsets, echo), the chosen
// token among the top log-probabilities, penalties, logit_bias, min_tokens and
// stop_token_ids, vLLM's priority, unknown fields ignored with a Warning or rejected, and
// OpenAI's error types.
#include "serve/generation_job.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "serve/server.h"
#include "test_client.h"
#include "test_util.h"

namespace ferry::serve {
namespace {

using json = nlohmann::json;
using testing::HttpReply;
using testing::PostJson;

std::unique_ptr<Server> Start(const std::string& api) {
  const std::string root = ferry::testing::SourcePath("");
  auto cfg = ParseServerConfig("listener: {host: 127.0.0.1, port: 0}\nauth: {mode: none}\n" + api +
                               "models:\n  - name: kjv-decoder\n    path: " + root +
                               "/models/demo/kjv-decoder\n    threads: 2\n"
                               "log: {level: warn, request_log: false}\n");
  EXPECT_TRUE(cfg.ok()) << cfg.status().ToString();
  auto s = Server::Create(*cfg);
  EXPECT_TRUE(s.ok());
  EXPECT_TRUE((*s)->Start().ok());
  EXPECT_TRUE((*s)->WaitUntilReady(120000));
  return std::move(s).value();
}

class GenerationTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { server_ = Start("").release(); }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }
  int port() const { return server_->port(); }
  json Complete(json req) {
    req["model"] = "kjv-decoder";
    HttpReply r = PostJson(port(), "/v1/completions", req);
    EXPECT_EQ(r.status, 200) << r.body;
    return r.Json();
  }
  static Server* server_;
};

Server* GenerationTest::server_ = nullptr;

// Tokens concatenate to the text, each at its offset, with their leading spaces.
void ExpectTableSpellsText(const json& choice) {
  const std::string text = choice["text"];
  const json& lp = choice["logprobs"];
  ASSERT_EQ(lp["tokens"].size(), lp["text_offset"].size());
  std::string joined;
  for (size_t i = 0; i < lp["tokens"].size(); ++i) {
    const std::string t = lp["tokens"][i];
    EXPECT_EQ(lp["text_offset"][i].get<size_t>(), joined.size()) << "token " << i;
    EXPECT_EQ(text.substr(joined.size(), t.size()), t) << "token " << i;
    joined += t;
  }
  EXPECT_EQ(joined, text);
}

TEST_F(GenerationTest, LogprobTokensSpellTheTextAtTheirOffsets) {
  const json r = Complete({{"prompt", "And the LORD said unto"}, {"max_tokens", 12}, {"temperature", 0}, {"logprobs", 3}});
  const json& c = r["choices"][0];
  ExpectTableSpellsText(c);
  // Words after the first carry their leading space, as the text does.
  bool spaced = false;
  for (const json& t : c["logprobs"]["tokens"]) spaced = spaced || t.get<std::string>().rfind(' ', 0) == 0;
  EXPECT_TRUE(spaced);
  // Greedy: the chosen token is the best of the top log-probabilities.
  for (size_t i = 0; i < c["logprobs"]["tokens"].size(); ++i) {
    const json& top = c["logprobs"]["top_logprobs"][i];
    double best = -1e30;
    for (auto& [k, v] : top.items()) best = std::max(best, v.get<double>());
    EXPECT_NEAR(c["logprobs"]["token_logprobs"][i].get<double>(), best, 1e-5);
  }
  // With echo the prompt's tokens come first and the offsets run on through the answer.
  const json e = Complete(
      {{"prompt", "And the LORD said unto"}, {"max_tokens", 6}, {"temperature", 0}, {"logprobs", 1}, {"echo", true}});
  ExpectTableSpellsText(e["choices"][0]);
  EXPECT_EQ(e["choices"][0]["text"].get<std::string>().rfind("And the LORD said unto", 0), 0u);
  EXPECT_TRUE(e["choices"][0]["logprobs"]["token_logprobs"][0].is_null());
  // A stop string cuts the text, and the table's strings with it.
  const json s = Complete({{"prompt", "And the LORD said unto"}, {"max_tokens", 20}, {"temperature", 0},
                           {"logprobs", 0}, {"stop", " the"}});
  ExpectTableSpellsText(s["choices"][0]);
}

TEST_F(GenerationTest, TheChosenTokenIsAlwaysAmongTheTopLogprobs) {
  // Sampled at a high temperature, the chosen token is often outside the top 1.
  const json r = Complete({{"prompt", "In the beginning"}, {"max_tokens", 24}, {"temperature", 2.0}, {"seed", 3},
                           {"logprobs", 1}});
  const json& lp = r["choices"][0]["logprobs"];
  int outside = 0;
  for (size_t i = 0; i < lp["tokens"].size(); ++i) {
    const json& top = lp["top_logprobs"][i];
    bool found = false;
    for (auto& [k, v] : top.items()) found = found || std::abs(v.get<double>() - lp["token_logprobs"][i].get<double>()) < 1e-6;
    EXPECT_TRUE(found) << i;
    if (top.size() == 2) ++outside;
  }
  EXPECT_GT(outside, 0) << "no sampled token was outside the top 1; the test does not test";
}

TEST_F(GenerationTest, PenaltiesBiasMinTokensAndStopTokenIds) {
  const json base = {{"prompt", "And the LORD said unto"}, {"max_tokens", 16}, {"temperature", 0},
                     {"return_token_ids", true}};
  const json plain = Complete(base);
  const std::vector<int> ids = plain["choices"][0]["token_ids"];
  // logit_bias -100 on the first greedy token: another first token.
  json biased = base;
  biased["logit_bias"] = {{std::to_string(ids[0]), -100}};
  EXPECT_NE(Complete(biased)["choices"][0]["token_ids"][0], ids[0]);
  // +100 on some token: it is chosen every time, unless penalized away.
  biased["logit_bias"] = {{"42", 100}};
  const std::vector<int> forced = Complete(biased)["choices"][0]["token_ids"];
  EXPECT_EQ(std::count(forced.begin(), forced.end(), 42), 16);
  // A frequency penalty changes the greedy output of a repetitive text.
  json penalized = base;
  penalized["frequency_penalty"] = 2.0;
  penalized["presence_penalty"] = 2.0;
  const std::vector<int> varied = Complete(penalized)["choices"][0]["token_ids"];
  std::set<int> distinct(varied.begin(), varied.end()), plain_distinct(ids.begin(), ids.end());
  EXPECT_GE(distinct.size(), plain_distinct.size());
  // stop_token_ids: generation ends at the first of them, which adds no text.
  json stop = base;
  stop["stop_token_ids"] = {ids[3]};
  const json stopped = Complete(stop)["choices"][0];
  EXPECT_EQ(stopped["finish_reason"], "stop");
  const size_t first = static_cast<size_t>(std::find(ids.begin(), ids.end(), ids[3]) - ids.begin());
  EXPECT_EQ(stopped["token_ids"].size(), first + 1);
  // min_tokens: the stop id cannot end it before then.
  stop["min_tokens"] = 8;
  const json later = Complete(stop)["choices"][0];
  EXPECT_GE(later["token_ids"].size(), 8u);
  // Out of range values are 400s that name the field.
  for (const auto& [field, value] : std::vector<std::pair<std::string, json>>{
           {"presence_penalty", 3}, {"frequency_penalty", -2.5}, {"logit_bias", {{"99999", 1}}},
           {"logit_bias", {{"5", 200}}}, {"stop_token_ids", {-1}}, {"min_tokens", 99}}) {
    json bad = base;
    bad[field] = value;
    bad["model"] = "kjv-decoder";
    HttpReply r = PostJson(port(), "/v1/completions", bad);
    EXPECT_EQ(r.status, 400) << field;
    EXPECT_EQ(r.Json()["error"]["param"], field) << r.body;
  }
}

TEST_F(GenerationTest, PriorityIsVllmsWithinTheTier) {
  // An integer, lower first, negatives allowed; out of int32 range is a 400.
  for (int p : {-5, 0, 7}) {
    EXPECT_EQ(PostJson(port(), "/v1/completions",
                       {{"model", "kjv-decoder"}, {"prompt", "Amen"}, {"max_tokens", 1}, {"priority", p}})
                  .status,
              200);
  }
  EXPECT_EQ(PostJson(port(), "/v1/completions",
                     {{"model", "kjv-decoder"}, {"prompt", "Amen"}, {"max_tokens", 1}, {"priority", 1e12}})
                .status,
            400);
  Principal gold{"a", "gold", 1, false, 0, RateLimits{}}, standard{"b", "standard", 2, false, 0, RateLimits{}};
  EXPECT_LT(SchedulerPriority(gold, 1000000), SchedulerPriority(standard, -1000000));  // tiers first
  EXPECT_LT(SchedulerPriority(standard, -1), SchedulerPriority(standard, 0));           // then lower first
}

TEST_F(GenerationTest, UnknownFieldsAreIgnoredWithAWarning) {
  HttpReply r = PostJson(port(), "/v1/completions",
                         {{"model", "kjv-decoder"}, {"prompt", "Amen"}, {"max_tokens", 1}, {"max_tokenz", 5},
                          {"store", true}});
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.headers["warning"], "299 ferry \"unrecognized request arguments ignored: max_tokenz, store\"");
  HttpReply clean = PostJson(port(), "/v1/completions", {{"model", "kjv-decoder"}, {"prompt", "Amen"}, {"max_tokens", 1}});
  EXPECT_EQ(clean.headers.count("warning"), 0u);
}

TEST(GenerationRejectTest, UnknownFieldsAreRejectedWhenConfigured) {
  auto server = Start("api: {unknown_fields: reject}\n");
  HttpReply r = PostJson(server->port(), "/v1/completions",
                         {{"model", "kjv-decoder"}, {"prompt", "Amen"}, {"max_tokenz", 5}});
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(r.Json()["error"]["message"], "unrecognized request argument supplied: max_tokenz");
  EXPECT_EQ(r.Json()["error"]["param"], "max_tokenz");
  HttpReply chat = PostJson(server->port(), "/v1/chat/completions",
                            {{"model", "kjv-decoder"}, {"messages", {{{"role", "user"}, {"content", "x"}}}},
                             {"max_tokens", 1}, {"metadata", {{"a", "b"}}}});
  EXPECT_EQ(chat.status, 400);
}

TEST_F(GenerationTest, ErrorsUseOpenAiTypesAndCodes) {
  HttpReply nf = PostJson(port(), "/v1/completions", {{"model", "nope"}, {"prompt", "x"}});
  EXPECT_EQ(nf.status, 404);
  EXPECT_EQ(nf.Json()["error"]["type"], "not_found_error");
  EXPECT_EQ(nf.Json()["error"]["code"], "model_not_found");
  HttpReply bad = PostJson(port(), "/v1/completions", {{"model", "kjv-decoder"}, {"prompt", "x"}, {"n", 0}});
  EXPECT_EQ(bad.Json()["error"]["type"], "invalid_request_error");
  EXPECT_EQ(bad.Json()["error"]["param"], "n");
  EXPECT_TRUE(bad.Json()["error"].contains("code"));
  HttpReply method = testing::Http(port(), "GET", "/v1/completions");
  EXPECT_EQ(method.status, 405);
  EXPECT_EQ(method.Json()["error"]["type"], "invalid_request_error");
  for (int status : {400, 401, 403, 404, 405, 408, 413, 429, 499, 500, 503, 504}) {
    const std::string type = ErrorTypeFor(status);
    EXPECT_TRUE(type == "invalid_request_error" || type == "authentication_error" || type == "permission_error" ||
                type == "not_found_error" || type == "rate_limit_error" || type == "server_error")
        << status << ": " << type;
  }
  EXPECT_EQ(ErrorTypeFor(503), "server_error");
  EXPECT_EQ(ErrorCodeFor(503), "service_unavailable");
  EXPECT_EQ(ErrorTypeFor(429), "rate_limit_error");
}

}  // namespace
}  // namespace ferry::serve
