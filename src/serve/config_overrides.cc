// The command line's side of the config: --model, vLLM's flags, and the names of enums;
// plus the checks of the sections only flags and the environment usually set.
#include <arpa/inet.h>
#include <netinet/in.h>

#include <filesystem>
#include <limits>

#include "io/hf_cache.h"
#include "serve/config.h"

namespace ferry::serve {

namespace {

std::string Quoted(const std::string& text) {
  constexpr size_t kMaxChars = 60;
  if (text.size() <= kMaxChars) return "'" + text + "'";
  return "'" + text.substr(0, kMaxChars) + "...'";
}

}  // namespace

Status ApplyVllmFlags(ServerConfig& config, const ServerConfigOverrides& o) {
  // vLLM's flags: for every model, and every variant of a variant group (each its own engine).
  auto apply = [&o](ModelConfig& m) {
    if (o.max_model_len) m.batching.max_seq_len = *o.max_model_len;
    if (o.max_num_seqs) m.batching.max_num_seqs = *o.max_num_seqs;
    if (o.max_num_batched_tokens) m.batching.max_num_batched_tokens = *o.max_num_batched_tokens;
    if (o.max_step_ms) m.batching.max_step_ms = *o.max_step_ms;
    if (o.block_size) m.batching.kv_block_tokens = *o.block_size;
    if (o.enable_prefix_caching) m.batching.enable_prefix_caching = *o.enable_prefix_caching;
    if (o.enforce_eager) m.enforce_eager = true;
    if (o.chat_template) m.chat_template = *o.chat_template;
    if (o.tool_call_parser) m.tool_call_parser = *o.tool_call_parser;
    if (o.kv_cache_dtype) m.kv_cache_dtype = *o.kv_cache_dtype;
    if (o.cpu_activations) m.cpu_activations = *o.cpu_activations;
    if (o.device) m.device = *o.device;
    if (o.gpu_memory_utilization) m.gpu_memory_utilization = *o.gpu_memory_utilization;
  };
  for (ModelConfig& m : config.models) {
    apply(m);
    for (VariantConfig& v : m.variants) apply(v.model);
  }
  if (!o.allowed_origins.empty()) config.cors.allowed_origins = o.allowed_origins;
  if (o.api_key) {
    // vLLM's --api-key: one key for every route, here a tenant of the highest tier.
    for (const TenantConfig& t : config.tenants) {
      if (t.name == "api-key") return InvalidArgument("--api-key: the config already has a tenant named 'api-key'");
    }
    TenantConfig t;
    t.name = "api-key";
    t.tier = config.HighestTier();
    t.keys.push_back(*o.api_key);
    config.tenants.push_back(std::move(t));
    config.auth.mode = AuthMode::kKeys;
  }
  return Status::Ok();
}

Status ValidateCors(const CorsConfig& c) {
  if (c.max_age_s < 0 || c.max_age_s > 86400) return InvalidArgument("cors.max_age_s: must be in [0, 86400], got " + std::to_string(c.max_age_s));
  if (c.allow_credentials) {
    for (const std::string& o : c.allowed_origins) {
      if (o == "*") return InvalidArgument("cors.allowed_origins: '*' cannot be used with allow_credentials");
    }
  }
  return Status::Ok();
}

Status ApplyModelFlag(ServerConfig& config, std::string_view name_eq_path) {
  const size_t eq = name_eq_path.find('=');
  if (eq == std::string_view::npos) {
    // vLLM's form, --model PATH: named after the path's last component.
    std::string path(name_eq_path);
    while (path.size() > 1 && path.back() == '/') path.pop_back();
    const size_t slash = path.rfind('/');
    std::string name = slash == std::string::npos ? path : path.substr(slash + 1);
    for (const std::string_view ext : {".ferry", ".gguf"}) {
      if (name.size() > ext.size() && name.ends_with(ext)) name.resize(name.size() - ext.size());
    }
    // A Hub id ORG/REPO[@REVISION] (loaded from the Hugging Face cache) is served as REPO.
    std::error_code ec;
    if (!std::filesystem::exists(path, ec) && io::ParseHubModelId(path).has_value()) {
      name = name.substr(0, name.find('@'));
    }
    if (name.empty() || path.empty()) return InvalidArgument("--model expects PATH or NAME=PATH");
    return ApplyModelFlag(config, name + "=" + path);
  }
  const std::string name(name_eq_path.substr(0, eq));
  const std::string path(name_eq_path.substr(eq + 1));
  if (name.empty() || path.empty()) {
    return InvalidArgument("--model expects NAME=PATH with a non-empty name and path, got '" +
                           std::string(name_eq_path) + "'");
  }
  for (ModelConfig& model : config.models) {
    if (model.name == name) {
      if (!model.variants.empty()) {
        return InvalidArgument("--model " + name + "=...: model '" + name +
                               "' is a variant group; set its variants' paths in the config file");
      }
      model.path = path;
      return Status::Ok();
    }
  }
  ModelConfig model;
  model.name = name;
  model.path = path;
  config.models.push_back(std::move(model));
  return Status::Ok();
}

bool IsLoopbackHost(std::string_view host) {
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  std::string text(host);
  std::string lower;
  for (char c : text) lower += static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
  if (lower == "localhost") return true;
  in_addr v4{};
  if (inet_pton(AF_INET, text.c_str(), &v4) == 1) {
    return reinterpret_cast<const unsigned char*>(&v4.s_addr)[0] == 127;  // network byte order
  }
  in6_addr v6{};
  if (inet_pton(AF_INET6, text.c_str(), &v6) == 1) {
    const unsigned char* b = v6.s6_addr;
    bool zeros_before_last = true;
    for (int i = 0; i < 15; ++i) zeros_before_last = zeros_before_last && b[i] == 0;
    if (zeros_before_last && b[15] == 1) return true;  // ::1
    bool v4_mapped = b[10] == 0xff && b[11] == 0xff;
    for (int i = 0; i < 10; ++i) v4_mapped = v4_mapped && b[i] == 0;
    return v4_mapped && b[12] == 127;  // ::ffff:127.x.y.z
  }
  return false;
}

std::string_view AuthModeName(AuthMode mode) {
  switch (mode) {
    case AuthMode::kKeys: return "keys";
    case AuthMode::kNone: return "none";
  }
  return "unknown";
}

Result<LogLevel> ParseLogLevel(std::string_view name) {
  for (LogLevel level : {LogLevel::kTrace, LogLevel::kDebug, LogLevel::kInfo, LogLevel::kWarn, LogLevel::kError}) {
    if (name == LogLevelName(level)) return level;
  }
  return InvalidArgument("log level must be trace, debug, info, warn or error, got " + Quoted(std::string(name)));
}

std::string_view LogLevelName(LogLevel level) {
  switch (level) {
    case LogLevel::kTrace: return "trace";
    case LogLevel::kDebug: return "debug";
    case LogLevel::kInfo: return "info";
    case LogLevel::kWarn: return "warn";
    case LogLevel::kError: return "error";
  }
  return "unknown";
}

}  // namespace ferry::serve
