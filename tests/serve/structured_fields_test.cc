// The structured-output fields of the generation routes, read without a model: which
// constraint a body asks for, and the 400s for malformed, conflicting or unsupported ones.
#include "serve/structured_fields.h"

#include <gtest/gtest.h>

namespace ferry::serve {
namespace {

using ojson = nlohmann::ordered_json;
using structured::ConstraintKind;

struct Read {
  MaybeError error;
  std::optional<structured::Constraint> constraint;
  std::string param;
};

Read ReadBody(const std::string& text) {
  Read r;
  r.error = ReadConstraint(ojson::parse(text), r.constraint, r.param);
  return r;
}

TEST(StructuredFields, ResponseFormat) {
  EXPECT_FALSE(ReadBody(R"({"response_format":{"type":"text"}})").constraint);
  Read o = ReadBody(R"({"response_format":{"type":"json_object"}})");
  ASSERT_FALSE(o.error);
  ASSERT_TRUE(o.constraint);
  EXPECT_EQ(o.constraint->kind, ConstraintKind::kJsonObject);
  Read s = ReadBody(
      R"({"response_format":{"type":"json_schema","json_schema":{"name":"x","strict":true,"schema":{"type":"object","properties":{"z":{},"a":{}}}}}})");
  ASSERT_FALSE(s.error);
  ASSERT_TRUE(s.constraint);
  EXPECT_EQ(s.constraint->kind, ConstraintKind::kJsonSchema);
  EXPECT_LT(s.constraint->text.find("\"z\""), s.constraint->text.find("\"a\""));  // the schema's order kept
  EXPECT_EQ(s.param, "response_format");
  Read unnamed = ReadBody(R"({"response_format":{"type":"json_schema","json_schema":{"schema":{}}}})");
  ASSERT_TRUE(unnamed.error);
  EXPECT_EQ(unnamed.error->param, "response_format.json_schema.name");
  EXPECT_TRUE(ReadBody(R"({"response_format":{"type":"xml"}})").error);
  EXPECT_TRUE(ReadBody(R"({"response_format":{"type":"json_schema","json_schema":{"name":"x","schemas":{}}}})").error);
}

TEST(StructuredFields, VllmStructuredOutputsAndGuided) {
  Read re = ReadBody(R"({"structured_outputs":{"regex":"[a-z]+","disable_any_whitespace":true}})");
  ASSERT_FALSE(re.error);
  EXPECT_EQ(re.constraint->kind, ConstraintKind::kRegex);
  EXPECT_EQ(re.constraint->text, "[a-z]+");
  EXPECT_FALSE(re.constraint->any_whitespace);
  Read ch = ReadBody(R"({"structured_outputs":{"choice":["a","b"]}})");
  ASSERT_FALSE(ch.error);
  EXPECT_EQ(ch.constraint->choices, (std::vector<std::string>{"a", "b"}));
  Read js = ReadBody(R"({"structured_outputs":{"json":"{\"type\":\"integer\"}"}})");
  ASSERT_FALSE(js.error);
  EXPECT_EQ(js.constraint->kind, ConstraintKind::kJsonSchema);
  Read gr = ReadBody(R"({"guided_grammar":"root ::= \"a\"","guided_decoding_backend":"xgrammar"})");
  ASSERT_FALSE(gr.error);
  EXPECT_EQ(gr.constraint->kind, ConstraintKind::kGrammar);
  EXPECT_EQ(gr.param, "guided_grammar");
  Read gc = ReadBody(R"({"guided_choice":["x"]})");
  ASSERT_FALSE(gc.error);
  EXPECT_EQ(gc.constraint->kind, ConstraintKind::kChoice);
  EXPECT_FALSE(ReadBody(R"({"guided_json":{"type":"boolean"}})").error);
}

TEST(StructuredFields, ConflictsAndUnsupportedAre400s) {
  Read two = ReadBody(R"({"guided_regex":"a","guided_choice":["a"]})");
  ASSERT_TRUE(two.error);
  EXPECT_NE(two.error->message.find("only one"), std::string::npos);
  EXPECT_TRUE(ReadBody(R"({"response_format":{"type":"json_object"},"structured_outputs":{"regex":"a"}})").error);
  EXPECT_TRUE(ReadBody(R"({"structured_outputs":{"regex":"a","choice":["a"]}})").error);
  EXPECT_TRUE(ReadBody(R"({"structured_outputs":{}})").error);
  EXPECT_TRUE(ReadBody(R"({"structured_outputs":{"regexp":"a"}})").error);
  Read ws = ReadBody(R"({"structured_outputs":{"regex":"a","whitespace_pattern":" *"}})");
  ASSERT_TRUE(ws.error);
  EXPECT_EQ(ws.error->code, "unsupported_structured_output");
  EXPECT_TRUE(ReadBody(R"({"guided_whitespace_pattern":" "})").error);
  EXPECT_TRUE(ReadBody(R"({"guided_choice":[]})").error);
  EXPECT_TRUE(ReadBody(R"({"guided_choice":[1]})").error);
  EXPECT_TRUE(ReadBody(R"({"guided_regex":""})").error);
  EXPECT_TRUE(ReadBody(R"({"guided_json":"{not json"})").error);
  EXPECT_TRUE(ReadBody(R"({"guided_json":3})").error);
}

}  // namespace
}  // namespace ferry::serve
