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

struct VariantConfig;

// One served model. A decoder obeys `batching`, an encoder `dynamic_batching`; which one
// a model is comes from its files, so both are accepted for every model.
struct ModelConfig {
  std::string name;  // [A-Za-z0-9._:/-]+, unique
  std::string path;  // checkpoint directory or engine file, relative to the working directory; empty with variants
  int threads = 0;   // 0: all cores
  DeviceSpec device = DeviceSpec::Cpu();  // cpu, cuda or cuda:N
  DType activations = DType::kBF16;    // GPU: activation dtype of a checkpoint (engine files carry theirs)
  std::optional<DType> kv_cache_dtype = std::nullopt;  // GPU: KV cache dtype (unset: the activations'); fp8 halves it
  bool enforce_eager = false;           // GPU: no CUDA graphs for decode steps
  sched::ContinuousBatchingOptions batching;
  sched::DynamicBatchingOptions dynamic_batching;
  bool warmup = true;
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
  LogConfig log;

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
  std::optional<std::string> host;
  std::optional<int> port;
  bool no_auth = false;             // auth.mode: none
  bool no_request_log = false;      // log.request_log: false
  std::optional<LogLevel> log_level;
};

// Parses a config, applies `overrides`, then validates. Unknown keys, wrong types and YAML
// syntax errors are InvalidArgument naming the key path and, where known, the line and
// column.
Result<ServerConfig> ParseServerConfig(std::string_view yaml_text, const ServerConfigOverrides& overrides = {});
// Reads `path` and parses it as ParseServerConfig does; messages about the file's
// contents are prefixed with the path.
Result<ServerConfig> LoadServerConfig(const std::string& path, const ServerConfigOverrides& overrides = {});

// `--model NAME=PATH`: sets the path of model NAME, adding it with default options if the
// config has none of that name. Call Validate() after the last flag.
Status ApplyModelFlag(ServerConfig& config, std::string_view name_eq_path);

// A log level's name as the config spells it: trace, debug, info, warn or error.
Result<LogLevel> ParseLogLevel(std::string_view name);

// 127.0.0.0/8, ::1 (also bracketed and IPv4-mapped) and "localhost".
bool IsLoopbackHost(std::string_view host);

std::string_view AuthModeName(AuthMode mode);
std::string_view LogLevelName(LogLevel level);

}  // namespace ferry::serve
