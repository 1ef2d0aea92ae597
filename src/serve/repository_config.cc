#include "serve/repository_config.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "io/engine_file.h"
#include "serve/qos_config.h"

namespace ferry::serve {

namespace fs = std::filesystem;
using namespace config_yaml;  // NOLINT(google-build-using-namespace): the file is its client

std::vector<int64_t> VersionPolicy::Select(const std::vector<int64_t>& available,
                                           const std::vector<int64_t>& failed) const {
  std::vector<int64_t> out;
  switch (kind) {
    case Kind::kAll: return available;
    case Kind::kSpecific:
      for (int64_t v : available) {
        if (std::find(specific.begin(), specific.end(), v) != specific.end()) out.push_back(v);
      }
      return out;
    case Kind::kLatest:
      for (auto it = available.rbegin(); it != available.rend() && static_cast<int>(out.size()) < latest; ++it) {
        if (std::find(failed.begin(), failed.end(), *it) == failed.end()) out.push_back(*it);
      }
      std::reverse(out.begin(), out.end());
      return out;
  }
  return out;
}

std::string VersionPolicy::ToString() const {
  if (kind == Kind::kAll) return "all";
  if (kind == Kind::kLatest) return "latest: " + std::to_string(latest);
  std::string s = "specific: [";
  for (size_t i = 0; i < specific.size(); ++i) s += (i > 0 ? ", " : "") + std::to_string(specific[i]);
  return s + "]";
}

Status ParseRepositoryConfig(const YAML::Node& node, const std::string& path, RepositoryConfig& out) {
  if (node.IsScalar()) {
    FERRY_ASSIGN_OR_RETURN(out.path, ReadString(node, path));
    return Status::Ok();
  }
  FERRY_ASSIGN_OR_RETURN(const MapReader m,
                         MapReader::Open(node, path, {"path", "poll_s", "watch", "settle_ms", "drain_timeout_ms"}));
  FERRY_RETURN_IF_ERROR(m.Require("path"));
  FERRY_RETURN_IF_ERROR(m.String("path", out.path));
  FERRY_RETURN_IF_ERROR(m.Number("poll_s", out.poll_s));
  FERRY_RETURN_IF_ERROR(m.Bool("watch", out.watch));
  FERRY_RETURN_IF_ERROR(m.Int("settle_ms", out.settle_ms));
  FERRY_RETURN_IF_ERROR(m.Int("drain_timeout_ms", out.drain_timeout_ms));
  return Status::Ok();
}

Status ValidateRepositoryConfig(const RepositoryConfig& config) {
  if (!(config.poll_s >= 0 && config.poll_s <= 86400)) {
    return InvalidArgument("model_repository.poll_s: must be in [0, 86400]");
  }
  if (config.settle_ms < 0 || config.settle_ms > 600000) {
    return InvalidArgument("model_repository.settle_ms: must be in [0, 600000]");
  }
  if (config.drain_timeout_ms < 0) return InvalidArgument("model_repository.drain_timeout_ms: must be >= 0");
  return Status::Ok();
}

namespace {

Status ParsePolicy(const YAML::Node& node, const std::string& path, VersionPolicy& out) {
  if (node.IsScalar()) {
    if (node.Scalar() == "all") {
      out.kind = VersionPolicy::Kind::kAll;
      return Status::Ok();
    }
    return ErrorAt(node, path, "expected all, {latest: N} or {specific: [..]}; got " + Got(node));
  }
  FERRY_ASSIGN_OR_RETURN(const MapReader m, MapReader::Open(node, path, {"latest", "specific", "all"}));
  const int given = (m.Find("latest") != nullptr) + (m.Find("specific") != nullptr) + (m.Find("all") != nullptr);
  if (given != 1) return ErrorAt(node, path, "give exactly one of latest, specific or all");
  if (m.Find("all") != nullptr) {
    out.kind = VersionPolicy::Kind::kAll;
  } else if (m.Find("latest") != nullptr) {
    out.kind = VersionPolicy::Kind::kLatest;
    FERRY_RETURN_IF_ERROR(m.Int("latest", out.latest));
    if (out.latest < 1) return ErrorAt(*m.Find("latest"), m.Path("latest"), "must be at least 1");
  } else {
    out.kind = VersionPolicy::Kind::kSpecific;
    FERRY_ASSIGN_OR_RETURN(const auto items, ReadItems(*m.Find("specific"), m.Path("specific")));
    for (const auto& [item_path, item] : items) {
      FERRY_ASSIGN_OR_RETURN(const int64_t v, ReadInt<int64_t>(item, item_path));
      if (v < 1) return ErrorAt(item, item_path, "versions are positive integers");
      out.specific.push_back(v);
    }
    if (out.specific.empty()) return ErrorAt(node, m.Path("specific"), "name at least one version");
  }
  return Status::Ok();
}

// A positive decimal integer without sign or leading zero.
bool ParseVersion(const std::string& name, int64_t& out) {
  if (name.empty() || name.size() > 18 || name[0] == '0') return false;
  const auto [ptr, ec] = std::from_chars(name.data(), name.data() + name.size(), out);
  return ec == std::errc() && ptr == name.data() + name.size() && out > 0;
}

bool IsModelName(const std::string& name) {
  if (name.empty() || name[0] == '.' || name.size() > 128) return false;
  for (char c : name) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-')) return false;
  }
  return true;
}

}  // namespace

Result<RepositoryModelConfig> LoadRepositoryModelConfig(const std::string& repository, const std::string& name) {
  RepositoryModelConfig out;
  out.model.name = name;
  const std::string file = (fs::path(repository) / name / "config.yaml").string();
  std::error_code ec;
  if (!fs::exists(file, ec)) return out;
  std::ifstream in(file, std::ios::binary);
  if (!in) return NotFound("cannot open " + file);
  std::ostringstream text;
  text << in.rdbuf();
  try {
    const YAML::Node root = YAML::Load(text.str());
    if (root.IsNull()) return out;
    std::vector<std::string_view> keys = {"version_policy"};
    keys.insert(keys.end(), ModelOptionKeys().begin(), ModelOptionKeys().end());
    FERRY_ASSIGN_OR_RETURN(const MapReader m, MapReader::Open(root, "", keys));
    FERRY_RETURN_IF_ERROR(ParseModelOptions(m, out.model));
    if (const YAML::Node* policy = m.Find("version_policy")) {
      FERRY_RETURN_IF_ERROR(ParsePolicy(*policy, "version_policy", out.policy));
    }
  } catch (const YAML::Exception& e) {
    std::string where = e.mark.is_null() ? "" : " at line " + std::to_string(e.mark.line + 1) + ", column " +
                                                    std::to_string(e.mark.column + 1);
    return InvalidArgument(file + ": invalid YAML" + where + ": " + e.msg);
  } catch (const std::exception& e) {
    return InvalidArgument(file + ": " + e.what());
  }
  FERRY_RETURN_IF_ERROR(out.model.batching.Validate().WithContext(file + ": batching"));
  FERRY_RETURN_IF_ERROR(out.model.dynamic_batching.Validate().WithContext(file + ": dynamic_batching"));
  FERRY_RETURN_IF_ERROR(out.model.long_inputs.Validate().WithContext(file + ": long_inputs"));
  if (!(out.model.gpu_memory_utilization >= 0.0 && out.model.gpu_memory_utilization <= 1.0)) {
    return InvalidArgument(file + ": gpu_memory_utilization: must be in [0, 1]");
  }
  return out;
}

std::vector<std::string> ListRepositoryModels(const std::string& repository) {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(repository, ec)) {
    std::error_code ec2;
    const std::string name = entry.path().filename().string();
    if (entry.is_directory(ec2) && IsModelName(name)) names.push_back(name);
  }
  std::sort(names.begin(), names.end());
  return names;
}

std::vector<VersionOnDisk> ListVersions(const std::string& repository, const std::string& name) {
  std::vector<VersionOnDisk> out;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(fs::path(repository) / name, ec)) {
    std::error_code ec2;
    int64_t v = 0;
    if (!entry.is_directory(ec2) || !ParseVersion(entry.path().filename().string(), v)) continue;
    VersionOnDisk d;
    d.version = v;
    d.dir = entry.path().string();
    d.load_path = d.dir;
    std::vector<std::string> parts;
    std::string engine, gguf;
    for (const auto& f : fs::recursive_directory_iterator(entry.path(), ec2)) {
      std::error_code ec3;
      if (!f.is_regular_file(ec3)) continue;
      const auto size = f.file_size(ec3);
      const auto mtime = fs::last_write_time(f.path(), ec3).time_since_epoch().count();
      parts.push_back(fs::relative(f.path(), entry.path(), ec3).string() + ":" + std::to_string(size) + ":" +
                      std::to_string(mtime));
      if (f.path().parent_path() == entry.path() && f.path().extension() == ".engine" &&
          (engine.empty() || f.path().filename() == "model.engine")) {
        engine = f.path().string();
      }
      if (f.path().parent_path() == entry.path() && f.path().extension() == ".gguf" &&
          (gguf.empty() || f.path().filename() == "model.gguf")) {
        gguf = f.path().string();
      }
    }
    std::sort(parts.begin(), parts.end());
    for (const std::string& p : parts) d.signature += p + "\n";
    // An engine file wins; a GGUF file stands in for a checkpoint the folder does not hold.
    if (!engine.empty()) {
      d.load_path = engine;
    } else if (!gguf.empty() && !fs::exists(entry.path() / "config.json", ec2)) {
      d.load_path = gguf;
    }
    out.push_back(std::move(d));
  }
  std::sort(out.begin(), out.end(), [](const VersionOnDisk& a, const VersionOnDisk& b) { return a.version < b.version; });
  return out;
}

}  // namespace ferry::serve
