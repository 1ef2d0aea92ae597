#include "template/chat_template.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

namespace ferry::jinja {
namespace {

namespace fs = std::filesystem;
const fs::path kFixtures = fs::path(FERRY_FIXTURES_DIR) / "chat_templates";

std::string ReadFile(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

ChatRenderInput InputOf(const nlohmann::ordered_json& c, const std::string& now) {
  ChatRenderInput in;
  in.messages = c.at("messages");
  if (c.contains("tools")) in.tools = c.at("tools");
  in.add_generation_prompt = c.at("add_generation_prompt").get<bool>();
  in.special_tokens["bos_token"] = c.at("bos_token").get<std::string>();
  in.special_tokens["eos_token"] = c.at("eos_token").get<std::string>();
  in.now = now;
  return in;
}

// Every case of every fixture: the exact output, or a refusal. A TemplateError case (the
// template's own raise_exception) must be refused with that error.
TEST(ChatTemplateTest, ReproducesEveryFixtureCase) {
  int templates = 0, outputs = 0, refusals = 0;
  for (const auto& entry : fs::directory_iterator(kFixtures)) {
    if (entry.path().extension() != ".jinja") continue;
    ++templates;
    const std::string name = entry.path().stem().string();
    auto t = ChatTemplate::Parse(ReadFile(entry.path()));
    ASSERT_TRUE(t.ok()) << name << ": " << t.status().message();
    const auto cases = nlohmann::ordered_json::parse(ReadFile(kFixtures / (name + ".cases.json")));
    for (const auto& c : cases.at("cases")) {
      const std::string label = name + " / " + c.at("name").get<std::string>();
      auto r = t->Render(InputOf(c, cases.at("now").get<std::string>()));
      if (c.contains("output")) {
        ASSERT_TRUE(r.ok()) << label << ": " << r.status().message();
        EXPECT_EQ(*r, c.at("output").get<std::string>()) << label;
        ++outputs;
      } else {
        const std::string want = c.at("error").get<std::string>();
        ASSERT_FALSE(r.ok()) << label << " rendered instead of failing with " << want;
        // Our message is the Python one followed by the place: "TemplateError: ... (line L, column C)".
        EXPECT_EQ(r.status().message().substr(0, want.size()), want) << label;
        EXPECT_NE(r.status().message().find("(line "), std::string::npos) << label;
        ++refusals;
      }
    }
  }
  EXPECT_EQ(templates, 10);
  EXPECT_EQ(outputs + refusals, 120);
  EXPECT_GE(refusals, 8);
}

TEST(ChatTemplateTest, ToolsAreUndefinedUnlessGiven) {
  auto t = ChatTemplate::Parse("{{ tools is defined }}|{{ documents is defined }}|{{ bos_token }}|{{ custom }}");
  ASSERT_TRUE(t.ok());
  ChatRenderInput in;
  in.special_tokens["bos_token"] = "<s>";
  in.extra = {{"custom", "kw"}};
  EXPECT_EQ(*t->Render(in), "False|False|<s>|kw");
  in.tools = nlohmann::ordered_json::array();
  in.documents = nlohmann::ordered_json::array();
  EXPECT_EQ(*t->Render(in), "True|True|<s>|kw");
}

TEST(ChatTemplateTest, StrftimeNowUsesTheGivenClock) {
  auto t = ChatTemplate::Parse("{{ strftime_now('%d %b %Y %H:%M:%S.%f %A %j%z%Z') }}");
  ASSERT_TRUE(t.ok());
  ChatRenderInput in;
  in.now = "2024-07-26T12:00:05.25";
  EXPECT_EQ(*t->Render(in), "26 Jul 2024 12:00:05.250000 Friday 208");
  in.now = "not a time";
  EXPECT_FALSE(t->Render(in).ok());
  in.now.reset();  // the local clock
  auto year = ChatTemplate::Parse("{{ strftime_now('%Y') }}")->Render(in);
  ASSERT_TRUE(year.ok());
  EXPECT_GE(std::stoi(*year), 2024);
}

TEST(ChatTemplateTest, ContinueFinalMessageCutsAfterItsContent) {
  auto t = ChatTemplate::Parse(
      "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}<|end|>\n{% endfor %}"
      "{% if add_generation_prompt %}<|assistant|>{% endif %}");
  ASSERT_TRUE(t.ok());
  ChatRenderInput in;
  in.messages = nlohmann::ordered_json::parse(
      R"([{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "The answer is "}])");
  in.continue_final_message = true;
  EXPECT_EQ(*t->Render(in), "<|user|>Hi<|end|>\n<|assistant|>The answer is ");
  in.add_generation_prompt = true;
  EXPECT_FALSE(t->Render(in).ok());  // the two are contradictory, as transformers says
  in.add_generation_prompt = false;
  in.messages = nlohmann::ordered_json::parse(R"([{"role": "assistant", "content": [{"type": "text", "text": "Part"}]}])");
  auto strip = ChatTemplate::Parse("{% for m in messages %}[{{ m.content[0].text|upper }}]{% endfor %}");
  EXPECT_FALSE(strip->Render(in).ok());  // the template changed the text: nothing to continue
}

TEST(ChatTemplateTest, RaiseExceptionIsATemplateError) {
  auto t = ChatTemplate::Parse("{% if messages[0].role == 'system' %}\n  {{ raise_exception('no system') }}{% endif %}");
  ChatRenderInput in;
  in.messages = nlohmann::ordered_json::parse(R"([{"role": "system", "content": "x"}])");
  EXPECT_EQ(t->Render(in).status().message(), "TemplateError: no system (line 2, column 6)");
}

TEST(ChatTemplateTest, StrftimeAt) {
  EXPECT_EQ(*StrftimeAt("2024-01-05T09:03:00", "%Y-%m-%d %I%p %-d"), "2024-01-05 09AM 5");
  EXPECT_EQ(*StrftimeAt("2024-02-29", "%a %d"), "Thu 29");
  EXPECT_FALSE(StrftimeAt("2024-13-01", "%Y").ok());
}

}  // namespace
}  // namespace ferry::jinja
