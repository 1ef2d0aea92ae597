#include "io/pooling_config.h"

#include <nlohmann/json.hpp>

#include "core/json_limits.h"

namespace ferry::io {
namespace {

using json = nlohmann::json;

bool EndsWith(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

struct Module {
  std::string type;
  std::string path;
};

Result<std::vector<Module>> ReadModules(const std::string& text) {
  FERRY_ASSIGN_OR_RETURN(const json root, ParseUntrustedJson(text));
  if (!root.is_array()) return InvalidArgument("modules.json must be a list, got " + JsonSnippet(root));
  std::vector<Module> modules;
  for (const json& m : root) {
    if (!m.is_object() || !m.contains("type") || !m["type"].is_string()) {
      return InvalidArgument("modules.json: every module needs a string 'type', got " + JsonSnippet(m));
    }
    Module module;
    module.type = m["type"].get<std::string>();
    if (m.contains("path") && m["path"].is_string()) module.path = m["path"].get<std::string>();
    modules.push_back(std::move(module));
  }
  return modules;
}

}  // namespace

Result<std::optional<SentencePooling>> ParseSentencePooling(
    const std::optional<std::string>& modules_json,
    const std::function<std::optional<std::string>(const std::string&)>& read) {
  if (!modules_json) return std::optional<SentencePooling>();
  auto modules = ReadModules(*modules_json);
  if (!modules.ok()) return modules.status();
  SentencePooling out;
  bool have_pooling = false;
  for (const Module& m : *modules) {
    if (EndsWith(m.type, ".Transformer") || m.type == "Transformer") continue;
    if (EndsWith(m.type, ".Normalize") || m.type == "Normalize") {
      out.normalize = true;
      continue;
    }
    if (EndsWith(m.type, ".Pooling") || m.type == "Pooling") {
      have_pooling = true;
      out.pooling_path = m.path;
      const std::string name = (m.path.empty() ? "" : m.path + "/") + "config.json";
      const std::optional<std::string> text = read(name);
      if (!text) return InvalidArgument("modules.json names a Pooling module, but " + name + " is missing");
      auto parsed = ParseUntrustedJson(*text);
      if (!parsed.ok()) return parsed.status().WithContext(name);
      const json& c = *parsed;
      if (!c.is_object()) return InvalidArgument(name + " must be an object");
      auto flag = [&c](const char* key) { return c.contains(key) && c[key].is_boolean() && c[key].get<bool>(); };
      std::vector<PoolingMode> modes;
      if (flag("pooling_mode_cls_token")) modes.push_back(PoolingMode::kCls);
      if (flag("pooling_mode_mean_tokens")) modes.push_back(PoolingMode::kMean);
      if (flag("pooling_mode_max_tokens")) modes.push_back(PoolingMode::kMax);
      if (flag("pooling_mode_lasttoken")) modes.push_back(PoolingMode::kLastToken);
      if (flag("pooling_mode_mean_sqrt_len_tokens")) out.unsupported.push_back("pooling_mode_mean_sqrt_len_tokens");
      if (flag("pooling_mode_weightedmean_tokens")) out.unsupported.push_back("pooling_mode_weightedmean_tokens");
      if (c.contains("include_prompt") && c["include_prompt"].is_boolean() && !c["include_prompt"].get<bool>()) {
        out.unsupported.push_back("include_prompt: false");
      }
      if (modes.size() > 1) out.unsupported.push_back("several pooling modes at once (concatenated)");
      if (modes.empty() && out.unsupported.empty()) out.unsupported.push_back("no pooling mode set");
      if (!modes.empty()) out.mode = modes.front();
      continue;
    }
    out.unsupported.push_back(m.type);
  }
  if (!have_pooling) out.unsupported.push_back("no Pooling module");
  return std::optional<SentencePooling>(std::move(out));
}

std::vector<std::string> SentencePoolingFiles(const std::string& modules_json) {
  std::vector<std::string> files;
  auto modules = ReadModules(modules_json);
  if (!modules.ok()) return files;
  for (const Module& m : *modules) {
    if (EndsWith(m.type, "Pooling")) files.push_back((m.path.empty() ? "" : m.path + "/") + "config.json");
  }
  return files;
}

std::string_view PoolingModeName(PoolingMode mode) {
  switch (mode) {
    case PoolingMode::kCls: return "cls";
    case PoolingMode::kMean: return "mean";
    case PoolingMode::kMax: return "max";
    case PoolingMode::kLastToken: return "last";
  }
  return "unknown";
}

}  // namespace ferry::io
