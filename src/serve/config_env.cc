#include "serve/config_env.h"

#include <cctype>
#include <cstdlib>

extern char** environ;

namespace ferry::serve {

namespace {

// The config's top-level sections: variables below them must name keys.
constexpr std::string_view kSections[] = {"FERRY_LISTENER_", "FERRY_AUTH_", "FERRY_TENANTS_", "FERRY_MODELS_",
                                          "FERRY_LOG_",      "FERRY_API_",  "FERRY_CORS_"};

}  // namespace

ConfigEnvironment::ConfigEnvironment(const std::map<std::string, std::string>* vars) {
  if (vars != nullptr) {
    for (const auto& [k, v] : *vars) {
      if (k.rfind("FERRY_", 0) == 0) vars_[k] = v;
    }
    return;
  }
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string entry(*e);
    const size_t eq = entry.find('=');
    if (eq == std::string::npos || entry.rfind("FERRY_", 0) != 0) continue;
    vars_[entry.substr(0, eq)] = entry.substr(eq + 1);
  }
}

std::string ConfigEnvironment::VarName(std::string_view key_path) {
  std::string name = "FERRY_";
  for (char c : key_path) {
    if (c == '.' || c == '[' || c == ']') {
      if (name.back() != '_') name += '_';
    } else {
      name += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    }
  }
  while (name.back() == '_') name.pop_back();
  return name;
}

std::optional<std::string> ConfigEnvironment::Get(std::string_view key_path) {
  const std::string name = VarName(key_path);
  auto it = vars_.find(name);
  if (it == vars_.end()) return std::nullopt;
  used_.insert(name);
  return it->second;
}

bool ConfigEnvironment::HasUnder(std::string_view key_path) const {
  const std::string prefix = VarName(key_path) + "_";
  auto it = vars_.lower_bound(prefix);
  return it != vars_.end() && it->first.rfind(prefix, 0) == 0;
}

Status ConfigEnvironment::CheckAllUsed() const {
  for (const auto& [name, value] : vars_) {
    if (used_.count(name) != 0) continue;
    for (std::string_view section : kSections) {
      if (name.rfind(section, 0) == 0) {
        return InvalidArgument("environment variable " + name + " names no config key (FERRY_ followed by a key's "
                               "path, e.g. FERRY_LISTENER_PORT or FERRY_MODELS_0_BATCHING_MAX_NUM_SEQS)");
      }
    }
  }
  return Status::Ok();
}

}  // namespace ferry::serve
