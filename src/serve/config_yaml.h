// The YAML reading helpers of the server config (serve/config.cc, serve/qos_config.cc):
// scalars converted with the key path in every message, mappings with a fixed set of keys
// (anything else is an error), sequences with their item paths, and FERRY_* environment
// variables applied as keys while a parse has set t_env (config_env.h). Internal to serve.
#pragma once

#include <yaml-cpp/yaml.h>

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <initializer_list>
#include <limits>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"
#include "serve/config_env.h"

namespace ferry::serve::config_yaml {

// The environment of the parse under way (FERRY_* variables as config keys), or null.
inline thread_local ConfigEnvironment* t_env = nullptr;

// Keys that hold a mapping or a list: a FERRY_ variable below one creates it when the file
// does not have it.
inline bool IsSectionKey(std::string_view key) {
  for (std::string_view s : {"listener", "auth", "models", "tenants", "log", "api", "cors", "batching",
                             "dynamic_batching", "default_queue_policy", "tls", "long_inputs", "variants", "qos"}) {
    if (key == s) return true;
  }
  return false;
}

// Keys that hold a list (the others among IsSectionKey hold a mapping).
inline bool IsListKey(std::string_view key) { return key == "models" || key == "tenants" || key == "variants"; }

// ---- Messages --------------------------------------------------------------------------

inline std::string Where(const YAML::Mark& mark) {
  if (mark.is_null()) return "";
  return " (line " + std::to_string(mark.line + 1) + ", column " + std::to_string(mark.column + 1) + ")";
}

inline Status ErrorAt(const YAML::Node& node, const std::string& path, const std::string& message) {
  return InvalidArgument(path + ": " + message + Where(node.Mark()));
}

inline std::string KindName(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Null: return "null";
    case YAML::NodeType::Scalar: return "a scalar";
    case YAML::NodeType::Sequence: return "a sequence";
    case YAML::NodeType::Map: return "a mapping";
    case YAML::NodeType::Undefined: break;
  }
  return "nothing";
}

// A scalar as messages quote it; long values keep only their head.
inline std::string Quoted(const std::string& text) {
  constexpr size_t kMaxChars = 60;
  if (text.size() <= kMaxChars) return "'" + text + "'";
  return "'" + text.substr(0, kMaxChars) + "...'";
}

inline std::string Got(const YAML::Node& node) {
  return node.IsScalar() ? Quoted(node.Scalar()) : KindName(node);
}

// ---- Scalars ---------------------------------------------------------------------------
// Conversions are done here rather than by yaml-cpp's as<T>() so that every failure names
// the key path and says what was expected.

inline Result<std::string> ReadString(const YAML::Node& node, const std::string& path) {
  if (!node.IsScalar()) return ErrorAt(node, path, "expected a string, got " + KindName(node));
  return node.Scalar();
}

template <typename T>
inline Result<T> ReadInt(const YAML::Node& node, const std::string& path) {
  if (!node.IsScalar()) return ErrorAt(node, path, "expected an integer, got " + KindName(node));
  const std::string& text = node.Scalar();
  int64_t value = 0;
  const char* begin = text.data();
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(begin, end, value);
  if (ec == std::errc::result_out_of_range ||
      (ec == std::errc() && ptr == end &&
       (value < std::numeric_limits<T>::min() || value > std::numeric_limits<T>::max()))) {
    return ErrorAt(node, path, "integer out of range: " + Quoted(text));
  }
  if (ec != std::errc() || ptr != end || text.empty()) {
    return ErrorAt(node, path, "expected an integer, got " + Quoted(text));
  }
  return static_cast<T>(value);
}

// A finite decimal number ("0.85", "30", "1e3"), for ratios and durations in seconds.
inline Result<double> ReadNumber(const YAML::Node& node, const std::string& path) {
  if (!node.IsScalar()) return ErrorAt(node, path, "expected a number, got " + KindName(node));
  const std::string& text = node.Scalar();
  double value = 0;
  const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || ptr != text.data() + text.size() || text.empty() || !std::isfinite(value)) {
    return ErrorAt(node, path, "expected a number, got " + Quoted(text));
  }
  return value;
}

// YAML 1.2's core booleans only: "yes"/"on" are the YAML 1.1 spellings that surprise people.
inline Result<bool> ReadBool(const YAML::Node& node, const std::string& path) {
  if (node.IsScalar()) {
    const std::string& text = node.Scalar();
    if (text == "true" || text == "True" || text == "TRUE") return true;
    if (text == "false" || text == "False" || text == "FALSE") return false;
  }
  return ErrorAt(node, path, "expected true or false, got " + Got(node));
}

template <typename E>
inline Result<E> ReadEnum(const YAML::Node& node, const std::string& path,
                   std::initializer_list<std::pair<std::string_view, E>> names) {
  std::string expected;
  for (const auto& [name, value] : names) {
    if (node.IsScalar() && node.Scalar() == name) return value;
    expected += (expected.empty() ? "" : ", ") + std::string(name);
  }
  return ErrorAt(node, path, "expected one of " + expected + "; got " + Got(node));
}

// The value of the environment variable a `*_env` key names.
inline Result<std::string> ReadEnvValue(const YAML::Node& node, const std::string& path) {
  FERRY_ASSIGN_OR_RETURN(const std::string var, ReadString(node, path));
  if (var.empty()) return ErrorAt(node, path, "expected the name of an environment variable");
  const char* value = std::getenv(var.c_str());
  if (value == nullptr) return ErrorAt(node, path, "environment variable " + var + " is not set");
  if (*value == '\0') return ErrorAt(node, path, "environment variable " + var + " is empty");
  return std::string(value);
}

// ---- Containers ------------------------------------------------------------------------

struct Entry {
  std::string key;
  YAML::Node key_node;
  YAML::Node value;
};

// The entries of a mapping in file order. Null reads as an empty mapping. Duplicate keys
// are errors: yaml-cpp would keep both and lookups would see only one.
inline Result<std::vector<Entry>> ReadEntries(const YAML::Node& node, const std::string& path) {
  std::vector<Entry> entries;
  if (node.IsNull()) return entries;
  if (!node.IsMap()) return ErrorAt(node, path, "expected a mapping, got " + KindName(node));
  std::set<std::string> seen;
  for (const auto& item : node) {
    const std::string key_path = path + (path.empty() ? "" : ".");
    if (!item.first.IsScalar()) {
      return ErrorAt(item.first, key_path + "<key>", "expected a scalar key, got " + KindName(item.first));
    }
    const std::string& key = item.first.Scalar();
    if (!seen.insert(key).second) return ErrorAt(item.first, key_path + key, "duplicate key");
    entries.push_back(Entry{key, item.first, item.second});
  }
  return entries;
}

// Items of a sequence with their paths ("tenants[2]"). Null reads as an empty sequence.
inline Result<std::vector<std::pair<std::string, YAML::Node>>> ReadItems(const YAML::Node& node,
                                                                  const std::string& path) {
  std::vector<std::pair<std::string, YAML::Node>> items;
  if (node.IsNull()) return items;
  if (!node.IsSequence()) return ErrorAt(node, path, "expected a sequence, got " + KindName(node));
  for (const auto& item : node) {
    items.emplace_back(path + "[" + std::to_string(items.size()) + "]", item);
  }
  // Items the environment adds past the file's (FERRY_MODELS_1_NAME, ...).
  while (t_env != nullptr) {
    const std::string item_path = path + "[" + std::to_string(items.size()) + "]";
    if (!t_env->HasUnder(item_path)) break;
    items.emplace_back(item_path, YAML::Node(YAML::NodeType::Map));
  }
  return items;
}

// One mapping with a fixed set of keys: anything else is an error, so a typo never falls
// back silently to a default.
class MapReader {
 public:
  static Result<MapReader> Open(const YAML::Node& node, std::string path,
                                std::initializer_list<std::string_view> allowed) {
    return Open(node, std::move(path), std::vector<std::string_view>(allowed));
  }
  static Result<MapReader> Open(const YAML::Node& node, std::string path, const std::vector<std::string_view>& allowed) {
    FERRY_ASSIGN_OR_RETURN(std::vector<Entry> entries, ReadEntries(node, path));
    MapReader reader(node, std::move(path));
    for (Entry& entry : entries) {
      bool known = false;
      for (std::string_view key : allowed) known = known || key == entry.key;
      if (!known) return ErrorAt(entry.key_node, reader.Path(entry.key), "unknown key");
      reader.entries_.push_back(std::move(entry));
    }
    if (t_env != nullptr) FERRY_RETURN_IF_ERROR(reader.ApplyEnvironment(allowed));
    return reader;
  }

  std::string Path(std::string_view key) const {
    return path_.empty() ? std::string(key) : path_ + "." + std::string(key);
  }

  const YAML::Node* Find(std::string_view key) const {
    for (const Entry& entry : entries_) {
      if (entry.key == key) return &entry.value;
    }
    return nullptr;
  }

  Status Require(std::string_view key) const {
    if (Find(key) != nullptr) return Status::Ok();
    return ErrorAt(node_, path_, "missing required key '" + std::string(key) + "'");
  }

  Status String(std::string_view key, std::string& out) const {
    const YAML::Node* node = Find(key);
    if (node == nullptr) return Status::Ok();
    FERRY_ASSIGN_OR_RETURN(out, ReadString(*node, Path(key)));
    return Status::Ok();
  }

  template <typename T>
  Status Int(std::string_view key, T& out) const {
    const YAML::Node* node = Find(key);
    if (node == nullptr) return Status::Ok();
    FERRY_ASSIGN_OR_RETURN(out, ReadInt<T>(*node, Path(key)));
    return Status::Ok();
  }

  Status Number(std::string_view key, double& out) const {
    const YAML::Node* node = Find(key);
    if (node == nullptr) return Status::Ok();
    FERRY_ASSIGN_OR_RETURN(out, ReadNumber(*node, Path(key)));
    return Status::Ok();
  }

  // An optional number: set when the key is present.
  Status Number(std::string_view key, std::optional<double>& out) const {
    const YAML::Node* node = Find(key);
    if (node == nullptr) return Status::Ok();
    FERRY_ASSIGN_OR_RETURN(out, ReadNumber(*node, Path(key)));
    return Status::Ok();
  }

  // The mapping's keys in file order, with their nodes.
  const std::vector<Entry>& entries() const { return entries_; }

  Status Bool(std::string_view key, bool& out) const {
    const YAML::Node* node = Find(key);
    if (node == nullptr) return Status::Ok();
    FERRY_ASSIGN_OR_RETURN(out, ReadBool(*node, Path(key)));
    return Status::Ok();
  }

  // Appends the strings of a sequence.
  Status AppendStrings(std::string_view key, std::vector<std::string>& out) const {
    const YAML::Node* node = Find(key);
    if (node == nullptr) return Status::Ok();
    FERRY_ASSIGN_OR_RETURN(const auto items, ReadItems(*node, Path(key)));
    for (const auto& [item_path, item] : items) {
      FERRY_ASSIGN_OR_RETURN(std::string value, ReadString(item, item_path));
      out.push_back(std::move(value));
    }
    return Status::Ok();
  }

  // Appends the value of the environment variable that `key` names.
  Status AppendEnv(std::string_view key, std::vector<std::string>& out) const {
    const YAML::Node* node = Find(key);
    if (node == nullptr) return Status::Ok();
    FERRY_ASSIGN_OR_RETURN(std::string value, ReadEnvValue(*node, Path(key)));
    out.push_back(std::move(value));
    return Status::Ok();
  }

 private:
  MapReader(const YAML::Node& node, std::string path) : node_(node), path_(std::move(path)) {}

  // FERRY_<PATH> variables replace (or add) keys; a section with variables below it that
  // the file lacks is created empty, for its own reader to fill.
  Status ApplyEnvironment(const std::vector<std::string_view>& allowed) {
    for (std::string_view key : allowed) {
      const std::string key_path = Path(key);
      YAML::Node value;
      if (std::optional<std::string> text = t_env->Get(key_path)) {
        try {
          value = YAML::Load(*text);
        } catch (const YAML::Exception& e) {
          return InvalidArgument(ConfigEnvironment::VarName(key_path) + " (" + key_path + "): invalid YAML: " + e.msg);
        }
      } else if (Find(key) == nullptr && IsSectionKey(key) && t_env->HasUnder(key_path)) {
        value = YAML::Node(IsListKey(key) ? YAML::NodeType::Sequence : YAML::NodeType::Map);
      } else {
        continue;
      }
      bool replaced = false;
      for (Entry& e : entries_) {
        if (e.key == key) {
          e.value = value;
          replaced = true;
        }
      }
      if (!replaced) entries_.push_back(Entry{std::string(key), YAML::Node(std::string(key)), value});
    }
    return Status::Ok();
  }

  YAML::Node node_;
  std::string path_;
  std::vector<Entry> entries_;
};

}  // namespace ferry::serve::config_yaml
