// The server's typed configuration: one YAML file parsed and validated at startup, then
// read-only. Every behaviour of `ferry serve` is set here (or by a CLI flag that edits
// this struct before Validate()), never by environment variables read elsewhere; the only
// environment lookups are the `*_env` key references, resolved while parsing.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "batch/queue_options.h"
#include "chunk/long_input_options.h"
#include "core/device_spec.h"
#include "core/dtype.h"
#include "core/status.h"
#include "io/pooling_config.h"
#include "qos/qos_options.h"
#include "sched/batching_options.h"
#include "serve/connection_stream.h"

namespace ferry::serve {

// The HTTP listener and its connection limits.
struct ListenerConfig {
  std::string host = "127.0.0.1";
  int port = 8000;                       // 0: any free port (tests)
  int io_threads = 2;
  int output_threads = 2;                // turn engine events into responses (detokenize, format)
  int request_threads = 2;               // parse and tokenize request bodies, off the I/O threads
  int64_t max_body_bytes = 1 << 20;
  int64_t max_header_bytes = 32 * 1024;  // request line + headers; also a chunk line or trailer block
  int64_t header_timeout_ms = 10000;     // first byte → complete head and body (slowloris)
  int64_t idle_timeout_ms = 60000;       // keep-alive connection with no request in flight
  int64_t shutdown_timeout_ms = 30000;   // drain limit on SIGTERM
  int max_connections = 4096;
  TlsOptions tls;                        // listener.tls: {cert, key, min_version}; HTTPS when set
};

enum class AuthMode {
  kKeys,  // every request carries "Authorization: Bearer <key>"
  kNone,  // no keys; only allowed on a loopback host
};

// Who may call the server. Tenants live in ServerConfig::tenants.
struct AuthConfig {
  AuthMode mode = AuthMode::kKeys;
  std::vector<std::string> admin_keys;  // includes the value of auth.admin_key_env
  bool metrics_require_key = false;     // /metrics needs a tenant or admin key (mode keys)
  // Mode none: Host header values accepted besides the loopback names (DNS rebinding).
  std::vector<std::string> allowed_hosts;
};

// One API customer: its keys map to it and to its tier.
struct TenantConfig {
  std::string name;
  std::string tier = "default";
  std::vector<std::string> keys;    // includes the value of key_env
  int max_concurrent_requests = 0;  // 0: unlimited
  int64_t requests_per_minute = 0;  // rate limit; 0: unlimited
  int64_t tokens_per_minute = 0;    // rate limit on prompt + generated tokens; 0: unlimited
};

// How the model's output is parsed into OpenAI tool calls (vLLM's --tool-call-parser).
enum class ToolCallParser {
  kAuto,        // from the chat template: <tool_call> → hermes, [TOOL_CALLS] → mistral, Llama 3's ipython → llama3_json
  kNone,        // never: the output is content
  kLlama3Json,  // {"name": ..., "parameters": ...} (optionally after <|python_tag|>), several joined by ';'
  kHermes,      // <tool_call>{"name": ..., "arguments": ...}</tool_call> (Hermes, Qwen 2.5)
  kMistral,     // [TOOL_CALLS][{"name": ..., "arguments": ...}, ...]
};

struct VariantConfig;

// One served model. A decoder obeys `batching`, an encoder `dynamic_batching`; which one
// a model is comes from its files, so both are accepted for every model.
struct ModelConfig {
  std::string name;  // [A-Za-z0-9._:/-]+, unique
  std::string path;  // checkpoint directory or engine file, relative to the working directory; empty with variants
  int threads = 0;   // 0: all cores
  DeviceSpec device = DeviceSpec::Cpu();  // cpu, cuda or cuda:N
  DType activations = DType::kBF16;    // GPU: activation dtype of a checkpoint (engine files carry theirs)
  DType cpu_activations = DType::kF32;  // CPU: f32, or bf16 for bf16 weights' prefill GEMMs (EngineOptions)
  std::optional<DType> kv_cache_dtype = std::nullopt;  // GPU: KV cache dtype (unset: the activations'); fp8 halves it
  bool enforce_eager = false;           // GPU: no CUDA graphs for decode steps
  bool map_weights = false;             // CPU engine files: weights from the file's mapping, not a huge-page copy
  sched::ContinuousBatchingOptions batching;
  sched::DynamicBatchingOptions dynamic_batching;
  bool warmup = true;
  // What the warm-up runs: kAuto is minimal on the CPU (measured: the other buckets buy
  // nothing there, docs/performance.md) and full on a GPU (every step graph recorded).
  enum class WarmupMode { kAuto, kFull, kMinimal };
  WarmupMode warmup_mode = WarmupMode::kAuto;
  std::string chat_template;            // a Jinja file replacing the model's own chat template
  ToolCallParser tool_call_parser = ToolCallParser::kAuto;
  // GPU: the fraction of the device's memory the model may fill (weights, activations and KV
  // cache); the KV cache takes what is left, vLLM's gpu_memory_utilization. 0: the KV cache
  // holds max_num_seqs sequences of max_seq_len.
  double gpu_memory_utilization = 0;
  // Host: the memory this model may take (weights, activations and KV cache); its KV cache
  // holds max_num_seqs sequences at most, fewer when the rest leaves less, and a model that
  // cannot hold one sequence is refused. 0: no budget (a repository version gets what
  // the server's host_memory_budget_bytes leaves).
  int64_t host_memory_budget_bytes = 0;
  // Encoders: inputs longer than a window (truncation, windows, merges, max_input_tokens).
  chunk::LongInputOptions long_inputs;
  // Embeddings of a model without sentence-transformers settings (modules.json), which win
  // when present: the pooling (unset: mean) and whether to L2-normalize (unset: true).
  std::optional<io::PoolingMode> pooling;
  std::optional<bool> normalize;
  // A QoS variant group when not empty: one model to clients, served by these variants
  // (most accurate first), each with its own engine and batcher; `qos` steers new requests
  // between them. Each variant starts from this model's options and overrides what it sets.
  std::vector<VariantConfig> variants;
  qos::QosOptions qos;
};

// What to do with request fields a route does not know.
enum class UnknownFields {
  kIgnore,  // vLLM's way: serve the request, say which were ignored (a Warning header and the log)
  kReject,  // OpenAI's way: 400, so that a typo never silently changes what runs
};

// API conventions shared by the routes.
// How special-token text written in a chat request's own strings (message contents, tools)
// is tokenized: as text (the default: a message cannot forge the template's turn markers) or
// parsed into control tokens, as vLLM and transformers' apply_chat_template do.
enum class ChatSpecialTokens { kText, kParse };

struct ApiConfig {
  UnknownFields unknown_fields = UnknownFields::kIgnore;
  ChatSpecialTokens chat_special_tokens = ChatSpecialTokens::kText;
  // Work one generation request may ask for: prompts x n choices, and top log-probabilities
  // per token (logprobs / top_logprobs).
  int max_choices = 64;
  int max_logprobs = 20;
};

// Cross-origin requests from browser UIs. No origins: no CORS headers at all.
struct CorsConfig {
  std::vector<std::string> allowed_origins;  // exact origins ("https://ui.example.com") or "*"
  std::vector<std::string> allowed_methods = {"GET", "POST", "OPTIONS"};
  std::vector<std::string> allowed_headers = {"Authorization", "Content-Type", "X-Request-Id"};
  bool allow_credentials = false;
  int max_age_s = 600;  // how long a browser may cache a preflight answer
};

// One rung of a variant group: a full model config (name = the group's) plus its own name.
struct VariantConfig {
  std::string name;  // [A-Za-z0-9._-]+, unique in the group; named in responses and metrics
  ModelConfig model;
};

enum class LogLevel { kTrace, kDebug, kInfo, kWarn, kError };

struct LogConfig {
  LogLevel level = LogLevel::kInfo;
  bool request_log = true;  // one JSON line per request on stdout
};

// `model_repository:` — a directory of versioned models, watched while serving
// (docs/model-repository.md). A path alone, or a mapping with these keys.
struct RepositoryConfig {
  std::string path;              // empty: no repository
  double poll_s = 10;            // rescan period, also when inotify works (a missed event heals); 0: never
  bool watch = true;             // inotify on the repository and its model directories (Linux)
  int64_t settle_ms = 1000;      // a version's files must be unchanged this long before it loads
  int64_t drain_timeout_ms = 30000;  // an old version's requests may finish this long, then are cancelled
};

// Thread-compatible value type; the server keeps one const instance.
struct ServerConfig {
  ListenerConfig listener;
  AuthConfig auth;
  // Tier name → priority, 1 the highest (the encoder batcher's priority levels).
  std::map<std::string, int> tiers = {{"default", 1}};
  // What a tier asks of every QoS variant group (`tiers: {gold: {priority, min_variant, slo}}`);
  // a group's own `qos.tiers` overrides it field by field.
  std::map<std::string, qos::TierRule> tier_rules;
  std::vector<TenantConfig> tenants;
  std::vector<ModelConfig> models;
  RepositoryConfig model_repository;
  // Host memory the models loaded from the repository may take together (weights and KV
  // cache, as estimated before a load); 0: what the host or its cgroup has available.
  int64_t host_memory_budget_bytes = 0;
  LogConfig log;
  ApiConfig api;
  CorsConfig cors;
  // `queue:` — the Batch API's durable queue (docs/batch.md); backend none: no Batch API.
  batch::QueueOptions queue;

  // Checks ranges, references and the auth rules; messages name the key path
  // ("tenants[1].tier: ..."). Never quotes a key.
  Status Validate() const;

  // The tier with the smallest priority number (ties: first by name). Tiers must not be empty.
  const std::string& HighestTier() const;
};

// The command-line flags of `ferry serve` that override the config file. A flag that is
// given wins over the file's value; the config is validated only after all of them are
// applied, so `--no-auth` rescues a file with `auth.mode: keys` and no tenants, and
// `--host 127.0.0.1` one that listens on 0.0.0.0 without keys.
struct ServerConfigOverrides {
  std::vector<std::string> models;  // NAME=PATH each, applied in order (see ApplyModelFlag)
  std::optional<std::string> model_repository;  // --model-repository DIR
  std::optional<std::string> host;
  std::optional<int> port;
  bool no_auth = false;             // auth.mode: none
  bool no_request_log = false;      // log.request_log: false
  std::optional<LogLevel> log_level;
  // vLLM's flags, applied to every model: --max-model-len, --max-num-seqs,
  // --max-num-batched-tokens, --block-size, --[no-]enable-prefix-caching, --enforce-eager,
  // --chat-template, --tool-call-parser, --kv-cache-dtype, --device,
  // --gpu-memory-utilization; and --allowed-origins (cors.allowed_origins) and --api-key (a
  // tenant "api-key" in the highest tier, auth.mode keys).
  std::optional<int> max_model_len;
  std::optional<int> max_num_seqs;
  std::optional<int> max_num_batched_tokens;
  std::optional<int> max_step_ms;  // batching.max_step_ms (-1 auto, 0 off)
  std::optional<int> block_size;
  std::optional<bool> enable_prefix_caching;
  bool enforce_eager = false;
  std::optional<std::string> chat_template;
  std::optional<ToolCallParser> tool_call_parser;
  std::optional<std::optional<DType>> kv_cache_dtype;
  std::optional<DType> cpu_activations;
  std::optional<DeviceSpec> device;
  std::optional<double> gpu_memory_utilization;
  std::vector<std::string> allowed_origins;
  std::optional<std::string> api_key;
  // FERRY_* variables as config keys (config_env.h): the process environment, or this map.
  bool use_environment = true;
  const std::map<std::string, std::string>* environment = nullptr;
};

// Parses a config, applies `overrides`, then validates. Unknown keys, wrong types and YAML
// syntax errors are InvalidArgument naming the key path and, where known, the line and
// column.
Result<ServerConfig> ParseServerConfig(std::string_view yaml_text, const ServerConfigOverrides& overrides = {});
// Reads `path` and parses it as ParseServerConfig does; messages about the file's
// contents are prefixed with the path.
Result<ServerConfig> LoadServerConfig(const std::string& path, const ServerConfigOverrides& overrides = {});

// Applies the vLLM-named flags of `overrides` (for every model; --api-key, --allowed-origins).
Status ApplyVllmFlags(ServerConfig& config, const ServerConfigOverrides& overrides);
// cors: max_age_s in range, no "*" origin with credentials.
Status ValidateCors(const CorsConfig& cors);

// `--model NAME=PATH`: sets the path of model NAME, adding it with default options if the
// config has none of that name; `--model PATH` (vLLM's form) names it after the path's last
// component. Call Validate() after the last flag.
Status ApplyModelFlag(ServerConfig& config, std::string_view name_eq_path);

// A log level's name as the config spells it: trace, debug, info, warn or error.
Result<LogLevel> ParseLogLevel(std::string_view name);

// 127.0.0.0/8, ::1 (also bracketed and IPv4-mapped) and "localhost".
bool IsLoopbackHost(std::string_view host);

std::string_view AuthModeName(AuthMode mode);
std::string_view LogLevelName(LogLevel level);

}  // namespace ferry::serve
