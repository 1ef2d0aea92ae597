// Helpers for the tokenizer tests: fixture files, cases.json and reference.safetensors.
#pragma once

#include <cstdint>
#include <cstring>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "test_util.h"

namespace ferry::tokenizer::testing {

inline std::string ReadFileOrEmpty(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

struct TokenizerCase {
  std::string text;
  std::vector<int32_t> ids;
};

// cases.json of tokenizers/<name>.
inline std::vector<TokenizerCase> LoadCases(const std::string& name) {
  const std::string text = ReadFileOrEmpty(ferry::testing::FixturePath("tokenizers/" + name + "/cases.json"));
  std::vector<TokenizerCase> cases;
  const nlohmann::json parsed = nlohmann::json::parse(text, nullptr, false);
  if (!parsed.is_array()) return cases;
  for (const auto& c : parsed) {
    cases.push_back({c.at("text").get<std::string>(), c.at("ids").get<std::vector<int32_t>>()});
  }
  return cases;
}

// The tokenizer files of a fixture folder, optionally leaving some out.
inline std::map<std::string, std::string> LoadFiles(const std::string& relative_dir,
                                                    const std::vector<std::string>& exclude = {}) {
  std::map<std::string, std::string> files;
  for (const char* name : {"tokenizer.json", "tokenizer.model", "tokenizer_config.json",
                           "special_tokens_map.json", "generation_config.json"}) {
    bool skip = false;
    for (const auto& e : exclude) skip = skip || e == name;
    if (skip) continue;
    std::ifstream probe(ferry::testing::FixturePath(relative_dir + "/" + name), std::ios::binary);
    if (!probe) continue;
    files[name] = ReadFileOrEmpty(ferry::testing::FixturePath(relative_dir + "/" + name));
  }
  return files;
}

// A minimal safetensors reader: 8-byte little-endian header length, JSON header, raw data.
// Returns the int32 tensor `key`, or nullopt.
inline std::optional<std::vector<int32_t>> ReadInt32Tensor(const std::string& path, const std::string& key) {
  const std::string bytes = ReadFileOrEmpty(path);
  if (bytes.size() < 8) return std::nullopt;
  uint64_t header_size = 0;
  for (int i = 7; i >= 0; --i) header_size = (header_size << 8) | static_cast<unsigned char>(bytes[i]);
  if (8 + header_size > bytes.size()) return std::nullopt;
  const nlohmann::json header = nlohmann::json::parse(bytes.substr(8, header_size), nullptr, false);
  if (!header.is_object() || !header.contains(key)) return std::nullopt;
  const auto& entry = header[key];
  if (entry.value("dtype", "") != "I32") return std::nullopt;
  const auto offsets = entry.at("data_offsets").get<std::vector<uint64_t>>();
  const size_t begin = 8 + header_size + offsets[0];
  const size_t count = (offsets[1] - offsets[0]) / 4;
  if (begin + count * 4 > bytes.size()) return std::nullopt;
  std::vector<int32_t> values(count);
  std::memcpy(values.data(), bytes.data() + begin, count * 4);  // the test hosts are little-endian
  return values;
}

}  // namespace ferry::tokenizer::testing
