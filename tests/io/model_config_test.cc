#include "io/model_config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cmath>

#include "io/temp_dir.h"
#include "test_util.h"

namespace ferry::io {
namespace {

using ::ferry::testing::FixturePath;
using ::ferry::testing::TempDir;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using json = nlohmann::json;

ModelConfig Load(const std::string& model) {
  Result<ModelConfig> c = LoadModelConfig(FixturePath("models/" + model));
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return c.ok() ? *c : ModelConfig();
}

// A minimal valid llama config; tests patch fields into it.
json LlamaBase() {
  return json{{"model_type", "llama"},    {"architectures", {"LlamaForCausalLM"}},
              {"vocab_size", 1000},       {"hidden_size", 256},
              {"intermediate_size", 512}, {"num_hidden_layers", 2},
              {"num_attention_heads", 8}, {"num_key_value_heads", 2}};
}

Result<ModelConfig> Parse(const json& j) { return ParseModelConfig(j.dump()); }

ModelConfig ParseOk(const json& j) {
  Result<ModelConfig> c = Parse(j);
  EXPECT_TRUE(c.ok()) << c.status().ToString() << "\n" << j.dump();
  return c.ok() ? *c : ModelConfig();
}

void ExpectError(const json& j, StatusCode code, const std::string& substr) {
  Result<ModelConfig> c = Parse(j);
  ASSERT_FALSE(c.ok()) << j.dump();
  EXPECT_EQ(c.status().code(), code) << c.status().ToString();
  EXPECT_THAT(c.status().message(), HasSubstr(substr));
}

TEST(ModelConfigFixtureTest, LlamaTiny) {
  const ModelConfig c = Load("llama-tiny");
  EXPECT_EQ(c.model_type, "llama");
  EXPECT_EQ(c.architecture, "LlamaForCausalLM");
  EXPECT_EQ(c.family, ModelFamily::kDecoder);
  EXPECT_EQ(c.vocab_size, 32000);
  EXPECT_EQ(c.hidden_size, 64);
  EXPECT_EQ(c.intermediate_size, 128);
  EXPECT_EQ(c.num_layers, 2);
  EXPECT_EQ(c.num_heads, 4);
  EXPECT_EQ(c.num_kv_heads, 2);
  EXPECT_EQ(c.head_dim, 16);
  EXPECT_EQ(c.max_position_embeddings, 2048);
  EXPECT_FLOAT_EQ(c.rms_norm_eps, 1e-5f);
  EXPECT_FLOAT_EQ(c.rope_theta, 10000.0f);
  EXPECT_EQ(c.rope_scaling.type, RopeScaling::Type::kNone);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_FALSE(c.attention_bias);
  EXPECT_FALSE(c.mlp_bias);
  EXPECT_EQ(c.hidden_act, "silu");
  EXPECT_FALSE(c.sliding_window.has_value());
  EXPECT_THAT(c.bos_token_ids, ElementsAre(1));
  EXPECT_THAT(c.eos_token_ids, ElementsAre(2));
  EXPECT_FALSE(c.pad_token_id.has_value());
  EXPECT_EQ(c.num_labels, 0);
  EXPECT_EQ(c.torch_dtype, "bfloat16");
}

TEST(ModelConfigFixtureTest, Llama3TinyHasLlama3RopeScaling) {
  const ModelConfig c = Load("llama3-tiny");
  EXPECT_EQ(c.vocab_size, 50257);
  EXPECT_EQ(c.intermediate_size, 160);
  EXPECT_EQ(c.num_heads, 4);
  EXPECT_EQ(c.num_kv_heads, 1);
  EXPECT_EQ(c.head_dim, 16);
  EXPECT_EQ(c.max_position_embeddings, 131072);
  EXPECT_FLOAT_EQ(c.rope_theta, 500000.0f);
  EXPECT_EQ(c.rope_scaling.type, RopeScaling::Type::kLlama3);
  EXPECT_FLOAT_EQ(c.rope_scaling.factor, 8.0f);
  EXPECT_FLOAT_EQ(c.rope_scaling.low_freq_factor, 1.0f);
  EXPECT_FLOAT_EQ(c.rope_scaling.high_freq_factor, 4.0f);
  EXPECT_EQ(c.rope_scaling.original_max_position, 8192);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_THAT(c.bos_token_ids, ElementsAre(50256));
  EXPECT_THAT(c.eos_token_ids, ElementsAre(50256));
  EXPECT_EQ(c.torch_dtype, "float16");
}

TEST(ModelConfigFixtureTest, Qwen2TinyHasQkvBiasAndNoWindow) {
  const ModelConfig c = Load("qwen2-tiny");
  EXPECT_EQ(c.model_type, "qwen2");
  EXPECT_EQ(c.architecture, "Qwen2ForCausalLM");
  EXPECT_EQ(c.family, ModelFamily::kDecoder);
  EXPECT_EQ(c.vocab_size, 512);
  EXPECT_EQ(c.num_kv_heads, 2);
  EXPECT_EQ(c.head_dim, 16);
  EXPECT_TRUE(c.attention_bias);
  EXPECT_FALSE(c.mlp_bias);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_FLOAT_EQ(c.rope_theta, 1e6f);
  EXPECT_FLOAT_EQ(c.rms_norm_eps, 1e-6f);
  EXPECT_FALSE(c.sliding_window.has_value());
  EXPECT_THAT(c.bos_token_ids, ElementsAre(0));
  EXPECT_THAT(c.eos_token_ids, ElementsAre(1));
  EXPECT_EQ(c.torch_dtype, "float32");
}

TEST(ModelConfigFixtureTest, BertTinyIsAClassifierEncoder) {
  const ModelConfig c = Load("bert-tiny");
  EXPECT_EQ(c.model_type, "bert");
  EXPECT_EQ(c.architecture, "BertForSequenceClassification");
  EXPECT_EQ(c.family, ModelFamily::kEncoder);
  EXPECT_EQ(c.vocab_size, 30522);
  EXPECT_EQ(c.hidden_size, 64);
  EXPECT_EQ(c.num_heads, 4);
  EXPECT_EQ(c.num_kv_heads, 4);
  EXPECT_EQ(c.head_dim, 16);
  EXPECT_EQ(c.max_position_embeddings, 512);
  EXPECT_EQ(c.type_vocab_size, 2);
  EXPECT_FLOAT_EQ(c.layer_norm_eps, 1e-12f);
  EXPECT_EQ(c.hidden_act, "gelu");
  EXPECT_EQ(c.pad_token_id, 0);
  EXPECT_EQ(c.num_labels, 3);
  EXPECT_EQ(c.id2label, (std::map<int, std::string>{{0, "LABEL_0"}, {1, "LABEL_1"}, {2, "LABEL_2"}}));
  EXPECT_EQ(c.torch_dtype, "float32");
}

// quantization_config: the float8 and packed integer formats parse (with a block or group
// size where given); every other method and malformed fields are refused by name.
TEST(ModelConfigTest, QuantizationConfigFloat8FormatsParseAndOthersAreRefused) {
  json j = LlamaBase();
  EXPECT_TRUE(ParseOk(j).quantization.method.empty());
  j["quantization_config"] = json::parse(R"({"quant_method": "fp8", "weight_block_size": [128, 128]})");
  ModelConfig c = ParseOk(j);
  EXPECT_EQ(c.quantization.method, "fp8");
  EXPECT_EQ(c.quantization.block_rows, 128);
  EXPECT_EQ(c.quantization.block_cols, 128);
  j["quantization_config"] = json::parse(
      R"({"quant_method": "compressed-tensors", "config_groups": {"g": {"weights": {"type": "float", "num_bits": 8}}}})");
  EXPECT_EQ(ParseOk(j).quantization.method, "compressed-tensors");
  j["quantization_config"] = json::parse(
      R"({"quant_method": "compressed-tensors", "config_groups": {"g": {"weights": {"type": "int", "num_bits": 4}}}})");
  ExpectError(j, StatusCode::kUnimplemented, "group 'g'");
  j["quantization_config"] = json::parse(R"({"quant_method": "bitsandbytes", "load_in_4bit": true})");
  ExpectError(j, StatusCode::kUnimplemented, "'bitsandbytes'");
  j["quantization_config"] = json::parse(R"({"quant_method": "fp8", "weight_block_size": [128]})");
  ExpectError(j, StatusCode::kInvalidArgument, "weight_block_size");
  j["quantization_config"] = json::parse(R"({"bits": 4})");
  ExpectError(j, StatusCode::kInvalidArgument, "quant_method");
  j["quantization_config"] = "fp8";
  ExpectError(j, StatusCode::kInvalidArgument, "quantization_config");
}

// gptq and awq: bits, group size (-1: one group) and the zero-point convention of GPTQ's two
// checkpoint formats; layouts ferry cannot unpack are refused by name.
TEST(ModelConfigTest, QuantizationConfigGptqAndAwqParseTheirLayouts) {
  json j = LlamaBase();
  j["quantization_config"] = json::parse(
      R"({"quant_method": "gptq", "bits": 4, "group_size": 128, "desc_act": false, "sym": true})");
  ModelConfig c = ParseOk(j);
  EXPECT_EQ(c.quantization.method, "gptq");
  EXPECT_TRUE(c.quantization.packed_int());
  EXPECT_EQ(c.quantization.bits, 4);
  EXPECT_EQ(c.quantization.group_size, 128);
  EXPECT_TRUE(c.quantization.gptq_zeros_minus_one);
  j["quantization_config"] = json::parse(
      R"({"quant_method": "gptq", "bits": 8, "group_size": -1, "checkpoint_format": "gptq_v2"})");
  c = ParseOk(j);
  EXPECT_EQ(c.quantization.bits, 8);
  EXPECT_EQ(c.quantization.group_size, 0);
  EXPECT_FALSE(c.quantization.gptq_zeros_minus_one);
  j["quantization_config"] = json::parse(
      R"({"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": true, "version": "GEMM"})");
  c = ParseOk(j);
  EXPECT_EQ(c.quantization.method, "awq");
  EXPECT_EQ(c.quantization.group_size, 128);
  j["quantization_config"] = json::parse(R"({"quant_method": "awq", "bits": 4, "group_size": 128, "version": "gemv"})");
  ExpectError(j, StatusCode::kUnimplemented, "'gemv'");
  j["quantization_config"] = json::parse(R"({"quant_method": "awq", "bits": 4, "group_size": 64, "zero_point": false})");
  ExpectError(j, StatusCode::kUnimplemented, "zero_point");
  j["quantization_config"] = json::parse(R"({"quant_method": "gptq", "bits": 3, "group_size": 128})");
  ExpectError(j, StatusCode::kUnimplemented, "3-bit");
  j["quantization_config"] = json::parse(R"({"quant_method": "gptq", "bits": 4, "group_size": 128, "checkpoint_format": "marlin"})");
  ExpectError(j, StatusCode::kUnimplemented, "'marlin'");
  j["quantization_config"] = json::parse(R"({"quant_method": "gptq", "bits": 4, "group_size": 0})");
  ExpectError(j, StatusCode::kInvalidArgument, "group_size");
  j["quantization_config"] = json::parse(R"({"quant_method": "awq", "bits": 4})");
  ExpectError(j, StatusCode::kInvalidArgument, "group_size");
}

TEST(ModelConfigTest, DefaultsWhenFieldsAreAbsent) {
  json j = LlamaBase();
  j.erase("num_key_value_heads");
  const ModelConfig c = ParseOk(j);
  EXPECT_EQ(c.num_kv_heads, 8);
  EXPECT_EQ(c.head_dim, 32);
  EXPECT_FLOAT_EQ(c.rope_theta, 10000.0f);
  EXPECT_FLOAT_EQ(c.rms_norm_eps, 1e-6f);
  EXPECT_EQ(c.max_position_embeddings, 2048);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_TRUE(c.bos_token_ids.empty());
  EXPECT_TRUE(c.eos_token_ids.empty());
  EXPECT_EQ(c.torch_dtype, "");
}

TEST(ModelConfigTest, NullFieldsMeanDefault) {
  json j = LlamaBase();
  j["num_key_value_heads"] = nullptr;
  j["head_dim"] = nullptr;
  j["rope_scaling"] = nullptr;
  j["pad_token_id"] = nullptr;
  const ModelConfig c = ParseOk(j);
  EXPECT_EQ(c.num_kv_heads, 8);
  EXPECT_EQ(c.head_dim, 32);
  EXPECT_EQ(c.rope_scaling.type, RopeScaling::Type::kNone);
  EXPECT_FALSE(c.pad_token_id.has_value());
}

TEST(ModelConfigTest, LinearRopeScaling) {
  json j = LlamaBase();
  j["rope_scaling"] = {{"rope_type", "linear"}, {"factor", 4}};
  ModelConfig c = ParseOk(j);
  EXPECT_EQ(c.rope_scaling.type, RopeScaling::Type::kLinear);
  EXPECT_FLOAT_EQ(c.rope_scaling.factor, 4.0f);

  // Older configs spell the key "type".
  j["rope_scaling"] = {{"type", "linear"}, {"factor", 2.5}};
  c = ParseOk(j);
  EXPECT_EQ(c.rope_scaling.type, RopeScaling::Type::kLinear);
  EXPECT_FLOAT_EQ(c.rope_scaling.factor, 2.5f);

  j["rope_scaling"] = {{"rope_type", "default"}};
  EXPECT_EQ(ParseOk(j).rope_scaling.type, RopeScaling::Type::kNone);
}

TEST(ModelConfigTest, RopeScalingErrors) {
  json j = LlamaBase();
  j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4}};
  ExpectError(j, StatusCode::kUnimplemented, "rope scaling type 'yarn'");
  j["rope_scaling"] = {{"type", "dynamic"}, {"factor", 4}};
  ExpectError(j, StatusCode::kUnimplemented, "'dynamic'");
  j["rope_scaling"] = {{"rope_type", "linear"}};
  ExpectError(j, StatusCode::kInvalidArgument, "'rope_scaling.factor'");
  j["rope_scaling"] = {{"rope_type", "linear"}, {"factor", 0}};
  ExpectError(j, StatusCode::kInvalidArgument, "factor");
  j["rope_scaling"] = {{"factor", 4}};
  ExpectError(j, StatusCode::kInvalidArgument, "rope_type");
  j["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8}, {"low_freq_factor", 1}, {"high_freq_factor", 4}};
  ExpectError(j, StatusCode::kInvalidArgument, "'rope_scaling.original_max_position_embeddings'");
  j["rope_scaling"] = {{"rope_type", "llama3"},
                       {"factor", 8},
                       {"low_freq_factor", 4},
                       {"high_freq_factor", 1},
                       {"original_max_position_embeddings", 8192}};
  ExpectError(j, StatusCode::kInvalidArgument, "low_freq_factor");
  j["rope_scaling"] = "linear";
  ExpectError(j, StatusCode::kInvalidArgument, "'rope_scaling'");
}

TEST(ModelConfigTest, RopeParametersFromTransformers5) {
  json j = LlamaBase();
  j.erase("rope_theta");
  j["rope_parameters"] = {{"rope_type", "llama3"},   {"rope_theta", 500000.0},
                          {"factor", 32.0},          {"low_freq_factor", 1.0},
                          {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 8192}};
  // A stale rope_scaling beside rope_parameters loses.
  j["rope_scaling"] = {{"rope_type", "linear"}, {"factor", 2.0}};
  j["rope_theta"] = 10000.0;
  ModelConfig c = ParseOk(j);
  EXPECT_FLOAT_EQ(c.rope_theta, 500000.0f);
  EXPECT_EQ(c.rope_scaling.type, RopeScaling::Type::kLlama3);
  EXPECT_FLOAT_EQ(c.rope_scaling.factor, 32.0f);
  EXPECT_EQ(c.rope_scaling.original_max_position, 8192);

  // The common transformers 5 form: only the type and theta.
  j = LlamaBase();
  j["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 1e6}};
  c = ParseOk(j);
  EXPECT_FLOAT_EQ(c.rope_theta, 1e6f);
  EXPECT_EQ(c.rope_scaling.type, RopeScaling::Type::kNone);

  j["rope_parameters"] = {{"rope_type", "linear"}, {"factor", 2.0}};
  c = ParseOk(j);
  EXPECT_FLOAT_EQ(c.rope_theta, 10000.0f);
  EXPECT_EQ(c.rope_scaling.type, RopeScaling::Type::kLinear);

  j["rope_parameters"] = {{"rope_type", "longrope"}, {"rope_theta", 1e4}};
  ExpectError(j, StatusCode::kInvalidArgument, "short_factor");
  j["rope_parameters"] = {{"rope_type", "yarn"}, {"factor", 4.0}};
  ExpectError(j, StatusCode::kUnimplemented, "'yarn'");
}

TEST(ModelConfigTest, TokenIdsAsIntOrList) {
  json j = LlamaBase();
  j["bos_token_id"] = 128000;
  j["eos_token_id"] = {128001, 128008, 128009};
  j["pad_token_id"] = -1;  // "no pad token" in some configs
  ModelConfig c = ParseOk(j);
  EXPECT_THAT(c.bos_token_ids, ElementsAre(128000));
  EXPECT_THAT(c.eos_token_ids, ElementsAre(128001, 128008, 128009));
  EXPECT_FALSE(c.pad_token_id.has_value());

  j["eos_token_id"] = {1, "two"};
  ExpectError(j, StatusCode::kInvalidArgument, "'eos_token_id'");
  j["eos_token_id"] = -3;
  ExpectError(j, StatusCode::kInvalidArgument, "'eos_token_id'");
}

TEST(ModelConfigTest, MistralSlidingWindow) {
  json j = LlamaBase();
  j["model_type"] = "mistral";
  j["sliding_window"] = 4096;
  j["head_dim"] = 64;  // explicit, and not hidden / heads (256 / 8 = 32)
  ModelConfig c = ParseOk(j);
  EXPECT_EQ(c.sliding_window, 4096);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_FALSE(c.attention_bias);

  j["sliding_window"] = nullptr;
  EXPECT_FALSE(ParseOk(j).sliding_window.has_value());

  j.erase("sliding_window");
  EXPECT_EQ(ParseOk(j).sliding_window, 4096);

  j["sliding_window"] = 0;
  ExpectError(j, StatusCode::kInvalidArgument, "'sliding_window'");
}

TEST(ModelConfigTest, Qwen2WindowOnlyWhenEnabled) {
  json j = LlamaBase();
  j["model_type"] = "qwen2";
  j["sliding_window"] = 32768;
  j["use_sliding_window"] = false;
  ModelConfig c = ParseOk(j);
  EXPECT_FALSE(c.sliding_window.has_value());
  EXPECT_TRUE(c.attention_bias);
  EXPECT_EQ(c.max_position_embeddings, 32768);

  j["use_sliding_window"] = true;
  EXPECT_EQ(ParseOk(j).sliding_window, 32768);
}

TEST(ModelConfigTest, LlamaBiasFlags) {
  json j = LlamaBase();
  j["attention_bias"] = true;
  j["mlp_bias"] = true;
  const ModelConfig c = ParseOk(j);
  EXPECT_TRUE(c.attention_bias);
  EXPECT_TRUE(c.mlp_bias);
}

TEST(ModelConfigTest, DtypeKeyFromTransformers5WinsOverTorchDtype) {
  json j = LlamaBase();
  j["dtype"] = "bfloat16";
  j["torch_dtype"] = "float32";
  EXPECT_EQ(ParseOk(j).torch_dtype, "bfloat16");
}

TEST(ModelConfigTest, ClassifierLabels) {
  json j = {{"model_type", "bert"},    {"architectures", {"BertForSequenceClassification"}},
            {"vocab_size", 100},       {"hidden_size", 32},
            {"intermediate_size", 64}, {"num_hidden_layers", 1},
            {"num_attention_heads", 2}};
  // Transformers leaves the default two labels out of config.json.
  ModelConfig c = ParseOk(j);
  EXPECT_EQ(c.num_labels, 2);
  EXPECT_EQ(c.id2label.at(1), "LABEL_1");
  EXPECT_EQ(c.type_vocab_size, 2);
  EXPECT_EQ(c.max_position_embeddings, 512);

  j["num_labels"] = 5;
  EXPECT_EQ(ParseOk(j).num_labels, 5);

  j["id2label"] = {{"1", "POSITIVE"}, {"0", "NEGATIVE"}};
  c = ParseOk(j);
  EXPECT_EQ(c.num_labels, 2);
  EXPECT_EQ(c.id2label, (std::map<int, std::string>{{0, "NEGATIVE"}, {1, "POSITIVE"}}));

  j["id2label"] = {{"0", "A"}, {"x", "B"}};
  ExpectError(j, StatusCode::kInvalidArgument, "'x'");
  j["id2label"] = {{"0", "A"}, {"2", "C"}};
  ExpectError(j, StatusCode::kInvalidArgument, "id2label");
  j["id2label"] = {{"0", 7}};
  ExpectError(j, StatusCode::kInvalidArgument, "id2label");

  j.erase("id2label");
  j.erase("num_labels");
  j["architectures"] = {"BertModel"};
  EXPECT_EQ(ParseOk(j).num_labels, 0);

  j["position_embedding_type"] = "relative_key";
  ExpectError(j, StatusCode::kUnimplemented, "relative_key");
}

TEST(ModelConfigTest, UnsupportedArchitecture) {
  json j = LlamaBase();
  j["model_type"] = "gpt_neox";
  Result<ModelConfig> c = Parse(j);
  EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(c.status().message(),
            "unsupported architecture 'gpt_neox' (supported: llama, mistral, qwen2, qwen3, gemma2, phi3, bert, "
            "roberta, xlm-roberta, modernbert)");
  j["model_type"] = "gemma3";
  ExpectError(j, StatusCode::kUnimplemented, "'gemma3' is not implemented yet");
}

json ModernBertBase() {
  return json{{"model_type", "modernbert"},
              {"architectures", {"ModernBertForSequenceClassification"}},
              {"vocab_size", 100},
              {"hidden_size", 64},
              {"intermediate_size", 96},
              {"num_hidden_layers", 7},
              {"num_attention_heads", 4},
              {"id2label", {{"0", "NEG"}, {"1", "POS"}}}};
}

// ModernBERT's global/local layers, two thetas and defaults (transformers' ModernBertConfig).
TEST(ModelConfigTest, ModernBertLayersWindowsAndThetas) {
  json j = ModernBertBase();
  j["global_attn_every_n_layers"] = 3;
  j["local_attention"] = 8;
  j["global_rope_theta"] = 160000.0;
  j["local_rope_theta"] = 10000.0;
  j["classifier_pooling"] = "mean";
  ModelConfig c = ParseOk(j);
  EXPECT_EQ(c.family, ModelFamily::kEncoder);
  EXPECT_EQ(c.head_dim, 16);
  EXPECT_EQ(c.num_kv_heads, 4);
  EXPECT_EQ(c.type_vocab_size, 0);
  EXPECT_EQ(c.position_offset, 0);
  EXPECT_EQ(c.num_labels, 2);
  EXPECT_THAT(c.layer_windows, ElementsAre(0, 4, 4, 0, 4, 4, 0));
  EXPECT_THAT(c.layer_rope_thetas, ElementsAre(160000.0f, 10000.0f, 10000.0f, 160000.0f, 10000.0f, 10000.0f, 160000.0f));
  EXPECT_EQ(c.classifier_pooling, "mean");
  EXPECT_FALSE(c.norm_bias);
  EXPECT_FALSE(c.attention_bias);
  EXPECT_FALSE(c.mlp_bias);

  // Defaults: every 3rd layer global, window 128, thetas 160000 / 10000, cls pooling, gelu,
  // norm_eps 1e-5, 8192 positions.
  c = ParseOk(ModernBertBase());
  EXPECT_THAT(c.layer_windows, ElementsAre(0, 64, 64, 0, 64, 64, 0));
  EXPECT_FLOAT_EQ(c.layer_rope_thetas[1], 10000.0f);
  EXPECT_FLOAT_EQ(c.rope_theta, 160000.0f);
  EXPECT_EQ(c.classifier_pooling, "cls");
  EXPECT_EQ(c.hidden_act, "gelu");
  EXPECT_EQ(c.classifier_activation, "gelu");
  EXPECT_FLOAT_EQ(c.layer_norm_eps, 1e-5f);
  EXPECT_EQ(c.max_position_embeddings, 8192);

  // transformers 5: layer_types and rope_parameters per layer type win.
  j = ModernBertBase();
  j["num_hidden_layers"] = 3;
  j["layer_types"] = {"sliding_attention", "full_attention", "sliding_attention"};
  j["local_attention"] = 16;
  j["rope_parameters"] = {{"full_attention", {{"rope_type", "default"}, {"rope_theta", 80000.0}}},
                          {"sliding_attention", {{"rope_type", "default"}, {"rope_theta", 5000.0}}}};
  c = ParseOk(j);
  EXPECT_THAT(c.layer_windows, ElementsAre(8, 0, 8));
  EXPECT_THAT(c.layer_rope_thetas, ElementsAre(5000.0f, 80000.0f, 5000.0f));
  j["norm_bias"] = true;
  j["attention_bias"] = true;
  c = ParseOk(j);
  EXPECT_TRUE(c.norm_bias);
  EXPECT_TRUE(c.attention_bias);
}

TEST(ModelConfigTest, ModernBertErrors) {
  json j = ModernBertBase();
  j["classifier_pooling"] = "max";
  ExpectError(j, StatusCode::kInvalidArgument, "classifier_pooling");
  j = ModernBertBase();
  j["global_attn_every_n_layers"] = 0;
  ExpectError(j, StatusCode::kInvalidArgument, "global_attn_every_n_layers");
  j = ModernBertBase();
  j["local_attention"] = 1;
  ExpectError(j, StatusCode::kInvalidArgument, "local_attention");
  j = ModernBertBase();
  j["layer_types"] = {"full_attention"};
  ExpectError(j, StatusCode::kInvalidArgument, "layer_types");
  j = ModernBertBase();
  j["layer_types"] = json::array();
  for (int l = 0; l < 7; ++l) j["layer_types"].push_back(l == 3 ? "chunked_attention" : "full_attention");
  ExpectError(j, StatusCode::kInvalidArgument, "chunked_attention");
  j = ModernBertBase();
  j["rope_parameters"] = {{"sliding_attention", {{"rope_type", "yarn"}, {"rope_theta", 5000.0}}}};
  ExpectError(j, StatusCode::kUnimplemented, "yarn");
  j = ModernBertBase();
  j["norm_eps"] = 0;
  ExpectError(j, StatusCode::kInvalidArgument, "norm_eps");
}

TEST(ModelConfigTest, XlmRobertaOffsetsPositions) {
  json j = {{"model_type", "xlm-roberta"}, {"architectures", {"XLMRobertaForSequenceClassification"}},
            {"vocab_size", 250002}, {"hidden_size", 64}, {"intermediate_size", 128}, {"num_hidden_layers", 2},
            {"num_attention_heads", 4}, {"max_position_embeddings", 514}, {"pad_token_id", 1},
            {"type_vocab_size", 1}, {"layer_norm_eps", 1e-5}, {"id2label", {{"0", "LABEL_0"}}}};
  ModelConfig c = ParseOk(j);
  EXPECT_EQ(c.family, ModelFamily::kEncoder);
  EXPECT_EQ(c.position_offset, 2);
  EXPECT_EQ(c.max_position_embeddings, 512);  // usable tokens; the table keeps its 514 rows
  EXPECT_EQ(c.type_vocab_size, 1);
  EXPECT_EQ(c.num_labels, 1);
  j["model_type"] = "bert";
  EXPECT_EQ(ParseOk(j).position_offset, 0);
  j["model_type"] = "roberta";
  j["max_position_embeddings"] = 2;
  ExpectError(j, StatusCode::kInvalidArgument, "padding_idx");
}

TEST(ModelConfigTest, Qwen3HasHeadNormsAndItsOwnHeadDim) {
  json j = LlamaBase();
  j["model_type"] = "qwen3";
  j["head_dim"] = 128;
  ModelConfig c = ParseOk(j);
  EXPECT_TRUE(c.qk_norm);
  EXPECT_FALSE(c.attention_bias);
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_THAT(c.layer_windows, ElementsAre(0, 0));
  j["use_sliding_window"] = true;
  j["sliding_window"] = 64;
  j["max_window_layers"] = 1;
  EXPECT_THAT(ParseOk(j).layer_windows, ElementsAre(0, 64));
}

TEST(ModelConfigTest, Gemma2AlternatesWindowsAndCapsLogits) {
  json j = LlamaBase();
  j["model_type"] = "gemma2";
  j["num_hidden_layers"] = 4;
  j["head_dim"] = 256;
  j["hidden_activation"] = "gelu_pytorch_tanh";
  j["query_pre_attn_scalar"] = 144;
  j["sliding_window"] = 4096;
  j["attn_logit_softcapping"] = 50.0;
  j["final_logit_softcapping"] = 30.0;
  ModelConfig c = ParseOk(j);
  EXPECT_TRUE(c.gemma_norms);
  EXPECT_TRUE(c.tie_word_embeddings);  // Gemma's default
  EXPECT_EQ(c.hidden_act, "gelu_pytorch_tanh");
  EXPECT_FLOAT_EQ(c.attention_scale, 1.0f / 12.0f);
  EXPECT_FLOAT_EQ(c.attn_logit_softcap, 50.0f);
  EXPECT_FLOAT_EQ(c.final_logit_softcap, 30.0f);
  EXPECT_THAT(c.layer_windows, ElementsAre(4096, 0, 4096, 0));  // even layers slide
  // transformers 5 writes layer_types; it wins.
  j["layer_types"] = {"full_attention", "sliding_attention", "full_attention", "full_attention"};
  EXPECT_THAT(ParseOk(j).layer_windows, ElementsAre(0, 4096, 0, 0));
  j["layer_types"] = {"full_attention"};
  ExpectError(j, StatusCode::kInvalidArgument, "layer_types");
  j["layer_types"] = {"full_attention", "chunked_attention", "full_attention", "full_attention"};
  ExpectError(j, StatusCode::kUnimplemented, "chunked_attention");
}

TEST(ModelConfigTest, MistralWindowAppliesToEveryLayer) {
  json j = LlamaBase();
  j["model_type"] = "mistral";
  j["sliding_window"] = 8;
  EXPECT_THAT(ParseOk(j).layer_windows, ElementsAre(8, 8));
}

TEST(ModelConfigTest, Phi3LongRope) {
  json j = LlamaBase();  // hidden 256 / 8 heads: head_dim 32, 16 factors
  j["model_type"] = "phi3";
  j["max_position_embeddings"] = 131072;
  j["original_max_position_embeddings"] = 4096;
  std::vector<double> s(16, 1.0), l(16, 2.0);
  j["rope_scaling"] = {{"type", "longrope"}, {"short_factor", s}, {"long_factor", l}};
  ModelConfig c = ParseOk(j);
  EXPECT_TRUE(c.fused_checkpoint_projections);
  EXPECT_EQ(c.rope_scaling.type, RopeScaling::Type::kLongRope);
  EXPECT_EQ(c.rope_scaling.original_max_position, 4096);
  EXPECT_FLOAT_EQ(c.rope_scaling.factor, 32.0f);
  EXPECT_NEAR(c.rope_scaling.attention_factor, std::sqrt(1.0 + std::log(32.0) / std::log(4096.0)), 1e-6);
  j["rope_scaling"]["attention_factor"] = 1.5;
  EXPECT_FLOAT_EQ(ParseOk(j).rope_scaling.attention_factor, 1.5f);
  j["rope_scaling"]["short_factor"] = std::vector<double>(15, 1.0);
  ExpectError(j, StatusCode::kInvalidArgument, "head_dim / 2 = 16");
  j["rope_scaling"] = {{"type", "su"}, {"short_factor", s}, {"long_factor", l}};
  EXPECT_EQ(ParseOk(j).rope_scaling.type, RopeScaling::Type::kLongRope);  // Phi-3's first name for it
  j.erase("original_max_position_embeddings");
  ExpectError(j, StatusCode::kInvalidArgument, "original_max_position_embeddings");
}

TEST(ModelConfigTest, MissingRequiredField) {
  for (const char* field :
       {"model_type", "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads"}) {
    json j = LlamaBase();
    j.erase(field);
    ExpectError(j, StatusCode::kInvalidArgument, std::string("missing required field '") + field + "'");
  }
}

TEST(ModelConfigTest, WrongFieldTypes) {
  json j = LlamaBase();
  j["hidden_size"] = "256";
  ExpectError(j, StatusCode::kInvalidArgument, "'hidden_size' must be an integer");
  j = LlamaBase();
  j["hidden_size"] = 256.5;
  ExpectError(j, StatusCode::kInvalidArgument, "'hidden_size'");
  j = LlamaBase();
  j["hidden_size"] = 256.0;  // integral floats are accepted
  EXPECT_EQ(ParseOk(j).hidden_size, 256);
  j = LlamaBase();
  j["tie_word_embeddings"] = "yes";
  ExpectError(j, StatusCode::kInvalidArgument, "'tie_word_embeddings'");
  j = LlamaBase();
  j["rope_theta"] = "1e4";
  ExpectError(j, StatusCode::kInvalidArgument, "'rope_theta'");
  j = LlamaBase();
  j["num_hidden_layers"] = 1ll << 40;
  ExpectError(j, StatusCode::kInvalidArgument, "'num_hidden_layers' is out of range");
  j = LlamaBase();
  j["architectures"] = {3};
  ExpectError(j, StatusCode::kInvalidArgument, "'architectures'");
}

TEST(ModelConfigTest, InconsistentSizes) {
  json j = LlamaBase();
  j["num_attention_heads"] = 6;  // 256 % 6 != 0
  j["num_key_value_heads"] = 6;
  ExpectError(j, StatusCode::kInvalidArgument, "divisible by 'num_attention_heads'");
  j = LlamaBase();
  j["num_key_value_heads"] = 3;
  ExpectError(j, StatusCode::kInvalidArgument, "divisible by 'num_key_value_heads'");
  j = LlamaBase();
  j["num_hidden_layers"] = 0;
  ExpectError(j, StatusCode::kInvalidArgument, "'num_hidden_layers' must be positive");
  j = LlamaBase();
  j["vocab_size"] = -5;
  ExpectError(j, StatusCode::kInvalidArgument, "'vocab_size' must be positive");
  j = LlamaBase();
  j["head_dim"] = 33;
  ExpectError(j, StatusCode::kInvalidArgument, "even");
  j = LlamaBase();
  j["rms_norm_eps"] = 0;
  ExpectError(j, StatusCode::kInvalidArgument, "'rms_norm_eps'");
  j = LlamaBase();
  j["rope_theta"] = -1;
  ExpectError(j, StatusCode::kInvalidArgument, "'rope_theta'");
}

TEST(ModelConfigTest, NotJsonOrNotAnObject) {
  EXPECT_EQ(ParseModelConfig("{\"model_type\": \"llama\",").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseModelConfig("").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseModelConfig("[1, 2]").status().code(), StatusCode::kInvalidArgument);
}

TEST(ModelConfigTest, DeeplyNestedValuesAreRefusedBeforeParsing) {
  json config = LlamaBase();
  std::string text = config.dump();
  text.insert(text.size() - 1, ", \"rope_scaling\": " + std::string(100000, '[') + std::string(100000, ']'));
  Result<ModelConfig> c = ParseModelConfig(text);
  EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(c.status().message(), HasSubstr("nested deeper than"));
}

TEST(ModelConfigTest, ErrorsQuoteOnlyTheHeadOfALargeValue) {
  json config = LlamaBase();
  config["hidden_size"] = json::array();
  for (int i = 0; i < 100000; ++i) config["hidden_size"].push_back(i);
  Result<ModelConfig> c = ParseModelConfig(config.dump());
  EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(c.status().message(), HasSubstr("hidden_size"));
  EXPECT_LT(c.status().message().size(), 200u);
}

TEST(LoadModelConfigTest, CorruptConfigJsonNamesTheFile) {
  TempDir tmp;
  tmp.Write("config.json", "{\"model_type\": \"llama\", \"hidden_size\": 6");
  Result<ModelConfig> c = LoadModelConfig(tmp.path());
  EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(c.status().message(), HasSubstr(tmp.File("config.json")));
  EXPECT_THAT(c.status().message(), HasSubstr("not valid JSON"));
}

TEST(LoadModelConfigTest, MissingConfigIsNotFound) {
  TempDir tmp;
  EXPECT_EQ(LoadModelConfig(tmp.path()).status().code(), StatusCode::kNotFound);
}

TEST(LoadModelConfigTest, GenerationConfigEosTakesPrecedence) {
  TempDir tmp;
  json config = LlamaBase();
  config["eos_token_id"] = 128001;
  tmp.Write("config.json", config.dump());
  tmp.Write("generation_config.json", R"({"bos_token_id": 128000, "eos_token_id": [128001, 128009]})");
  Result<ModelConfig> c = LoadModelConfig(tmp.path());
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_THAT(c->eos_token_ids, ElementsAre(128001, 128009));
  EXPECT_THAT(c->bos_token_ids, ElementsAre(128000));  // filled in: config.json had none

  tmp.Write("generation_config.json", R"({"do_sample": true})");
  c = LoadModelConfig(tmp.path());
  ASSERT_TRUE(c.ok());
  EXPECT_THAT(c->eos_token_ids, ElementsAre(128001));

  tmp.Write("generation_config.json", "{oops");
  c = LoadModelConfig(tmp.path());
  EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(c.status().message(), HasSubstr("generation_config.json"));
}

}  // namespace
}  // namespace ferry::io
