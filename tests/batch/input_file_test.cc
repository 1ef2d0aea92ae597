#include "batch/input_file.h"

#include <gtest/gtest.h>

namespace ferry::batch {
namespace {

std::string Line(const std::string& id, const std::string& url = "/v1/completions",
                 const std::string& body = R"({"model":"m","prompt":"x"})") {
  return R"({"custom_id":")" + id + R"(","method":"POST","url":")" + url + R"(","body":)" + body + "}\n";
}

TEST(InputFileTest, AcceptsAValidFile) {
  const std::string file = Line("a") + "\n" + Line("b") + Line("c");
  InputCheck c = CheckInputFile(file, 100);
  ASSERT_TRUE(c.ok()) << c.Summary();
  ASSERT_EQ(c.entries.size(), 3u);
  EXPECT_EQ(c.entries[1].custom_id, "b");
  EXPECT_EQ(c.entries[1].index, 1);
  EXPECT_EQ(c.entries[2].url, "/v1/completions");
  EXPECT_EQ(c.entries[0].body, R"({"model":"m","prompt":"x"})");
}

TEST(InputFileTest, ReportsErrorsByLineNumber) {
  const std::string file = Line("a") +                                        // 1
                           "not json\n" +                                      // 2
                           R"({"method":"POST","url":"/v1/completions","body":{"model":"m"}})" "\n" +  // 3
                           Line("a") +                                        // 4: duplicate
                           Line("d", "/v1/images") +                          // 5
                           Line("e", "/v1/completions", R"({"prompt":"x"})") +  // 6: no model
                           Line("f", "/v1/completions", R"({"model":"m","stream":true})") +  // 7
                           R"({"custom_id":"g","method":"GET","url":"/v1/completions","body":{"model":"m"}})" "\n" +  // 8
                           Line("h", "/v1/completions", "[1]");                // 9
  InputCheck c = CheckInputFile(file, 100);
  ASSERT_EQ(c.errors.size(), 8u);
  const std::vector<std::pair<int64_t, std::string>> want = {
      {2, "invalid_json"}, {3, "missing_custom_id"}, {4, "duplicate_custom_id"}, {5, "invalid_url"},
      {6, "missing_model"}, {7, "invalid_body"},     {8, "invalid_method"},      {9, "invalid_body"}};
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(c.errors[i].line, want[i].first) << i;
    EXPECT_EQ(c.errors[i].code, want[i].second) << i;
  }
  EXPECT_NE(c.Summary().find("line 2: not valid JSON"), std::string::npos);
  EXPECT_EQ(c.errors[0].ToJson()["line"], 2);
}

TEST(InputFileTest, ChecksTheBatchEndpointAndLimits) {
  InputCheck c = CheckInputFile(Line("a") + Line("b", "/v1/embeddings"), 100, "/v1/completions");
  ASSERT_EQ(c.errors.size(), 1u);
  EXPECT_EQ(c.errors[0].code, "mismatched_endpoint");
  EXPECT_EQ(c.errors[0].line, 2);
  InputCheck many = CheckInputFile(Line("a") + Line("b") + Line("c"), 2);
  ASSERT_EQ(many.errors.size(), 1u);
  EXPECT_EQ(many.errors[0].code, "too_many_requests");
  EXPECT_EQ(many.errors[0].line, 3);
  InputCheck empty = CheckInputFile("\n \n", 10);
  ASSERT_EQ(empty.errors.size(), 1u);
  EXPECT_EQ(empty.errors[0].code, "empty_file");
  EXPECT_FALSE(CheckInputFile(Line(std::string(513, 'x')), 10).ok());
  EXPECT_TRUE(IsBatchEndpoint("/v1/classify"));
  EXPECT_FALSE(IsBatchEndpoint("/v1/score"));
}

}  // namespace
}  // namespace ferry::batch
