#include "io/pooling_config.h"

#include <gtest/gtest.h>

#include <map>

namespace ferry::io {
namespace {

constexpr const char* kModules = R"([
  {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
  {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
  {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}])";

std::string PoolingJson(const std::string& true_key) {
  std::string json = R"({"word_embedding_dimension": 384)";
  for (const char* key : {"pooling_mode_cls_token", "pooling_mode_mean_tokens", "pooling_mode_max_tokens",
                          "pooling_mode_mean_sqrt_len_tokens", "pooling_mode_weightedmean_tokens",
                          "pooling_mode_lasttoken"}) {
    json += std::string(", \"") + key + "\": " + (true_key == key ? "true" : "false");
  }
  return json + R"(, "include_prompt": true})";
}

Result<std::optional<SentencePooling>> Parse(const std::optional<std::string>& modules,
                                             std::map<std::string, std::string> files) {
  return ParseSentencePooling(modules, [files](const std::string& name) -> std::optional<std::string> {
    auto it = files.find(name);
    return it == files.end() ? std::nullopt : std::optional<std::string>(it->second);
  });
}

TEST(PoolingConfigTest, ReadsEveryModeAndTheNormalizeModule) {
  const struct {
    const char* key;
    PoolingMode mode;
  } rows[] = {{"pooling_mode_cls_token", PoolingMode::kCls},
              {"pooling_mode_mean_tokens", PoolingMode::kMean},
              {"pooling_mode_max_tokens", PoolingMode::kMax},
              {"pooling_mode_lasttoken", PoolingMode::kLastToken}};
  for (const auto& row : rows) {
    auto p = Parse(kModules, {{"1_Pooling/config.json", PoolingJson(row.key)}});
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    ASSERT_TRUE(p->has_value());
    EXPECT_EQ((*p)->mode, row.mode) << row.key;
    EXPECT_TRUE((*p)->normalize);
    EXPECT_TRUE((*p)->unsupported.empty());
    EXPECT_EQ((*p)->pooling_path, "1_Pooling");
  }
  EXPECT_EQ(PoolingModeName(PoolingMode::kLastToken), "last");
}

TEST(PoolingConfigTest, WithoutModulesThereIsNothingAndWithoutNormalizeNoNormalizing) {
  auto none = Parse(std::nullopt, {});
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());
  const std::string two = R"([{"path": "", "type": "sentence_transformers.models.Transformer"},
                              {"path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}])";
  auto p = Parse(two, {{"1_Pooling/config.json", PoolingJson("pooling_mode_cls_token")}});
  ASSERT_TRUE(p.ok() && p->has_value());
  EXPECT_FALSE((*p)->normalize);
  EXPECT_EQ(SentencePoolingFiles(two), (std::vector<std::string>{"1_Pooling/config.json"}));
}

TEST(PoolingConfigTest, WhatFerryCannotRunIsListedNotIgnored) {
  const std::string dense = R"([{"path": "", "type": "sentence_transformers.models.Transformer"},
                                {"path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
                                {"path": "2_Dense", "type": "sentence_transformers.models.Dense"}])";
  auto p = Parse(dense, {{"1_Pooling/config.json", PoolingJson("pooling_mode_mean_tokens")}});
  ASSERT_TRUE(p.ok() && p->has_value());
  EXPECT_EQ((*p)->unsupported, (std::vector<std::string>{"sentence_transformers.models.Dense"}));
  auto sqrt = Parse(kModules, {{"1_Pooling/config.json", PoolingJson("pooling_mode_mean_sqrt_len_tokens")}});
  ASSERT_TRUE(sqrt.ok() && sqrt->has_value());
  EXPECT_FALSE((*sqrt)->unsupported.empty());
}

TEST(PoolingConfigTest, MalformedFilesAreErrors) {
  EXPECT_FALSE(Parse(std::string("{"), {}).ok());
  EXPECT_FALSE(Parse(std::string(R"({"a": 1})"), {}).ok());
  EXPECT_FALSE(Parse(std::string(R"([{"path": "x"}])"), {}).ok());
  EXPECT_FALSE(Parse(std::string(kModules), {}).ok());  // the Pooling module's config is missing
  EXPECT_FALSE(Parse(std::string(kModules), {{"1_Pooling/config.json", "[1]"}}).ok());
}

}  // namespace
}  // namespace ferry::io
