#include <gtest/gtest.h>

#include "template/render_util.h"

namespace ferry::jinja {
namespace {

TEST(ToJsonTest, MatchesPythonJsonDumps) {
  EXPECT_EQ(Render("{{ [1, 2]|tojson }}|{{ {'a': 'é', 'b': none, 'c': true, 'd': 1.5, 'e': [1, {'x': 'y'}]}|tojson }}"), "[1, 2]|{\"a\": \"é\", \"b\": null, \"c\": true, \"d\": 1.5, \"e\": [1, {\"x\": \"y\"}]}");
  EXPECT_EQ(Render("{{ {'a': [1, 2], 'b': {}, 'c': []}|tojson(indent=2) }}"), "{\n  \"a\": [\n    1,\n    2\n  ],\n  \"b\": {},\n  \"c\": []\n}");
  EXPECT_EQ(Render("{{ ms|tojson(indent=4) }}"), "[\n    {\n        \"role\": \"user\",\n        \"content\": \" hi \"\n    },\n    {\n        \"role\": \"assistant\",\n        \"content\": \"yo\"\n    },\n    {\n        \"role\": \"user\",\n        \"content\": \"bye\"\n    }\n]");
  EXPECT_EQ(Render("{{ 'a\"b\\\\c\\n\\t\\x01'|tojson }}|{{ 'é😀'|tojson(ensure_ascii=true) }}"), "\"a\\\"b\\\\c\\n\\t\\u0001\"|\"\\u00e9\\ud83d\\ude00\"");
  EXPECT_EQ(Render("{{ {'b': 1, 'a': 2}|tojson(sort_keys=true) }}|{{ d|tojson(separators=(',', ':')) }}|{{ d|tojson(indent='\\t') }}"), "{\"a\": 2, \"b\": 1}|{\"a\":1,\"b\":2}|{\n\t\"a\": 1,\n\t\"b\": 2\n}");
  EXPECT_EQ(Render("{{ {'a': 1.0, 'b': 1e100, 'c': -1e-10, 'd': 0.1, 'e': 100.0, 'f': 1e16, 'g': 123456789012.5}|tojson }}"), "{\"a\": 1.0, \"b\": 1e+100, \"c\": -1e-10, \"d\": 0.1, \"e\": 100.0, \"f\": 1e+16, \"g\": 123456789012.5}");
  EXPECT_EQ(Render("{{ {1: 'int key', true: 'bool', none: 'null'}|tojson }}"), "{\"1\": \"bool\", \"null\": \"null\"}");
  EXPECT_EQ(Render("{{ (1, 'a')|tojson }}"), "[1, \"a\"]");
  EXPECT_EQ(ErrorKind(Render("{{ missing|tojson }}")), "TypeError");
  EXPECT_EQ(ErrorKind(Render("{{ namespace(a=1)|tojson }}")), "TypeError");
}
TEST(ToJsonTest, FromJsonKeepsKeyOrderAndIntegers) {
  const auto j = nlohmann::ordered_json::parse(R"({"z": 1, "a": [2.0, 3, {"m": null}], "b": true})");
  const Value v = FromJson(j);
  EXPECT_EQ(Str(v), "{'z': 1, 'a': [2.0, 3, {'m': None}], 'b': True}");
  EXPECT_EQ(DumpJson(v, {}), R"({"z": 1, "a": [2.0, 3, {"m": null}], "b": true})");
}

}  // namespace
}  // namespace ferry::jinja
