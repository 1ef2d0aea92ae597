// The model repository's files: the `model_repository:` key of the server config, a
// model's `DIR/NAME/config.yaml` (its serving options and version policy), the versions
// on disk and the signature that says a version's files have stopped changing.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "serve/config.h"
#include "serve/config_yaml.h"

namespace ferry::serve {

// Which of a model's versions are served (Triton's version_policy).
struct VersionPolicy {
  enum class Kind { kLatest, kAll, kSpecific };
  Kind kind = Kind::kLatest;
  int latest = 1;                  // kLatest: the N highest versions that load
  std::vector<int64_t> specific;   // kSpecific: exactly these

  // The versions to serve out of `available` (ascending), skipping `failed` ones for
  // kLatest so a broken newest version leaves the one before it serving.
  std::vector<int64_t> Select(const std::vector<int64_t>& available, const std::vector<int64_t>& failed) const;
  std::string ToString() const;  // "latest: 1", "all", "specific: [1, 3]"
};

// A model of the repository: DIR/NAME/config.yaml read over the defaults.
struct RepositoryModelConfig {
  ModelConfig model;  // name = the directory's; path empty (each version has its own)
  VersionPolicy policy;
};

// `model_repository:` (a path, or a mapping) into `out`.
Status ParseRepositoryConfig(const YAML::Node& node, const std::string& path, RepositoryConfig& out);
Status ValidateRepositoryConfig(const RepositoryConfig& config);

// Reads DIR/NAME/config.yaml (absent: every default). Keys: the per-model serving options
// of the server config and `version_policy`; `name`, `path`, `variants` and `qos` are not
// accepted (the directory names the model, versions are its subdirectories).
Result<RepositoryModelConfig> LoadRepositoryModelConfig(const std::string& repository, const std::string& name);

// The model directories of the repository: names that are valid model names, not hidden.
std::vector<std::string> ListRepositoryModels(const std::string& repository);

// A model's versions on disk: subdirectories named by a positive integer (so "3.tmp" or
// ".incoming-3" being filled are never seen), ascending, with what each holds (an engine
// file — the one regular file ending in ".engine" or named "model.engine" — or the
// directory itself as a checkpoint).
struct VersionOnDisk {
  int64_t version = 0;
  std::string dir;
  std::string load_path;  // engine file or checkpoint directory
  std::string signature;  // names, sizes and modification times of its files
};
std::vector<VersionOnDisk> ListVersions(const std::string& repository, const std::string& name);

}  // namespace ferry::serve
