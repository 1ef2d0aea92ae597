// POST /v1/chat/completions end to end on the demo decoder (its chat template) and on the
// same weights served with a real model's template and a tool-call parser: the prompt is the
// template's rendering, streaming adds up to the whole answer (role first, then content,
// then the finish reason and usage), chat logprobs, n and seeds, the request fields vLLM
// adds, and the 400s that name what is not supported. The chat wire format's tool-call
// deltas are checked on text the demo tokenizer spells out.
#include "serve/chat_completions.h"

#include <gtest/gtest.h>

#include "engine/engine.h"
#include "serve/server.h"
#include "test_client.h"
#include "test_util.h"

namespace ferry::serve {
namespace {

using json = nlohmann::json;
using testing::HttpReply;
using testing::PostJson;
using testing::TestConnection;

std::string Config() {
  const std::string root = ferry::testing::SourcePath("");
  const std::string fixtures = FERRY_FIXTURES_DIR;
  return "listener:\n  host: 127.0.0.1\n  port: 0\n"
         "auth:\n  mode: none\n"
         "models:\n  - name: kjv-decoder\n    path: " + root + "/models/demo/kjv-decoder\n    threads: 2\n"
         "    batching:\n      max_num_seqs: 8\n      max_num_batched_tokens: 128\n"
         "  - name: kjv-qwen\n    path: " + root + "/models/demo/kjv-decoder\n    threads: 2\n"
         "    chat_template: " + fixtures + "/chat_templates/Qwen-Qwen2.5-7B-Instruct.jinja\n"
         "    tool_call_parser: hermes\n"
         "    batching:\n      max_num_seqs: 4\n      max_num_batched_tokens: 128\n"
         "log:\n  level: warn\n  request_log: false\n";
}

class ChatTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto cfg = ParseServerConfig(Config());
    ASSERT_TRUE(cfg.ok()) << cfg.status().ToString();
    auto s = Server::Create(*cfg);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    server_ = std::move(s).value().release();
    ASSERT_TRUE(server_->Start().ok());
    ASSERT_TRUE(server_->WaitUntilReady(120000));
  }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }
  int port() const { return server_->port(); }

  static json Chat(const std::string& model = "kjv-decoder") {
    return {{"model", model},
            {"messages",
             {{{"role", "system"}, {"content", "The first book of Moses."}},
              {{"role", "user"}, {"content", "In the beginning God created the heaven and the earth."}}}},
            {"max_tokens", 16},
            {"temperature", 0}};
  }

  // The events of a streamed request, parsed; "[DONE]" ends them.
  std::vector<json> Stream(const json& req, HttpReply* head = nullptr) {
    TestConnection c(port());
    const std::string body = req.dump();
    c.SendRaw("POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: " +
              std::to_string(body.size()) + "\r\n\r\n" + body);
    HttpReply h = c.ReadHead();
    if (head != nullptr) *head = h;
    std::vector<json> events;
    std::string data;
    bool done = false;
    while (c.NextEvent(data)) {
      if (data == "[DONE]") {
        done = true;
        continue;
      }
      events.push_back(json::parse(data));
    }
    EXPECT_TRUE(done);
    return events;
  }

  static Server* server_;
};

Server* ChatTest::server_ = nullptr;

// The chat answer is the completion of the template's rendering, token for token.
TEST_F(ChatTest, TheAnswerContinuesTheRenderedTemplate) {
  HttpReply r = PostJson(port(), "/v1/chat/completions", Chat());
  ASSERT_EQ(r.status, 200) << r.body;
  const json j = r.Json();
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_EQ(j["id"].get<std::string>().rfind("chatcmpl-", 0), 0u);
  ASSERT_EQ(j["choices"].size(), 1u);
  const json& choice = j["choices"][0];
  EXPECT_EQ(choice["message"]["role"], "assistant");
  EXPECT_EQ(choice["finish_reason"], "length");
  EXPECT_TRUE(choice["logprobs"].is_null());
  EXPECT_EQ(j["usage"]["completion_tokens"], 16);

  json tok = Chat();
  tok.erase("max_tokens");
  tok.erase("temperature");
  HttpReply t = PostJson(port(), "/tokenize", tok);
  ASSERT_EQ(t.status, 200) << t.body;
  const json ids = t.Json()["tokens"];
  EXPECT_EQ(t.Json()["count"], j["usage"]["prompt_tokens"]);
  EXPECT_EQ(ids[0], 1);  // <s>, written by the template
  HttpReply c = PostJson(port(), "/v1/completions",
                         {{"model", "kjv-decoder"}, {"prompt", ids}, {"max_tokens", 16}, {"temperature", 0}});
  ASSERT_EQ(c.status, 200) << c.body;
  EXPECT_EQ(choice["message"]["content"], c.Json()["choices"][0]["text"]);

  // The rendering itself: the demo template's documented layout.
  HttpReply d = PostJson(port(), "/detokenize", {{"model", "kjv-decoder"}, {"tokens", ids}});
  ASSERT_EQ(d.status, 200);
  EXPECT_EQ(d.Json()["prompt"], "<s> The first book of Moses.\n\nIn the beginning God created the heaven and the earth.\n");
}

TEST_F(ChatTest, StreamingSendsRoleThenContentThenFinishAndUsage) {
  const json whole = PostJson(port(), "/v1/chat/completions", Chat()).Json();
  json req = Chat();
  req["stream"] = true;
  req["stream_options"] = {{"include_usage", true}};
  HttpReply head;
  const std::vector<json> events = Stream(req, &head);
  EXPECT_EQ(head.status, 200);
  EXPECT_EQ(head.headers["content-type"], "text/event-stream");
  ASSERT_GE(events.size(), 4u);
  EXPECT_EQ(events[0]["object"], "chat.completion.chunk");
  EXPECT_EQ(events[0]["choices"][0]["delta"]["role"], "assistant");
  std::string content, finish;
  for (size_t i = 1; i < events.size(); ++i) {
    const json& e = events[i];
    EXPECT_EQ(e["id"], events[0]["id"]);
    if (e["choices"].empty()) continue;
    const json& delta = e["choices"][0]["delta"];
    EXPECT_FALSE(delta.contains("role"));
    if (delta.contains("content")) content += delta["content"].get<std::string>();
    if (!e["choices"][0]["finish_reason"].is_null()) finish = e["choices"][0]["finish_reason"];
  }
  EXPECT_EQ(content, whole["choices"][0]["message"]["content"]);
  EXPECT_EQ(finish, "length");
  EXPECT_TRUE(events.back()["choices"].empty());
  EXPECT_EQ(events.back()["usage"]["completion_tokens"], 16);
}

TEST_F(ChatTest, LogprobsChoicesSeedsAndVllmFields) {
  json req = Chat();
  req["logprobs"] = true;
  req["top_logprobs"] = 3;
  req["n"] = 2;
  req["temperature"] = 0.9;
  req["seed"] = 11;
  req["max_completion_tokens"] = 6;  // wins over max_tokens
  req["presence_penalty"] = 0.5;
  req["frequency_penalty"] = 0.5;
  req["min_tokens"] = 6;
  HttpReply r = PostJson(port(), "/v1/chat/completions", req);
  ASSERT_EQ(r.status, 200) << r.body;
  const json j = r.Json();
  ASSERT_EQ(j["choices"].size(), 2u);
  EXPECT_EQ(j["usage"]["completion_tokens"], 12);
  for (const json& c : j["choices"]) {
    const json& lp = c["logprobs"]["content"];
    ASSERT_EQ(lp.size(), 6u);
    std::string joined;
    for (const json& t : lp) {
      joined += t["token"].get<std::string>();
      EXPECT_LE(t["logprob"].get<double>(), 0.0);
      EXPECT_GE(t["top_logprobs"].size(), 3u);  // and the chosen token when it is not among them
      EXPECT_FALSE(t["bytes"].empty() && !t["token"].get<std::string>().empty());
    }
    EXPECT_EQ(joined, c["message"]["content"]);
  }
  // Seeded: the same request gives the same choices. The second one finds the prompt in the
  // prefix cache, so its log-probabilities may differ in the last bits (the rows are computed
  // in other batches), never its tokens.
  const json again = PostJson(port(), "/v1/chat/completions", req).Json();
  ASSERT_EQ(again["choices"].size(), 2u);
  for (int i = 0; i < 2; ++i) {
    const json& a = again["choices"][i];
    const json& b = j["choices"][i];
    EXPECT_EQ(a["message"], b["message"]);
    EXPECT_EQ(a["finish_reason"], b["finish_reason"]);
    const json& la = a["logprobs"]["content"];
    const json& lb = b["logprobs"]["content"];
    ASSERT_EQ(la.size(), lb.size());
    for (size_t k = 0; k < la.size(); ++k) {
      EXPECT_EQ(la[k]["token"], lb[k]["token"]);
      EXPECT_NEAR(la[k]["logprob"].get<double>(), lb[k]["logprob"].get<double>(), 1e-4);
    }
  }
}

TEST_F(ChatTest, RequestFieldsThatShapeThePrompt) {
  // continue_final_message: the model continues the assistant's words; echo repeats them.
  json req = Chat();
  req["messages"].push_back({{"role", "assistant"}, {"content", "And the earth"}});
  req["continue_final_message"] = true;
  req["add_generation_prompt"] = false;
  req["echo"] = true;
  HttpReply r = PostJson(port(), "/v1/chat/completions", req);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.Json()["choices"][0]["message"]["content"].get<std::string>().rfind("And the earth", 0), 0u);
  // A template of the request's own, with chat_template_kwargs.
  json own = Chat();
  own["chat_template"] = "{{ bos_token }}{{ prefix }}{% for m in messages %}{{ m.content }} {% endfor %}";
  own["chat_template_kwargs"] = {{"prefix", "Psalm: "}};
  HttpReply t = PostJson(port(), "/tokenize", {{"model", "kjv-decoder"}, {"messages", own["messages"]},
                                               {"chat_template", own["chat_template"]},
                                               {"chat_template_kwargs", own["chat_template_kwargs"]},
                                               {"return_token_strs", true}});
  ASSERT_EQ(t.status, 200) << t.body;
  HttpReply d = PostJson(port(), "/detokenize", {{"model", "kjv-decoder"}, {"tokens", t.Json()["tokens"]}});
  EXPECT_EQ(d.Json()["prompt"], "<s> Psalm: The first book of Moses. In the beginning God created the heaven and "
                                "the earth. ");
  EXPECT_EQ(t.Json()["token_strs"].size(), t.Json()["tokens"].size());
  EXPECT_EQ(PostJson(port(), "/v1/chat/completions", own).status, 200);
}

TEST_F(ChatTest, UnsupportedThingsAreFourHundredsThatSaySo) {
  auto error = [&](json req) {
    HttpReply r = PostJson(port(), "/v1/chat/completions", req);
    EXPECT_EQ(r.status, 400) << r.body;
    return r.Json()["error"];
  };
  json image = Chat();
  image["messages"][1]["content"] = json::array(
      {{{"type", "text"}, {"text", "What is this?"}},
       {{"type", "image_url"}, {"image_url", {{"url", "data:image/png;base64,AAAA"}}}}});
  json e = error(image);
  EXPECT_EQ(e["code"], "unsupported_content");
  EXPECT_EQ(e["type"], "invalid_request_error");
  EXPECT_EQ(e["param"], "messages[1].content[1].type");
  EXPECT_NE(e["message"].get<std::string>().find("text only"), std::string::npos);

  json tools = Chat("kjv-qwen");
  tools["tools"] = {{{"type", "function"}, {"function", {{"name", "f"}, {"parameters", json::object()}}}}};
  // Forced tool calls are enforced by structured outputs: the answer is a call to "f".
  tools["tool_choice"] = "required";
  tools["max_tokens"] = 64;
  tools["parallel_tool_calls"] = false;  // one call: the grammar ends after it
  tools["tools"][0]["function"]["parameters"] = {
      {"type", "object"}, {"properties", {{"n", {{"type", "integer"}, {"minimum", 0}, {"maximum", 9}}}}}, {"required", {"n"}}};
  HttpReply forced = PostJson(port(), "/v1/chat/completions", tools);
  ASSERT_EQ(forced.status, 200) << forced.body;
  EXPECT_EQ(forced.Json()["choices"][0]["message"]["tool_calls"][0]["function"]["name"], "f");
  EXPECT_EQ(forced.Json()["choices"][0]["finish_reason"], "tool_calls");
  tools["tool_choice"] = {{"type", "function"}, {"function", {{"name", "g"}}}};
  e = error(tools);
  EXPECT_NE(e["message"].get<std::string>().find("'g'"), std::string::npos);
  tools["tool_choice"] = {{"type", "function"}, {"function", {{"name", "f"}}}};
  tools["response_format"] = {{"type", "json_object"}};
  EXPECT_EQ(error(tools)["param"], "tool_choice");
  tools.erase("response_format");
  tools["tools"][0]["function"]["parameters"] = {{"type", "object"}, {"not", json::object()}};
  e = error(tools);
  EXPECT_EQ(e["code"], "invalid_structured_output");
  EXPECT_NE(e["message"].get<std::string>().find("'not'"), std::string::npos);
  tools["tools"][0]["function"]["parameters"] = json::object();

  json format = Chat();
  format["response_format"] = {{"type", "json_schema"}, {"json_schema", {{"name", "n"}, {"schema", {{"type", "object"}, {"minProperties", 1}}}}}};
  e = error(format);
  EXPECT_EQ(e["param"], "response_format");
  EXPECT_NE(e["message"].get<std::string>().find("'minProperties'"), std::string::npos);
  format["response_format"] = {{"type", "json_schema"}, {"json_schema", {{"name", "n"}, {"schema", {{"enum", {"yea", "nay"}}}}}}};
  HttpReply constrained = PostJson(port(), "/v1/chat/completions", format);
  ASSERT_EQ(constrained.status, 200) << constrained.body;
  const std::string answer = constrained.Json()["choices"][0]["message"]["content"];
  EXPECT_TRUE(answer == "\"yea\"" || answer == "\"nay\"") << answer;

  // The demo decoder has no tool-call parser: tools cannot be returned.
  json demo_tools = Chat();
  demo_tools["tools"] = tools["tools"];
  EXPECT_EQ(error(demo_tools)["code"], "tool_calls_unsupported");
  demo_tools["tool_choice"] = "none";  // tools kept out of the prompt: fine
  EXPECT_EQ(PostJson(port(), "/v1/chat/completions", demo_tools).status, 200);

  // The template's own refusal (raise_exception), with its message.
  json role = Chat();
  role["messages"].push_back({{"role", "tool"}, {"content", "x"}});
  e = error(role);
  EXPECT_EQ(e["code"], "chat_template_error");
  EXPECT_NE(e["message"].get<std::string>().find("TemplateError: kjv-decoder reads system, user and assistant"),
            std::string::npos);

  json empty = Chat();
  empty["messages"] = json::array();
  EXPECT_EQ(error(empty)["param"], "messages");
  json bad_role = Chat();
  bad_role["messages"][0].erase("role");
  EXPECT_EQ(error(bad_role)["param"], "messages[0].role");
  json too_long = Chat();
  too_long["max_tokens"] = 100000;
  EXPECT_EQ(error(too_long)["code"], "context_length_exceeded");
}

// A real model's template with a tool-call parser: tools reach the prompt and the answer
// comes back as a message (these weights never call tools; the parser sees plain text).
TEST_F(ChatTest, ToolsGoThroughTheTemplate) {
  json req = Chat("kjv-qwen");
  req["tools"] = json::parse(R"([{"type": "function", "function": {"name": "get_weather",
      "description": "Current weather",
      "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}])");
  json tok = req;
  tok.erase("max_tokens");
  tok.erase("temperature");
  HttpReply t = PostJson(port(), "/tokenize", tok);
  ASSERT_EQ(t.status, 200) << t.body;
  HttpReply d = PostJson(port(), "/detokenize", {{"model", "kjv-qwen"}, {"tokens", t.Json()["tokens"]}});
  const std::string prompt = d.Json()["prompt"];
  EXPECT_NE(prompt.find("# Tools"), std::string::npos);
  EXPECT_NE(prompt.find("\"name\": \"get_weather\""), std::string::npos);
  HttpReply r = PostJson(port(), "/v1/chat/completions", req);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_TRUE(r.Json()["choices"][0]["message"]["content"].is_string());
  HttpReply card = testing::Http(port(), "GET", "/v1/models/kjv-qwen");
  EXPECT_EQ(card.Json()["ferry"]["tool_call_parser"], "hermes");
}

// The wire format on an output that calls tools: streamed deltas and the whole message agree.
TEST(ChatFormatTest, ToolCallsStreamAsOpenAiDeltas) {
  auto tok = engine::LoadTokenizerFor(ferry::testing::SourcePath("models/demo/kjv-decoder"));
  ASSERT_TRUE(tok.ok());
  const std::string text =
      "Let me look.<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}</tool_call>";
  auto ids = (*tok)->Encode(text);
  ASSERT_TRUE(ids.ok());
  OutputSpec spec;
  spec.skip_special_tokens = false;
  OutputProcessor streamed(tok->get(), spec), whole(tok->get(), spec);
  auto format = MakeChatFormat(1, false, ToolCallParser::kHermes, true, "", false);
  std::vector<json> chunks;
  for (size_t i = 0; i < ids->size(); ++i) {
    sched::GenerationEvent ev;
    ev.tokens.push_back(sched::TokenOutput{(*ids)[i], -0.1f, {}});
    ev.finished = i + 1 == ids->size();
    ev.finish_reason = ev.finished ? sched::FinishReason::kStop : sched::FinishReason::kNone;
    streamed.Add(ev);
    whole.Add(ev);
    OutputDelta d = streamed.TakeDelta();
    format->StreamChoice(0, streamed, d, chunks);
  }
  ASSERT_GE(chunks.size(), 4u);
  EXPECT_EQ(chunks[0]["delta"]["role"], "assistant");
  std::string content, name, args, id;
  for (const json& c : chunks) {
    const json& delta = c["delta"];
    if (delta.contains("content")) content += delta["content"].get<std::string>();
    if (!delta.contains("tool_calls")) continue;
    for (const json& call : delta["tool_calls"]) {
      EXPECT_EQ(call["index"], 0);
      if (call.contains("id")) {
        EXPECT_TRUE(id.empty());  // the id and name come once, first
        id = call["id"];
        name = call["function"]["name"];
        EXPECT_EQ(call["type"], "function");
      }
      args += call["function"]["arguments"].get<std::string>();
    }
  }
  EXPECT_EQ(chunks.back()["finish_reason"], "tool_calls");
  // The tokenizer prepends "▁" to the first word; an output is a continuation, so it keeps it.
  EXPECT_EQ(content, " Let me look.");
  EXPECT_EQ(name, "get_weather");
  EXPECT_EQ(args, "{\"city\": \"Paris\"}");
  auto final_format = MakeChatFormat(1, false, ToolCallParser::kHermes, true, "", false);
  const json message = final_format->FinalChoice(0, whole);
  EXPECT_EQ(message["finish_reason"], "tool_calls");
  EXPECT_EQ(message["message"]["content"], " Let me look.");
  ASSERT_EQ(message["message"]["tool_calls"].size(), 1u);
  EXPECT_EQ(message["message"]["tool_calls"][0]["function"]["arguments"], args);
  EXPECT_EQ(message["message"]["tool_calls"][0]["function"]["name"], "get_weather");
}

}  // namespace
}  // namespace ferry::serve
