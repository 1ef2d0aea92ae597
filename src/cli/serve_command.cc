// ferry serve: argument handling; the server itself is serve::Server.
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cli/subcommands.h"
#include "core/device_spec.h"
#include "core/logging.h"
#include "sched/step_time_model.h"
#include "serve/config.h"
#include "serve/server.h"

namespace ferry::cli {

namespace {

struct ServeOptions {
  std::string config;
  std::vector<std::string> models;
  std::string model_repository;
  std::optional<std::string> host;  // set only when the flag is given
  std::optional<int> port;
  std::string host_flag;  // what CLI11 parses into
  int port_flag = 0;
  bool no_auth = false;
  bool no_request_log = false;
  std::string log_level;
  // vLLM's names (see ServerConfigOverrides).
  int max_model_len = 0, max_num_seqs = 0, max_num_batched_tokens = 0, block_size = 0;
  bool enable_prefix_caching = false, no_enable_prefix_caching = false, enforce_eager = false;
  std::string max_step_ms;
  std::string chat_template, tool_call_parser, kv_cache_dtype, cpu_activations, device, api_key, served_model_name, allowed_origins;
  double gpu_memory_utilization = -1;
  bool disable_log_requests = false;
};

// "--allowed-origins": vLLM's JSON list ('["https://a", "https://b"]'), or comma-separated.
std::vector<std::string> SplitOrigins(const std::string& text) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : text) {
    if (c == ',' || c == '[' || c == ']') {
      if (!cur.empty()) out.push_back(cur);
      cur.clear();
    } else if (c != '"' && c != '\'' && c != ' ') {
      cur += c;
    }
  }
  if (!cur.empty()) out.push_back(cur);
  return out;
}

Status ApplyVllmOptions(const ServeOptions& o, serve::ServerConfigOverrides& flags) {
  if (o.max_model_len > 0) flags.max_model_len = o.max_model_len;
  if (o.max_num_seqs > 0) flags.max_num_seqs = o.max_num_seqs;
  if (o.max_num_batched_tokens > 0) flags.max_num_batched_tokens = o.max_num_batched_tokens;
  if (o.block_size > 0) flags.block_size = o.block_size;
  if (!o.max_step_ms.empty()) {
    if (o.max_step_ms == "auto") {
      flags.max_step_ms = sched::kMaxStepAuto;
    } else if (o.max_step_ms == "off") {
      flags.max_step_ms = sched::kMaxStepOff;
    } else {
      char* end = nullptr;
      const long ms = std::strtol(o.max_step_ms.c_str(), &end, 10);
      if (end == o.max_step_ms.c_str() || *end != '\0' || ms < 0 || ms > 3600000) {
        return InvalidArgument("--max-step-ms: auto, off or milliseconds (0 = off), got '" + o.max_step_ms + "'");
      }
      flags.max_step_ms = static_cast<int>(ms);
    }
  }
  if (o.enable_prefix_caching && o.no_enable_prefix_caching) {
    return InvalidArgument("--enable-prefix-caching and --no-enable-prefix-caching contradict each other");
  }
  if (o.enable_prefix_caching) flags.enable_prefix_caching = true;
  if (o.no_enable_prefix_caching) flags.enable_prefix_caching = false;
  flags.enforce_eager = o.enforce_eager;
  if (!o.chat_template.empty()) flags.chat_template = o.chat_template;
  if (!o.tool_call_parser.empty()) {
    const std::pair<const char*, serve::ToolCallParser> names[] = {
        {"auto", serve::ToolCallParser::kAuto},       {"none", serve::ToolCallParser::kNone},
        {"hermes", serve::ToolCallParser::kHermes},   {"llama3_json", serve::ToolCallParser::kLlama3Json},
        {"mistral", serve::ToolCallParser::kMistral}};
    for (const auto& [name, kind] : names) {
      if (o.tool_call_parser == name) flags.tool_call_parser = kind;
    }
    if (!flags.tool_call_parser) {
      return InvalidArgument("--tool-call-parser must be auto, none, hermes, llama3_json or mistral");
    }
  }
  if (!o.kv_cache_dtype.empty()) {
    const std::pair<const char*, std::optional<DType>> names[] = {
        {"auto", std::nullopt}, {"bf16", DType::kBF16}, {"f16", DType::kF16}, {"f32", DType::kF32},
        {"fp8", DType::kF8E4M3}, {"fp8_e4m3", DType::kF8E4M3}};
    for (const auto& [name, dtype] : names) {
      if (o.kv_cache_dtype == name) flags.kv_cache_dtype = dtype;
    }
    if (!flags.kv_cache_dtype) return InvalidArgument("--kv-cache-dtype must be auto, bf16, f16, f32 or fp8");
  }
  if (!o.cpu_activations.empty()) {
    if (o.cpu_activations != "f32" && o.cpu_activations != "bf16") {
      return InvalidArgument("--cpu-activations must be f32 or bf16");
    }
    flags.cpu_activations = o.cpu_activations == "bf16" ? DType::kBF16 : DType::kF32;
  }
  if (!o.device.empty()) {
    auto d = ParseDevice(o.device);
    if (!d.ok()) return d.status().WithContext("--device");
    flags.device = *d;
  }
  if (o.gpu_memory_utilization >= 0) flags.gpu_memory_utilization = o.gpu_memory_utilization;
  if (!o.api_key.empty()) flags.api_key = o.api_key;
  if (!o.allowed_origins.empty()) flags.allowed_origins = SplitOrigins(o.allowed_origins);
  if (o.disable_log_requests) flags.no_request_log = true;
  if (!o.served_model_name.empty()) {
    // vLLM's --model PATH --served-model-name NAME.
    for (std::string& m : flags.models) {
      if (m.find('=') == std::string::npos) m = o.served_model_name + "=" + m;
    }
  }
  return Status::Ok();
}

LogLevel ToCoreLevel(serve::LogLevel l) {
  switch (l) {
    case serve::LogLevel::kTrace:
    case serve::LogLevel::kDebug: return LogLevel::kDebug;
    case serve::LogLevel::kInfo: return LogLevel::kInfo;
    case serve::LogLevel::kWarn: return LogLevel::kWarn;
    case serve::LogLevel::kError: return LogLevel::kError;
  }
  return LogLevel::kInfo;
}

int RunServe(const ServeOptions& o) {
  if (o.config.empty() && o.models.empty() && o.model_repository.empty()) {
    return Fail(InvalidArgument("no models to serve: give --model NAME=PATH, --model-repository DIR or a --config "
                                "with models"));
  }
  // Flags override the file; the config is validated once, after they are applied.
  serve::ServerConfigOverrides flags;
  flags.models = o.models;
  if (!o.model_repository.empty()) flags.model_repository = o.model_repository;
  flags.host = o.host;
  flags.port = o.port;
  flags.no_auth = o.no_auth;
  flags.no_request_log = o.no_request_log;
  if (!o.log_level.empty()) {
    auto level = serve::ParseLogLevel(o.log_level);
    if (!level.ok()) return Fail(level.status().WithContext("--log-level"));
    flags.log_level = level.value();
  }
  if (Status st = ApplyVllmOptions(o, flags); !st.ok()) return Fail(st);
  auto loaded = o.config.empty() ? serve::ParseServerConfig("", flags) : serve::LoadServerConfig(o.config, flags);
  if (!loaded.ok()) return Fail(loaded.status());
  serve::ServerConfig config = std::move(loaded).value();
  if (config.models.empty() && config.model_repository.path.empty()) {
    return Fail(InvalidArgument("no models to serve: give --model NAME=PATH, --model-repository DIR or a --config "
                                "with models"));
  }
  SetLogLevel(ToCoreLevel(config.log.level));
  auto server = serve::Server::Create(std::move(config));
  if (!server.ok()) return Fail(server.status());
  serve::ShutdownOnSignals(*server.value());  // before any thread starts
  Status st = server.value()->Start();
  if (!st.ok()) return Fail(st);
  return server.value()->Run();
}

}  // namespace

void RegisterServe(CLI::App& app, int& exit_code) {
  auto o = std::make_shared<ServeOptions>();
  CLI::App* sub = app.add_subcommand("serve", "Serve models over HTTP (OpenAI-compatible API)");
  sub->add_option("--config", o->config, "YAML config (see docs/serving-config.md)");
  sub->add_option("--model-repository", o->model_repository,
                  "Serve the versioned models of DIR (DIR/NAME/VERSION/), reloaded while serving "
                  "(docs/model-repository.md)");
  sub->add_option("--model", o->models,
                  "NAME=PATH (or PATH, named after its last component): a checkpoint directory, GGUF file or "
                  "engine file (repeatable)");
  CLI::Option* host = sub->add_option("--host", o->host_flag, "Listen address (default 127.0.0.1)");
  CLI::Option* port = sub->add_option("--port", o->port_flag, "Listen port (default 8000; 0 picks a free one)");
  sub->add_flag("--no-auth", o->no_auth, "Serve without API keys (only on a loopback address)");
  sub->add_flag("--no-request-log", o->no_request_log, "Do not print JSON request logs");
  sub->add_option("--log-level", o->log_level, "trace, debug, info, warn or error");
  // vLLM's names for the same settings, applied to every model.
  sub->add_option("--max-model-len", o->max_model_len, "batching.max_seq_len of every model");
  sub->add_option("--max-num-seqs", o->max_num_seqs, "batching.max_num_seqs of every model");
  sub->add_option("--max-num-batched-tokens", o->max_num_batched_tokens, "batching.max_num_batched_tokens");
  sub->add_option("--block-size", o->block_size, "batching.kv_block_tokens");
  sub->add_option("--max-step-ms", o->max_step_ms, "batching.max_step_ms: auto, off or a step-time target in ms");
  sub->add_flag("--enable-prefix-caching", o->enable_prefix_caching, "batching.enable_prefix_caching: true");
  sub->add_flag("--no-enable-prefix-caching", o->no_enable_prefix_caching, "batching.enable_prefix_caching: false");
  sub->add_flag("--enforce-eager", o->enforce_eager, "GPU: no CUDA graphs (enforce_eager)");
  sub->add_option("--chat-template", o->chat_template, "Jinja chat template file for every decoder");
  sub->add_option("--tool-call-parser", o->tool_call_parser, "auto, none, hermes, llama3_json or mistral");
  sub->add_option("--kv-cache-dtype", o->kv_cache_dtype, "GPU: auto, bf16, f16, f32 or fp8");
  sub->add_option("--cpu-activations", o->cpu_activations,
                  "CPU: f32, or bf16 (bf16 and int8-wo weights' prefill GEMMs round x to bf16, on vdpbf16ps)");
  sub->add_option("--device", o->device, "cpu, cuda or cuda:N for every model");
  sub->add_option("--gpu-memory-utilization", o->gpu_memory_utilization,
                  "GPU: fraction of the device's memory to fill (the KV cache takes the rest)");
  sub->add_option("--api-key", o->api_key, "One API key for every route (a tenant 'api-key' in the highest tier)");
  sub->add_option("--served-model-name", o->served_model_name, "Name of the model given as --model PATH");
  sub->add_option("--allowed-origins", o->allowed_origins, "CORS origins: a JSON list or comma-separated");
  sub->add_flag("--disable-log-requests", o->disable_log_requests, "Same as --no-request-log");
  sub->callback([o, host, port, &exit_code] {
    // A flag overrides the config file only when it is given.
    if (host->count() > 0) o->host = o->host_flag;
    if (port->count() > 0) o->port = o->port_flag;
    exit_code = RunServe(*o);
  });
}

}  // namespace ferry::cli
