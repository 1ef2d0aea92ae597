#include "serve/config.h"

#include "serve/config_env.h"
#include "sched/step_time_model.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <yaml-cpp/yaml.h>

#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <initializer_list>
#include <limits>
#include <optional>
#include <set>
#include <sstream>
#include <utility>

#include "serve/config_yaml.h"
#include "serve/qos_config.h"
#include "serve/repository_config.h"
#include "serve/queue_config.h"

namespace ferry::serve {

namespace {

using namespace config_yaml;  // NOLINT(google-build-using-namespace): the file is its client

// ---- Sections --------------------------------------------------------------------------

Status ParseListener(const YAML::Node& node, ListenerConfig& out) {
  FERRY_ASSIGN_OR_RETURN(const MapReader m,
                         MapReader::Open(node, "listener",
                                         {"host", "port", "io_threads", "output_threads", "request_threads", "max_body_bytes", "max_header_bytes", "header_timeout_ms",
                                          "idle_timeout_ms", "shutdown_timeout_ms", "max_connections", "tls"}));
  FERRY_RETURN_IF_ERROR(m.String("host", out.host));
  FERRY_RETURN_IF_ERROR(m.Int("port", out.port));
  FERRY_RETURN_IF_ERROR(m.Int("io_threads", out.io_threads));
  FERRY_RETURN_IF_ERROR(m.Int("output_threads", out.output_threads));
  FERRY_RETURN_IF_ERROR(m.Int("request_threads", out.request_threads));
  FERRY_RETURN_IF_ERROR(m.Int("max_body_bytes", out.max_body_bytes));
  FERRY_RETURN_IF_ERROR(m.Int("max_header_bytes", out.max_header_bytes));
  FERRY_RETURN_IF_ERROR(m.Int("header_timeout_ms", out.header_timeout_ms));
  FERRY_RETURN_IF_ERROR(m.Int("idle_timeout_ms", out.idle_timeout_ms));
  FERRY_RETURN_IF_ERROR(m.Int("shutdown_timeout_ms", out.shutdown_timeout_ms));
  FERRY_RETURN_IF_ERROR(m.Int("max_connections", out.max_connections));
  if (const YAML::Node* tls = m.Find("tls")) {
    FERRY_ASSIGN_OR_RETURN(const MapReader t, MapReader::Open(*tls, "listener.tls", {"cert", "key", "min_version"}));
    FERRY_RETURN_IF_ERROR(t.Require("cert"));
    FERRY_RETURN_IF_ERROR(t.Require("key"));
    FERRY_RETURN_IF_ERROR(t.String("cert", out.tls.cert_path));
    FERRY_RETURN_IF_ERROR(t.String("key", out.tls.key_path));
    FERRY_RETURN_IF_ERROR(t.String("min_version", out.tls.min_version));
    if (out.tls.min_version != "1.2" && out.tls.min_version != "1.3") {
      return InvalidArgument("listener.tls.min_version: must be 1.2 or 1.3, got '" + out.tls.min_version + "'");
    }
  }
  return Status::Ok();
}

Status ParseAuth(const YAML::Node& node, AuthConfig& out) {
  FERRY_ASSIGN_OR_RETURN(const MapReader m,
                         MapReader::Open(node, "auth", {"mode", "admin_keys", "admin_key_env", "metrics_require_key",
                                                        "allowed_hosts"}));
  if (const YAML::Node* mode = m.Find("mode")) {
    FERRY_ASSIGN_OR_RETURN(out.mode, ReadEnum<AuthMode>(*mode, m.Path("mode"),
                                                        {{"keys", AuthMode::kKeys}, {"none", AuthMode::kNone}}));
  }
  FERRY_RETURN_IF_ERROR(m.AppendStrings("admin_keys", out.admin_keys));
  FERRY_RETURN_IF_ERROR(m.AppendEnv("admin_key_env", out.admin_keys));
  FERRY_RETURN_IF_ERROR(m.Bool("metrics_require_key", out.metrics_require_key));
  FERRY_RETURN_IF_ERROR(m.AppendStrings("allowed_hosts", out.allowed_hosts));
  return Status::Ok();
}

// Each tier is a priority, or {priority, min_variant, slo} (the QoS rule of the tier).
Status ParseTiers(const YAML::Node& node, std::map<std::string, int>& out,
                  std::map<std::string, qos::TierRule>& rules) {
  FERRY_ASSIGN_OR_RETURN(const std::vector<Entry> entries, ReadEntries(node, "tiers"));
  out.clear();
  rules.clear();
  for (const Entry& entry : entries) {
    std::optional<qos::TierRule> rule;
    FERRY_RETURN_IF_ERROR(ParseTier(entry.value, "tiers." + entry.key, out[entry.key], rule));
    if (rule) rules[entry.key] = std::move(*rule);
  }
  return Status::Ok();
}

Status ParseTenant(const YAML::Node& node, const std::string& path, TenantConfig& out) {
  FERRY_ASSIGN_OR_RETURN(const MapReader m,
                         MapReader::Open(node, path, {"name", "tier", "keys", "key_env", "max_concurrent_requests",
                                                      "requests_per_minute", "tokens_per_minute"}));
  FERRY_RETURN_IF_ERROR(m.Require("name"));
  FERRY_RETURN_IF_ERROR(m.String("name", out.name));
  FERRY_RETURN_IF_ERROR(m.String("tier", out.tier));
  FERRY_RETURN_IF_ERROR(m.AppendStrings("keys", out.keys));
  FERRY_RETURN_IF_ERROR(m.AppendEnv("key_env", out.keys));
  FERRY_RETURN_IF_ERROR(m.Int("max_concurrent_requests", out.max_concurrent_requests));
  FERRY_RETURN_IF_ERROR(m.Int("requests_per_minute", out.requests_per_minute));
  FERRY_RETURN_IF_ERROR(m.Int("tokens_per_minute", out.tokens_per_minute));
  return Status::Ok();
}

Status ParseContinuousBatching(const YAML::Node& node, const std::string& path,
                               sched::ContinuousBatchingOptions& out) {
  FERRY_ASSIGN_OR_RETURN(const MapReader m,
                         MapReader::Open(node, path,
                                         {"max_num_seqs", "max_num_batched_tokens", "max_seq_len", "kv_block_tokens",
                                          "max_queue_requests", "max_queue_tokens", "default_timeout_ms",
                                          "enable_prefix_caching", "max_queue_time_ms", "admit_wait_fraction",
                                          "max_step_ms", "max_step_factor", "async_scheduling"}));
  FERRY_RETURN_IF_ERROR(m.Int("max_num_seqs", out.max_num_seqs));
  if (const YAML::Node* step = m.Find("max_step_ms")) {
    // auto | off | milliseconds
    const std::string text = step->IsScalar() ? step->Scalar() : std::string();
    if (text == "auto") {
      out.max_step_ms = sched::kMaxStepAuto;
    } else if (text == "off") {
      out.max_step_ms = sched::kMaxStepOff;
    } else {
      FERRY_ASSIGN_OR_RETURN(out.max_step_ms, ReadInt<int>(*step, m.Path("max_step_ms")));
      if (out.max_step_ms < 0) {
        return ErrorAt(*step, m.Path("max_step_ms"), "must be auto, off, 0 (off) or a positive number of milliseconds");
      }
    }
  }
  FERRY_RETURN_IF_ERROR(m.Int("max_num_batched_tokens", out.max_num_batched_tokens));
  FERRY_RETURN_IF_ERROR(m.Int("max_seq_len", out.max_seq_len));
  FERRY_RETURN_IF_ERROR(m.Int("kv_block_tokens", out.kv_block_tokens));
  FERRY_RETURN_IF_ERROR(m.Int("max_queue_requests", out.max_queue_requests));
  FERRY_RETURN_IF_ERROR(m.Int("max_queue_tokens", out.max_queue_tokens));
  FERRY_RETURN_IF_ERROR(m.Int("default_timeout_ms", out.default_timeout_ms));
  FERRY_RETURN_IF_ERROR(m.Bool("enable_prefix_caching", out.enable_prefix_caching));
  FERRY_RETURN_IF_ERROR(m.Int("max_queue_time_ms", out.max_queue_time_ms));
  FERRY_RETURN_IF_ERROR(m.Number("admit_wait_fraction", out.admit_wait_fraction));
  FERRY_RETURN_IF_ERROR(m.Number("max_step_factor", out.max_step_factor));
  if (const YAML::Node* async = m.Find("async_scheduling")) {
    FERRY_ASSIGN_OR_RETURN(out.async_scheduling,
                           ReadEnum<sched::AsyncScheduling>(*async, m.Path("async_scheduling"),
                                                            {{"auto", sched::AsyncScheduling::kAuto},
                                                             {"on", sched::AsyncScheduling::kOn},
                                                             {"off", sched::AsyncScheduling::kOff}}));
  }
  return Status::Ok();
}

// Fields not given keep the values `out` starts with.
Status ParseQueuePolicy(const YAML::Node& node, const std::string& path, sched::QueuePolicy& out) {
  FERRY_ASSIGN_OR_RETURN(
      const MapReader m,
      MapReader::Open(node, path, {"timeout_us", "timeout_action", "allow_timeout_override", "max_queue_size"}));
  FERRY_RETURN_IF_ERROR(m.Int("timeout_us", out.timeout_us));
  if (const YAML::Node* action = m.Find("timeout_action")) {
    FERRY_ASSIGN_OR_RETURN(out.timeout_action,
                           ReadEnum<sched::TimeoutAction>(*action, m.Path("timeout_action"),
                                                          {{"reject", sched::TimeoutAction::kReject},
                                                           {"delay", sched::TimeoutAction::kDelay}}));
  }
  FERRY_RETURN_IF_ERROR(m.Bool("allow_timeout_override", out.allow_timeout_override));
  FERRY_RETURN_IF_ERROR(m.Int("max_queue_size", out.max_queue_size));
  return Status::Ok();
}

Status ParseDynamicBatching(const YAML::Node& node, const std::string& path, sched::DynamicBatchingOptions& out) {
  FERRY_ASSIGN_OR_RETURN(const MapReader m,
                         MapReader::Open(node, path,
                                         {"max_batch_size", "max_queue_delay_us", "preferred_batch_sizes",
                                          "priority_levels", "default_priority_level", "default_queue_policy",
                                          "priority_queue_policy"}));
  FERRY_RETURN_IF_ERROR(m.Int("max_batch_size", out.max_batch_size));
  FERRY_RETURN_IF_ERROR(m.Int("max_queue_delay_us", out.max_queue_delay_us));
  if (const YAML::Node* sizes = m.Find("preferred_batch_sizes")) {
    FERRY_ASSIGN_OR_RETURN(const auto items, ReadItems(*sizes, m.Path("preferred_batch_sizes")));
    out.preferred_batch_sizes.clear();
    for (const auto& [item_path, item] : items) {
      FERRY_ASSIGN_OR_RETURN(const int size, ReadInt<int>(item, item_path));
      out.preferred_batch_sizes.push_back(size);
    }
  }
  FERRY_RETURN_IF_ERROR(m.Int("priority_levels", out.priority_levels));
  FERRY_RETURN_IF_ERROR(m.Int("default_priority_level", out.default_priority_level));
  if (const YAML::Node* policy = m.Find("default_queue_policy")) {
    FERRY_RETURN_IF_ERROR(ParseQueuePolicy(*policy, m.Path("default_queue_policy"), out.default_queue_policy));
  }
  // A level's policy starts from the default policy, so it only spells what differs.
  if (const YAML::Node* levels = m.Find("priority_queue_policy")) {
    const std::string levels_path = m.Path("priority_queue_policy");
    FERRY_ASSIGN_OR_RETURN(const std::vector<Entry> entries, ReadEntries(*levels, levels_path));
    out.priority_queue_policy.clear();
    for (const Entry& entry : entries) {
      const std::string entry_path = levels_path + "." + entry.key;
      FERRY_ASSIGN_OR_RETURN(const int level, ReadInt<int>(entry.key_node, entry_path));
      if (out.priority_queue_policy.count(level) != 0) return ErrorAt(entry.key_node, entry_path, "duplicate level");
      sched::QueuePolicy policy = out.default_queue_policy;
      FERRY_RETURN_IF_ERROR(ParseQueuePolicy(entry.value, entry_path, policy));
      out.priority_queue_policy.emplace(level, policy);
    }
  }
  return Status::Ok();
}

Status ParseLongInputs(const YAML::Node& node, const std::string& path, chunk::LongInputOptions& out) {
  FERRY_ASSIGN_OR_RETURN(const MapReader m,
                         MapReader::Open(node, path,
                                         {"truncation", "chunk_tokens", "chunk_overlap", "classify_aggregate",
                                          "embeddings_aggregate", "token_aggregation", "token_merge",
                                          "max_input_tokens", "max_inputs"}));
  // Each enum from the parser chunk/ gives its names to, so the two never disagree.
  auto choice = [&m](const char* key, auto parse, auto& value) -> Status {
    const YAML::Node* node = m.Find(key);
    if (node == nullptr) return Status::Ok();
    FERRY_ASSIGN_OR_RETURN(const std::string name, ReadString(*node, m.Path(key)));
    const auto parsed = parse(name);
    if (!parsed) return ErrorAt(*node, m.Path(key), "unknown value " + Quoted(name));
    value = *parsed;
    return Status::Ok();
  };
  FERRY_RETURN_IF_ERROR(choice("truncation", chunk::ParseTruncation, out.truncation));
  FERRY_RETURN_IF_ERROR(m.Int("chunk_tokens", out.chunk_tokens));
  FERRY_RETURN_IF_ERROR(m.Int("chunk_overlap", out.chunk_overlap));
  FERRY_RETURN_IF_ERROR(choice("classify_aggregate", chunk::ParseClassifyAggregate, out.classify_aggregate));
  FERRY_RETURN_IF_ERROR(choice("embeddings_aggregate", chunk::ParseEmbedAggregate, out.embeddings_aggregate));
  FERRY_RETURN_IF_ERROR(choice("token_aggregation", chunk::ParseTokenAggregation, out.token_aggregation));
  FERRY_RETURN_IF_ERROR(choice("token_merge", chunk::ParseTokenMerge, out.token_merge));
  FERRY_RETURN_IF_ERROR(m.Int("max_input_tokens", out.max_input_tokens));
  FERRY_RETURN_IF_ERROR(m.Int("max_inputs", out.max_inputs));
  return Status::Ok();
}

}  // namespace

// The serving options of a model, which a variant may override (also used by qos_config.cc).
const std::vector<std::string_view>& ModelOptionKeys() {
  // Every one of them may differ between the variants of a group: each variant is its own
  // engine (its GPU memory share, its checkpoint's chat template and tool-call format).
  static const std::vector<std::string_view> keys = {
      "threads",     "device",  "activations", "kv_cache_dtype", "enforce_eager",  "batching",
      "dynamic_batching", "warmup", "long_inputs", "pooling", "normalize", "chat_template",
      "tool_call_parser", "gpu_memory_utilization", "map_weights",
      "host_memory_budget_bytes", "cpu_activations"};
  return keys;
}

Status ParseModelOptions(const MapReader& m, ModelConfig& out) {
  FERRY_RETURN_IF_ERROR(m.Int("threads", out.threads));
  FERRY_RETURN_IF_ERROR(m.Bool("map_weights", out.map_weights));
  if (m.Find("device") != nullptr) {
    std::string device;
    FERRY_RETURN_IF_ERROR(m.String("device", device));
    auto parsed = ParseDevice(device);
    if (!parsed.ok()) return InvalidArgument(m.Path("device") + ": must be cpu, cuda or cuda:N, got '" + device + "'");
    out.device = *parsed;
  }
  if (const YAML::Node* act = m.Find("activations")) {
    FERRY_ASSIGN_OR_RETURN(out.activations, ReadEnum<DType>(*act, m.Path("activations"),
                                                             {{"bf16", DType::kBF16},
                                                              {"f16", DType::kF16},
                                                              {"f32", DType::kF32}}));
  }
  if (const YAML::Node* act = m.Find("cpu_activations")) {
    FERRY_ASSIGN_OR_RETURN(out.cpu_activations, ReadEnum<DType>(*act, m.Path("cpu_activations"),
                                                                 {{"f32", DType::kF32}, {"bf16", DType::kBF16}}));
  }
  if (const YAML::Node* kv = m.Find("kv_cache_dtype")) {
    FERRY_ASSIGN_OR_RETURN(out.kv_cache_dtype, ReadEnum<std::optional<DType>>(*kv, m.Path("kv_cache_dtype"),
                                                                              {{"auto", std::nullopt},
                                                                               {"bf16", DType::kBF16},
                                                                               {"f16", DType::kF16},
                                                                               {"f32", DType::kF32},
                                                                               {"fp8", DType::kF8E4M3}}));
  }
  FERRY_RETURN_IF_ERROR(m.Bool("enforce_eager", out.enforce_eager));
  if (const YAML::Node* batching = m.Find("batching")) {
    FERRY_RETURN_IF_ERROR(ParseContinuousBatching(*batching, m.Path("batching"), out.batching));
  }
  if (const YAML::Node* dynamic = m.Find("dynamic_batching")) {
    FERRY_RETURN_IF_ERROR(ParseDynamicBatching(*dynamic, m.Path("dynamic_batching"), out.dynamic_batching));
  }
  if (const YAML::Node* warmup = m.Find("warmup")) {
    // true / false, or what to run: auto (true), full, minimal.
    if (warmup->IsScalar() && (warmup->Scalar() == "auto" || warmup->Scalar() == "full" ||
                               warmup->Scalar() == "minimal")) {
      out.warmup = true;
      out.warmup_mode = warmup->Scalar() == "full"      ? ModelConfig::WarmupMode::kFull
                        : warmup->Scalar() == "minimal" ? ModelConfig::WarmupMode::kMinimal
                                                        : ModelConfig::WarmupMode::kAuto;
    } else {
      FERRY_RETURN_IF_ERROR(m.Bool("warmup", out.warmup));
    }
  }
  FERRY_RETURN_IF_ERROR(m.String("chat_template", out.chat_template));
  FERRY_RETURN_IF_ERROR(m.Number("gpu_memory_utilization", out.gpu_memory_utilization));
  FERRY_RETURN_IF_ERROR(m.Int("host_memory_budget_bytes", out.host_memory_budget_bytes));
  if (out.host_memory_budget_bytes < 0) {
    return InvalidArgument(m.Path("host_memory_budget_bytes") + ": must be at least 0");
  }
  if (const YAML::Node* parser = m.Find("tool_call_parser")) {
    FERRY_ASSIGN_OR_RETURN(out.tool_call_parser, ReadEnum<ToolCallParser>(*parser, m.Path("tool_call_parser"),
                                                                          {{"auto", ToolCallParser::kAuto},
                                                                           {"none", ToolCallParser::kNone},
                                                                           {"hermes", ToolCallParser::kHermes},
                                                                           {"llama3_json", ToolCallParser::kLlama3Json},
                                                                           {"mistral", ToolCallParser::kMistral}}));
  }
  if (const YAML::Node* long_inputs = m.Find("long_inputs")) {
    FERRY_RETURN_IF_ERROR(ParseLongInputs(*long_inputs, m.Path("long_inputs"), out.long_inputs));
  }
  if (const YAML::Node* pooling = m.Find("pooling")) {
    FERRY_ASSIGN_OR_RETURN(out.pooling, ReadEnum<std::optional<io::PoolingMode>>(
                                            *pooling, m.Path("pooling"),
                                            {{"cls", io::PoolingMode::kCls},
                                             {"mean", io::PoolingMode::kMean},
                                             {"max", io::PoolingMode::kMax},
                                             {"last", io::PoolingMode::kLastToken}}));
  }
  if (m.Find("normalize") != nullptr) {
    bool normalize = true;
    FERRY_RETURN_IF_ERROR(m.Bool("normalize", normalize));
    out.normalize = normalize;
  }
  return Status::Ok();
}

namespace {

Status ParseApi(const YAML::Node& node, ApiConfig& out) {
  FERRY_ASSIGN_OR_RETURN(const MapReader m,
                         MapReader::Open(node, "api", {"unknown_fields", "chat_special_tokens", "max_choices",
                                                       "max_logprobs"}));
  if (const YAML::Node* unknown = m.Find("unknown_fields")) {
    FERRY_ASSIGN_OR_RETURN(out.unknown_fields, ReadEnum<UnknownFields>(*unknown, m.Path("unknown_fields"),
                                                                       {{"ignore", UnknownFields::kIgnore},
                                                                        {"reject", UnknownFields::kReject}}));
  }
  if (const YAML::Node* special = m.Find("chat_special_tokens")) {
    FERRY_ASSIGN_OR_RETURN(out.chat_special_tokens,
                           ReadEnum<ChatSpecialTokens>(*special, m.Path("chat_special_tokens"),
                                                       {{"text", ChatSpecialTokens::kText},
                                                        {"parse", ChatSpecialTokens::kParse}}));
  }
  FERRY_RETURN_IF_ERROR(m.Int("max_choices", out.max_choices));
  FERRY_RETURN_IF_ERROR(m.Int("max_logprobs", out.max_logprobs));
  if (out.max_choices < 1 || out.max_choices > 1024) {
    return InvalidArgument("api.max_choices: must be in [1, 1024], got " + std::to_string(out.max_choices));
  }
  // The samplers return at most 20 alternatives per token.
  if (out.max_logprobs < 0 || out.max_logprobs > 20) {
    return InvalidArgument("api.max_logprobs: must be in [0, 20], got " + std::to_string(out.max_logprobs));
  }
  return Status::Ok();
}

Status ParseCors(const YAML::Node& node, CorsConfig& out) {
  FERRY_ASSIGN_OR_RETURN(const MapReader m, MapReader::Open(node, "cors",
                                                            {"allowed_origins", "allowed_methods", "allowed_headers",
                                                             "allow_credentials", "max_age_s"}));
  // A list given replaces the default list.
  if (m.Find("allowed_methods") != nullptr) out.allowed_methods.clear();
  if (m.Find("allowed_headers") != nullptr) out.allowed_headers.clear();
  FERRY_RETURN_IF_ERROR(m.AppendStrings("allowed_origins", out.allowed_origins));
  FERRY_RETURN_IF_ERROR(m.AppendStrings("allowed_methods", out.allowed_methods));
  FERRY_RETURN_IF_ERROR(m.AppendStrings("allowed_headers", out.allowed_headers));
  FERRY_RETURN_IF_ERROR(m.Bool("allow_credentials", out.allow_credentials));
  FERRY_RETURN_IF_ERROR(m.Int("max_age_s", out.max_age_s));
  return Status::Ok();
}

Status ParseModel(const YAML::Node& node, const std::string& path, ModelConfig& out) {
  std::vector<std::string_view> keys = {"name", "path", "variants", "qos"};
  keys.insert(keys.end(), ModelOptionKeys().begin(), ModelOptionKeys().end());
  FERRY_ASSIGN_OR_RETURN(const MapReader m, MapReader::Open(node, path, keys));
  FERRY_RETURN_IF_ERROR(m.Require("name"));
  if (m.Find("variants") == nullptr) {
    FERRY_RETURN_IF_ERROR(m.Require("path"));
    if (const YAML::Node* qos = m.Find("qos")) {
      return ErrorAt(*qos, m.Path("qos"), "applies only to a model with variants");
    }
  }
  FERRY_RETURN_IF_ERROR(m.String("name", out.name));
  FERRY_RETURN_IF_ERROR(m.String("path", out.path));
  FERRY_RETURN_IF_ERROR(ParseModelOptions(m, out));
  // Variants start from the model's options, so they are read after them.
  if (const YAML::Node* qos = m.Find("qos")) FERRY_RETURN_IF_ERROR(ParseQos(*qos, m.Path("qos"), out.qos));
  if (const YAML::Node* variants = m.Find("variants")) {
    FERRY_RETURN_IF_ERROR(ParseVariants(*variants, m.Path("variants"), out, out.variants));
  }
  return Status::Ok();
}

Status ParseLog(const YAML::Node& node, LogConfig& out) {
  FERRY_ASSIGN_OR_RETURN(const MapReader m, MapReader::Open(node, "log", {"level", "request_log"}));
  if (const YAML::Node* level = m.Find("level")) {
    FERRY_ASSIGN_OR_RETURN(out.level, ReadEnum<LogLevel>(*level, m.Path("level"),
                                                         {{"trace", LogLevel::kTrace},
                                                          {"debug", LogLevel::kDebug},
                                                          {"info", LogLevel::kInfo},
                                                          {"warn", LogLevel::kWarn},
                                                          {"error", LogLevel::kError}}));
  }
  FERRY_RETURN_IF_ERROR(m.Bool("request_log", out.request_log));
  return Status::Ok();
}

Status ParseRoot(const YAML::Node& file_root, ServerConfig& config) {
  // An empty file: every default (and whatever the environment sets).
  const YAML::Node root = file_root.IsNull() ? YAML::Node(YAML::NodeType::Map) : file_root;
  if (!root.IsMap()) return ErrorAt(root, "(top level)", "expected a mapping, got " + KindName(root));
  FERRY_ASSIGN_OR_RETURN(const MapReader m, MapReader::Open(root, "", {"listener", "auth", "tiers", "tenants", "models",
                                                                       "log", "api", "cors", "model_repository",
                                                                       "repository_poll_s",
                                                                       "host_memory_budget_bytes", "queue"}));
  if (const YAML::Node* node = m.Find("listener")) FERRY_RETURN_IF_ERROR(ParseListener(*node, config.listener));
  if (const YAML::Node* node = m.Find("auth")) FERRY_RETURN_IF_ERROR(ParseAuth(*node, config.auth));
  if (const YAML::Node* node = m.Find("tiers")) FERRY_RETURN_IF_ERROR(ParseTiers(*node, config.tiers, config.tier_rules));
  if (const YAML::Node* node = m.Find("tenants")) {
    FERRY_ASSIGN_OR_RETURN(const auto items, ReadItems(*node, "tenants"));
    for (const auto& [path, item] : items) {
      TenantConfig tenant;
      FERRY_RETURN_IF_ERROR(ParseTenant(item, path, tenant));
      config.tenants.push_back(std::move(tenant));
    }
  }
  if (const YAML::Node* node = m.Find("models")) {
    FERRY_ASSIGN_OR_RETURN(const auto items, ReadItems(*node, "models"));
    for (const auto& [path, item] : items) {
      ModelConfig model;
      FERRY_RETURN_IF_ERROR(ParseModel(item, path, model));
      config.models.push_back(std::move(model));
    }
  }
  if (const YAML::Node* node = m.Find("model_repository")) {
    FERRY_RETURN_IF_ERROR(ParseRepositoryConfig(*node, "model_repository", config.model_repository));
  }
  FERRY_RETURN_IF_ERROR(m.Number("repository_poll_s", config.model_repository.poll_s));
  FERRY_RETURN_IF_ERROR(m.Int("host_memory_budget_bytes", config.host_memory_budget_bytes));
  if (const YAML::Node* node = m.Find("log")) FERRY_RETURN_IF_ERROR(ParseLog(*node, config.log));
  if (const YAML::Node* node = m.Find("api")) FERRY_RETURN_IF_ERROR(ParseApi(*node, config.api));
  if (const YAML::Node* node = m.Find("cors")) FERRY_RETURN_IF_ERROR(ParseCors(*node, config.cors));
  if (const YAML::Node* node = m.Find("queue")) FERRY_RETURN_IF_ERROR(ParseQueueConfig(*node, "queue", config.queue));
  return Status::Ok();
}

// ---- Validation helpers ----------------------------------------------------------------

bool IsNameChar(char c, std::string_view extra) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
         extra.find(c) != std::string_view::npos;
}

bool IsName(std::string_view name, std::string_view extra) {
  if (name.empty()) return false;
  for (char c : name) {
    if (!IsNameChar(c, extra)) return false;
  }
  return true;
}

constexpr std::string_view kTenantNameExtra = "._-";
constexpr std::string_view kModelNameExtra = "._:/-";

// A key travels in "Authorization: Bearer <key>": visible ASCII, no spaces.
bool IsValidKey(std::string_view key) {
  if (key.empty()) return false;
  for (char c : key) {
    if (c < 0x21 || c > 0x7e) return false;
  }
  return true;
}

Status CheckRange(const std::string& path, int64_t value, int64_t min, int64_t max) {
  if (value >= min && value <= max) return Status::Ok();
  std::string range = max == std::numeric_limits<int64_t>::max()
                          ? ">= " + std::to_string(min)
                          : "in [" + std::to_string(min) + ", " + std::to_string(max) + "]";
  return InvalidArgument(path + ": must be " + range + ", got " + std::to_string(value));
}

constexpr int64_t kNoMax = std::numeric_limits<int64_t>::max();

Status ValidateListener(const ListenerConfig& l) {
  if (l.host.empty()) return InvalidArgument("listener.host: must not be empty");
  FERRY_RETURN_IF_ERROR(CheckRange("listener.port", l.port, 0, 65535));
  FERRY_RETURN_IF_ERROR(CheckRange("listener.io_threads", l.io_threads, 1, 1024));
  FERRY_RETURN_IF_ERROR(CheckRange("listener.output_threads", l.output_threads, 1, 1024));
  FERRY_RETURN_IF_ERROR(CheckRange("listener.request_threads", l.request_threads, 1, 1024));
  FERRY_RETURN_IF_ERROR(CheckRange("listener.max_body_bytes", l.max_body_bytes, 1, kNoMax));
  // Beast stores a field's length in 16 bits: one field must stay under 64 KiB.
  FERRY_RETURN_IF_ERROR(CheckRange("listener.max_header_bytes", l.max_header_bytes, 1024, 60 * 1024));
  FERRY_RETURN_IF_ERROR(CheckRange("listener.header_timeout_ms", l.header_timeout_ms, 1, kNoMax));
  FERRY_RETURN_IF_ERROR(CheckRange("listener.idle_timeout_ms", l.idle_timeout_ms, 1, kNoMax));
  FERRY_RETURN_IF_ERROR(CheckRange("listener.shutdown_timeout_ms", l.shutdown_timeout_ms, 0, kNoMax));
  FERRY_RETURN_IF_ERROR(CheckRange("listener.max_connections", l.max_connections, 1, kNoMax));
  return Status::Ok();
}

// Every key in one place, so that a key shared by two tenants (or a tenant and the admin)
// is caught; messages give the places, never the key.
Status ValidateKeys(const ServerConfig& config) {
  std::map<std::string_view, std::string> owner;  // key → where it was first seen
  auto add = [&owner](const std::string& key, std::string where) -> Status {
    if (!IsValidKey(key)) {
      return InvalidArgument(where + ": a key must be non-empty visible ASCII without spaces");
    }
    const auto [it, inserted] = owner.emplace(key, where);
    if (!inserted) return InvalidArgument(where + ": duplicate key (also at " + it->second + ")");
    return Status::Ok();
  };
  for (size_t t = 0; t < config.tenants.size(); ++t) {
    const auto& keys = config.tenants[t].keys;
    for (size_t k = 0; k < keys.size(); ++k) {
      FERRY_RETURN_IF_ERROR(add(keys[k], "tenants[" + std::to_string(t) + "].keys[" + std::to_string(k) + "]"));
    }
  }
  for (size_t k = 0; k < config.auth.admin_keys.size(); ++k) {
    FERRY_RETURN_IF_ERROR(add(config.auth.admin_keys[k], "auth.admin_keys[" + std::to_string(k) + "]"));
  }
  return Status::Ok();
}

Status ValidateTenants(const ServerConfig& config) {
  std::set<std::string> names;
  for (size_t t = 0; t < config.tenants.size(); ++t) {
    const TenantConfig& tenant = config.tenants[t];
    const std::string path = "tenants[" + std::to_string(t) + "]";
    if (!IsName(tenant.name, kTenantNameExtra)) {
      return InvalidArgument(path + ".name: must match [A-Za-z0-9._-]+, got " + Quoted(tenant.name));
    }
    if (tenant.name == "admin" || tenant.name == "anonymous") {
      return InvalidArgument(path + ".name: '" + tenant.name + "' is reserved");
    }
    if (!names.insert(tenant.name).second) {
      return InvalidArgument(path + ".name: duplicate tenant " + Quoted(tenant.name));
    }
    if (config.tiers.count(tenant.tier) == 0) {
      std::string known;
      for (const auto& [name, priority] : config.tiers) known += (known.empty() ? "" : ", ") + name;
      return InvalidArgument(path + ".tier: unknown tier " + Quoted(tenant.tier) + " (tiers: " + known + ")");
    }
    FERRY_RETURN_IF_ERROR(CheckRange(path + ".max_concurrent_requests", tenant.max_concurrent_requests, 0, kNoMax));
    FERRY_RETURN_IF_ERROR(CheckRange(path + ".requests_per_minute", tenant.requests_per_minute, 0, kNoMax));
    FERRY_RETURN_IF_ERROR(CheckRange(path + ".tokens_per_minute", tenant.tokens_per_minute, 0, kNoMax));
  }
  return ValidateKeys(config);
}

Status ValidateModels(const std::vector<ModelConfig>& models) {
  std::set<std::string> names;
  for (size_t i = 0; i < models.size(); ++i) {
    const ModelConfig& model = models[i];
    const std::string path = "models[" + std::to_string(i) + "]";
    if (!IsName(model.name, kModelNameExtra)) {
      return InvalidArgument(path + ".name: must match [A-Za-z0-9._:/-]+, got " + Quoted(model.name));
    }
    if (!names.insert(model.name).second) {
      return InvalidArgument(path + ".name: duplicate model name " + Quoted(model.name));
    }
    if (model.variants.empty() && model.path.empty()) return InvalidArgument(path + ".path: must not be empty");
    if (!model.variants.empty() && !model.path.empty()) {
      return InvalidArgument(path + ": give either path or variants (each variant has its own path)");
    }
    FERRY_RETURN_IF_ERROR(CheckRange(path + ".threads", model.threads, 0, 4096));
    FERRY_RETURN_IF_ERROR(model.batching.Validate().WithContext(path + ".batching"));
    FERRY_RETURN_IF_ERROR(model.dynamic_batching.Validate().WithContext(path + ".dynamic_batching"));
    if (!(model.gpu_memory_utilization >= 0.0 && model.gpu_memory_utilization <= 1.0)) {
      return InvalidArgument(path + ".gpu_memory_utilization: must be in [0, 1]");
    }
    FERRY_RETURN_IF_ERROR(model.long_inputs.Validate().WithContext(path + ".long_inputs"));
    for (size_t v = 0; v < model.variants.size(); ++v) {
      const ModelConfig& variant = model.variants[v].model;
      const std::string vpath = path + ".variants[" + std::to_string(v) + "]";
      if (variant.path.empty()) return InvalidArgument(vpath + ".path: must not be empty");
      FERRY_RETURN_IF_ERROR(CheckRange(vpath + ".threads", variant.threads, 0, 4096));
      FERRY_RETURN_IF_ERROR(variant.batching.Validate().WithContext(vpath + ".batching"));
      FERRY_RETURN_IF_ERROR(variant.dynamic_batching.Validate().WithContext(vpath + ".dynamic_batching"));
      FERRY_RETURN_IF_ERROR(variant.long_inputs.Validate().WithContext(vpath + ".long_inputs"));
      if (!(variant.gpu_memory_utilization >= 0.0 && variant.gpu_memory_utilization <= 1.0)) {
        return InvalidArgument(vpath + ".gpu_memory_utilization: must be in [0, 1]");
      }
    }
  }
  return Status::Ok();
}

// The YAML's values over the defaults, then the environment's, not yet validated (flags
// may still change them).
Result<ServerConfig> ParseUnvalidated(std::string_view yaml_text, const ServerConfigOverrides& overrides) {
  ServerConfig config;
  ConfigEnvironment env(overrides.environment);
  struct Scope {
    explicit Scope(ConfigEnvironment* e) { t_env = e; }
    ~Scope() { t_env = nullptr; }
  } scope(overrides.use_environment ? &env : nullptr);
  try {
    const YAML::Node root = YAML::Load(std::string(yaml_text));
    FERRY_RETURN_IF_ERROR(ParseRoot(root, config));
    if (overrides.use_environment) FERRY_RETURN_IF_ERROR(env.CheckAllUsed());
  } catch (const YAML::Exception& e) {
    std::string where = e.mark.is_null() ? "" : " at line " + std::to_string(e.mark.line + 1) + ", column " +
                                                    std::to_string(e.mark.column + 1);
    return InvalidArgument("invalid YAML" + where + ": " + e.msg);
  }
  return config;
}

Status ApplyOverrides(ServerConfig& config, const ServerConfigOverrides& o) {
  for (const std::string& m : o.models) FERRY_RETURN_IF_ERROR(ApplyModelFlag(config, m));
  if (o.model_repository) config.model_repository.path = *o.model_repository;
  if (o.host) config.listener.host = *o.host;
  if (o.port) config.listener.port = *o.port;
  if (o.no_auth) config.auth.mode = AuthMode::kNone;
  if (o.no_request_log) config.log.request_log = false;
  if (o.log_level) config.log.level = *o.log_level;
  return ApplyVllmFlags(config, o);
}

}  // namespace

// ---- Public ----------------------------------------------------------------------------

Status ServerConfig::Validate() const {
  FERRY_RETURN_IF_ERROR(ValidateListener(listener));
  FERRY_RETURN_IF_ERROR(ValidateCors(cors));
  if (tiers.empty()) return InvalidArgument("tiers: define at least one tier");
  for (const auto& [name, priority] : tiers) {
    if (!IsName(name, kTenantNameExtra)) {
      return InvalidArgument("tiers: a tier name must match [A-Za-z0-9._-]+, got " + Quoted(name));
    }
    FERRY_RETURN_IF_ERROR(CheckRange("tiers." + name, priority, 1, kNoMax));
  }
  FERRY_RETURN_IF_ERROR(ValidateTenants(*this));
  if (auth.mode == AuthMode::kNone && !IsLoopbackHost(listener.host)) {
    return InvalidArgument("auth.mode: 'none' is only allowed when listener.host is a loopback address "
                           "(127.0.0.0/8, ::1, localhost), got " + Quoted(listener.host) +
                           "; configure tenants with keys to listen on other addresses");
  }
  if (auth.mode == AuthMode::kKeys) {
    bool any_tenant_key = false;
    for (const TenantConfig& tenant : tenants) any_tenant_key = any_tenant_key || !tenant.keys.empty();
    if (!any_tenant_key) {
      return InvalidArgument("auth mode 'keys' needs at least one tenant key; "
                             "set auth.mode: none for a loopback-only server");
    }
  }
  FERRY_RETURN_IF_ERROR(ValidateModels(models));
  FERRY_RETURN_IF_ERROR(ValidateRepositoryConfig(model_repository));
  if (queue.enabled()) FERRY_RETURN_IF_ERROR(queue.Validate());
  FERRY_RETURN_IF_ERROR(CheckRange("host_memory_budget_bytes", host_memory_budget_bytes, 0, kNoMax));
  return ValidateQosGroups(*this);
}

const std::string& ServerConfig::HighestTier() const {
  auto best = tiers.begin();
  for (auto it = tiers.begin(); it != tiers.end(); ++it) {
    if (it->second < best->second) best = it;
  }
  return best->first;
}

Result<ServerConfig> ParseServerConfig(std::string_view yaml_text, const ServerConfigOverrides& overrides) {
  FERRY_ASSIGN_OR_RETURN(ServerConfig config, ParseUnvalidated(yaml_text, overrides));
  FERRY_RETURN_IF_ERROR(ApplyOverrides(config, overrides));
  FERRY_RETURN_IF_ERROR(config.Validate());
  return config;
}

Result<ServerConfig> LoadServerConfig(const std::string& path, const ServerConfigOverrides& overrides) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound("cannot open config file " + path + ": " + std::strerror(errno));
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return DataLoss("cannot read config file " + path);
  Result<ServerConfig> config = ParseUnvalidated(text.str(), overrides);
  if (!config.ok()) return config.status().WithContext(path);
  FERRY_RETURN_IF_ERROR(ApplyOverrides(*config, overrides));
  const Status valid = config->Validate();
  if (!valid.ok()) return valid.WithContext(path);
  return config;
}

}  // namespace ferry::serve
