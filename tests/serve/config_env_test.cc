// Config keys from FERRY_* environment variables and vLLM-named flags.
#include "serve/config_env.h"

#include <gtest/gtest.h>

#include "serve/config.h"

namespace ferry::serve {
namespace {

Result<ServerConfig> Parse(const std::string& yaml, const std::map<std::string, std::string>& env,
                           ServerConfigOverrides o = {}) {
  o.environment = &env;
  return ParseServerConfig(yaml, o);
}

TEST(ConfigEnvTest, VariableNamesFollowKeyPaths) {
  EXPECT_EQ(ConfigEnvironment::VarName("listener.port"), "FERRY_LISTENER_PORT");
  EXPECT_EQ(ConfigEnvironment::VarName("models[0].batching.max_num_seqs"), "FERRY_MODELS_0_BATCHING_MAX_NUM_SEQS");
  EXPECT_EQ(ConfigEnvironment::VarName("api.unknown_fields"), "FERRY_API_UNKNOWN_FIELDS");
}

TEST(ConfigEnvTest, VariablesSetKeysAndWinOverTheFile) {
  const std::string yaml =
      "auth: {mode: none}\nlistener: {port: 9000}\nmodels: [{name: m, path: p, batching: {max_num_seqs: 4}}]\n";
  auto c = Parse(yaml, {{"FERRY_LISTENER_PORT", "9100"},
                        {"FERRY_MODELS_0_BATCHING_MAX_NUM_SEQS", "32"},
                        {"FERRY_MODELS_0_BATCHING_ENABLE_PREFIX_CACHING", "false"},
                        {"FERRY_MODELS_0_TOOL_CALL_PARSER", "hermes"},
                        {"FERRY_API_UNKNOWN_FIELDS", "reject"},
                        {"FERRY_CORS_ALLOWED_ORIGINS", "[\"https://a.example\", \"https://b.example\"]"},
                        {"FERRY_LOG_LEVEL", "error"},
                        {"FERRY_DEMO_PORT", "1234"}});  // not a config section: ignored
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->listener.port, 9100);
  EXPECT_EQ(c->models[0].batching.max_num_seqs, 32);
  EXPECT_FALSE(c->models[0].batching.enable_prefix_caching);
  EXPECT_EQ(c->models[0].tool_call_parser, ToolCallParser::kHermes);
  EXPECT_EQ(c->api.unknown_fields, UnknownFields::kReject);
  EXPECT_EQ(c->cors.allowed_origins, (std::vector<std::string>{"https://a.example", "https://b.example"}));
  EXPECT_EQ(c->log.level, LogLevel::kError);
}

TEST(ConfigEnvTest, VariablesCreateSectionsAndModelsTheFileLacks) {
  auto c = Parse("", {{"FERRY_AUTH_MODE", "none"},
                      {"FERRY_MODELS_0_NAME", "m"},
                      {"FERRY_MODELS_0_PATH", "/models/m"},
                      {"FERRY_MODELS_1_NAME", "e"},
                      {"FERRY_MODELS_1_PATH", "/models/e"},
                      {"FERRY_MODELS_1_DYNAMIC_BATCHING_MAX_BATCH_SIZE", "8"}});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ASSERT_EQ(c->models.size(), 2u);
  EXPECT_EQ(c->models[0].path, "/models/m");
  EXPECT_EQ(c->models[1].dynamic_batching.max_batch_size, 8);
  EXPECT_EQ(c->auth.mode, AuthMode::kNone);
}

TEST(ConfigEnvTest, MistakesAreErrors) {
  auto typo = Parse("auth: {mode: none}\n", {{"FERRY_LISTENER_PROT", "1"}});
  ASSERT_FALSE(typo.ok());
  EXPECT_NE(typo.status().message().find("FERRY_LISTENER_PROT names no config key"), std::string::npos);
  auto bad = Parse("auth: {mode: none}\n", {{"FERRY_LISTENER_PORT", "eighty"}});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("listener.port: expected an integer, got 'eighty'"), std::string::npos);
  // Flags win over the environment.
  ServerConfigOverrides o;
  o.port = 7000;
  auto flags = Parse("auth: {mode: none}\n", {{"FERRY_LISTENER_PORT", "9100"}}, o);
  ASSERT_TRUE(flags.ok());
  EXPECT_EQ(flags->listener.port, 7000);
}

TEST(ConfigEnvTest, VllmFlagsApplyToEveryModel) {
  ServerConfigOverrides o;
  o.models = {"/models/llama-3.2-1b.ferry"};  // vLLM's --model PATH
  o.max_model_len = 2048;
  o.max_num_seqs = 64;
  o.max_num_batched_tokens = 4096;
  o.block_size = 32;
  o.enable_prefix_caching = false;
  o.enforce_eager = true;
  o.chat_template = "/templates/chat.jinja";
  o.tool_call_parser = ToolCallParser::kLlama3Json;
  o.gpu_memory_utilization = 0.9;
  o.allowed_origins = {"https://ui.example.com"};
  o.api_key = "sk-vllm";
  auto c = Parse("", {}, o);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ASSERT_EQ(c->models.size(), 1u);
  const ModelConfig& m = c->models[0];
  EXPECT_EQ(m.name, "llama-3.2-1b");
  EXPECT_EQ(m.batching.max_seq_len, 2048);
  EXPECT_EQ(m.batching.max_num_seqs, 64);
  EXPECT_EQ(m.batching.max_num_batched_tokens, 4096);
  EXPECT_EQ(m.batching.kv_block_tokens, 32);
  EXPECT_FALSE(m.batching.enable_prefix_caching);
  EXPECT_TRUE(m.enforce_eager);
  EXPECT_EQ(m.chat_template, "/templates/chat.jinja");
  EXPECT_EQ(m.tool_call_parser, ToolCallParser::kLlama3Json);
  EXPECT_DOUBLE_EQ(m.gpu_memory_utilization, 0.9);
  EXPECT_EQ(c->cors.allowed_origins, std::vector<std::string>{"https://ui.example.com"});
  EXPECT_EQ(c->auth.mode, AuthMode::kKeys);
  ASSERT_EQ(c->tenants.size(), 1u);
  EXPECT_EQ(c->tenants[0].name, "api-key");
  EXPECT_EQ(c->tenants[0].keys, std::vector<std::string>{"sk-vllm"});
  o.gpu_memory_utilization = 1.5;
  EXPECT_FALSE(Parse("", {}, o).ok());
}

TEST(ConfigEnvTest, ChatApiAndCorsKeys) {
  auto c = Parse(
      "auth: {mode: none}\napi: {unknown_fields: reject}\n"
      "cors: {allowed_origins: ['*'], allowed_methods: [GET, POST], max_age_s: 60}\n"
      "models: [{name: m, path: p, chat_template: t.jinja, tool_call_parser: mistral, "
      "batching: {enable_prefix_caching: false}}]\n",
      {});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->cors.allowed_methods, (std::vector<std::string>{"GET", "POST"}));
  EXPECT_EQ(c->cors.max_age_s, 60);
  EXPECT_EQ(c->models[0].chat_template, "t.jinja");
  EXPECT_EQ(c->models[0].tool_call_parser, ToolCallParser::kMistral);
  EXPECT_FALSE(Parse("auth: {mode: none}\ncors: {allowed_origins: ['*'], allow_credentials: true}\n", {}).ok());
  EXPECT_FALSE(Parse("auth: {mode: none}\napi: {unknown_fields: maybe}\n", {}).ok());
  EXPECT_FALSE(Parse("auth: {mode: none}\nmodels: [{name: m, path: p, tool_call_parser: xml}]\n", {}).ok());
}

}  // namespace
}  // namespace ferry::serve
