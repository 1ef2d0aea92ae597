// Every config key can also come from the environment: FERRY_ followed by the key's path in
// capitals, dots and indices as underscores (listener.port → FERRY_LISTENER_PORT,
// models[0].batching.max_num_seqs → FERRY_MODELS_0_BATCHING_MAX_NUM_SEQS). A variable's
// value is read as YAML (FERRY_CORS_ALLOWED_ORIGINS='["https://ui.example.com"]'). The
// environment wins over the file and the command line over both. A FERRY_ variable under
// one of the config's sections that names no key is an error, as an unknown key is.
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>

#include "core/status.h"

namespace ferry::serve {

// Thread-compatible; one per parse.
class ConfigEnvironment {
 public:
  // The process's FERRY_* variables, or `vars` (tests).
  explicit ConfigEnvironment(const std::map<std::string, std::string>* vars = nullptr);

  // FERRY_LISTENER_PORT for "listener.port"; FERRY_MODELS_0_PATH for "models[0].path".
  static std::string VarName(std::string_view key_path);

  // The value set for `key_path`, if any (and remembers that it was used).
  std::optional<std::string> Get(std::string_view key_path);
  // Whether any variable names a key below `key_path` (a section the file may not have).
  bool HasUnder(std::string_view key_path) const;
  // InvalidArgument naming the first FERRY_<SECTION>_... variable no key consumed.
  Status CheckAllUsed() const;

 private:
  std::map<std::string, std::string> vars_;
  std::set<std::string> used_;
};

}  // namespace ferry::serve
