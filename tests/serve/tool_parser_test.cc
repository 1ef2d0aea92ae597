// Tool-call parsing: whole outputs and the same outputs fed a few characters at a time,
// whose deltas must add up to the same calls (names first, then arguments), for the three
// formats; text that is not a call stays content.
#include "serve/tool_parser.h"

#include <gtest/gtest.h>

namespace ferry::serve {
namespace {

struct Parsed {
  std::string content;
  std::vector<ToolCall> calls;           // from calls()
  std::vector<ToolCall> from_deltas;     // rebuilt from the deltas
  bool names_before_arguments = true;
};

Parsed Parse(ToolCallParser kind, const std::string& output, size_t piece) {
  auto s = MakeToolCallStream(kind);
  Parsed p;
  auto take = [&](const ToolParseDelta& d) {
    p.content += d.content;
    for (const auto& c : d.calls) {
      if (c.first) {
        p.from_deltas.push_back(ToolCall{c.id, c.name, ""});
        EXPECT_EQ(c.index + 1, static_cast<int>(p.from_deltas.size()));
      } else if (c.index >= static_cast<int>(p.from_deltas.size())) {
        p.names_before_arguments = false;
        continue;
      }
      p.from_deltas[static_cast<size_t>(c.index)].arguments += c.arguments;
    }
  };
  for (size_t i = 0; i < output.size(); i += piece) take(s->Feed(output.substr(i, piece)));
  take(s->Finish());
  p.calls = s->calls();
  return p;
}

void ExpectEverySplit(ToolCallParser kind, const std::string& output, const std::string& content,
                      const std::vector<std::pair<std::string, std::string>>& calls) {
  for (size_t piece : {output.size(), size_t{1}, size_t{2}, size_t{3}, size_t{7}}) {
    const Parsed p = Parse(kind, output, piece);
    EXPECT_EQ(p.content, content) << "piece " << piece;
    ASSERT_EQ(p.calls.size(), calls.size()) << "piece " << piece;
    ASSERT_EQ(p.from_deltas.size(), calls.size()) << "piece " << piece;
    EXPECT_TRUE(p.names_before_arguments);
    for (size_t i = 0; i < calls.size(); ++i) {
      EXPECT_EQ(p.calls[i].name, calls[i].first);
      EXPECT_EQ(p.calls[i].arguments, calls[i].second);
      EXPECT_EQ(p.from_deltas[i].name, calls[i].first);
      EXPECT_EQ(p.from_deltas[i].arguments, calls[i].second) << "piece " << piece;
      EXPECT_EQ(p.from_deltas[i].id, p.calls[i].id);
      EXPECT_FALSE(p.calls[i].id.empty());
    }
  }
}

TEST(ToolParserTest, Hermes) {
  ExpectEverySplit(ToolCallParser::kHermes,
                   "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": [1, 2]}}\n"
                   "</tool_call>\n<tool_call>\n{\"arguments\": {\"q\": \"}{\"}, \"name\": \"search\"}\n</tool_call>",
                   "", {{"get_weather", "{\"city\": \"Paris\", \"days\": [1, 2]}"}, {"search", "{\"q\": \"}{\"}"}});
  ExpectEverySplit(ToolCallParser::kHermes,
                   "Let me check.\n<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>", "Let me check.",
                   {{"f", "{}"}});
  // No call at all: the text, untouched, including a stray "<tool" that never completes.
  ExpectEverySplit(ToolCallParser::kHermes, "x < y and <tool is not a tag", "x < y and <tool is not a tag", {});
  // A tag without a call object inside stays text.
  ExpectEverySplit(ToolCallParser::kHermes, "<tool_call>not json</tool_call> ok",
                   "<tool_call>not json</tool_call> ok", {});
}

TEST(ToolParserTest, Mistral) {
  ExpectEverySplit(ToolCallParser::kMistral,
                   "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}, "
                   "{\"name\": \"now\", \"arguments\": {}}]",
                   "", {{"get_weather", "{\"city\": \"Paris\"}"}, {"now", "{}"}});
  const Parsed p = Parse(ToolCallParser::kMistral, "[TOOL_CALLS][{\"name\": \"f\", \"arguments\": {}}]", 100);
  ASSERT_EQ(p.calls.size(), 1u);
  EXPECT_EQ(p.calls[0].id.size(), 9u);  // Mistral's templates want 9-character ids
  ExpectEverySplit(ToolCallParser::kMistral, "Plain answer.", "Plain answer.", {});
}

TEST(ToolParserTest, Llama3Json) {
  ExpectEverySplit(ToolCallParser::kLlama3Json, "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}",
                   "", {{"get_weather", "{\"city\": \"Paris\"}"}});
  ExpectEverySplit(ToolCallParser::kLlama3Json,
                   "<|python_tag|>{\"name\": \"a\", \"parameters\": {\"x\": 1}}; {\"name\": \"b\", \"parameters\": {}}",
                   "", {{"a", "{\"x\": 1}"}, {"b", "{}"}});
  // Calls only when the output starts with one; JSON later in prose is content.
  ExpectEverySplit(ToolCallParser::kLlama3Json, "Here: {\"name\": \"a\", \"parameters\": {}}",
                   "Here: {\"name\": \"a\", \"parameters\": {}}", {});
  // An object without a name is not a call.
  ExpectEverySplit(ToolCallParser::kLlama3Json, "{\"answer\": 42}", "{\"answer\": 42}", {});
  // Arguments written as a JSON string are decoded to the object's text.
  ExpectEverySplit(ToolCallParser::kLlama3Json, "{\"name\": \"a\", \"arguments\": \"{\\\"x\\\": 1}\"}", "",
                   {{"a", "{\"x\": 1}"}});
}

TEST(ToolParserTest, CutOffCallsKeepWhatTheyHave) {
  const Parsed p = Parse(ToolCallParser::kHermes, "<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": 1", 4);
  ASSERT_EQ(p.calls.size(), 1u);
  EXPECT_EQ(p.calls[0].name, "f");
  EXPECT_EQ(p.calls[0].arguments, "{\"a\": 1");
  const Parsed nameless = Parse(ToolCallParser::kHermes, "<tool_call>{\"na", 2);
  EXPECT_TRUE(nameless.calls.empty());
  EXPECT_EQ(nameless.content, "<tool_call>{\"na");
}

TEST(ToolParserTest, NoneAndDetection) {
  ExpectEverySplit(ToolCallParser::kNone, "<tool_call>{\"name\": \"f\"}</tool_call>",
                   "<tool_call>{\"name\": \"f\"}</tool_call>", {});
  EXPECT_EQ(DetectToolCallParser("...<tool_call>..."), ToolCallParser::kHermes);
  EXPECT_EQ(DetectToolCallParser("{{ '[TOOL_CALLS][' }}"), ToolCallParser::kMistral);
  EXPECT_EQ(DetectToolCallParser("<|start_header_id|>ipython<|end_header_id|>"), ToolCallParser::kLlama3Json);
  EXPECT_EQ(DetectToolCallParser("{{ messages }}"), ToolCallParser::kNone);
  EXPECT_EQ(ToolCallParserName(ToolCallParser::kLlama3Json), "llama3_json");
}

}  // namespace
}  // namespace ferry::serve
