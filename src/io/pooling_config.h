// How a sentence-transformers model turns token states into one embedding: modules.json
// and its Pooling module's config.json (1_Pooling/config.json), plus its Normalize module.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace ferry::io {

enum class PoolingMode { kCls, kMean, kMax, kLastToken };

struct SentencePooling {
  PoolingMode mode = PoolingMode::kMean;
  bool normalize = false;  // a Normalize module follows the pooling
  std::string pooling_path;  // the Pooling module's folder ("1_Pooling")
  // Modules after the transformer that ferry does not run (Dense, LayerNorm, ...) and
  // pooling settings it does not implement; embeddings are refused while any is listed.
  std::vector<std::string> unsupported;
};

// The names a checkpoint keeps these settings under: "modules.json" and, once it is read,
// the Pooling module's "<path>/config.json".
inline constexpr const char* kModulesFile = "modules.json";

// Parses modules.json; `read` returns the text of another file of the checkpoint by its
// relative name (nullopt when absent). Returns nullopt when `modules_json` is nullopt (not a
// sentence-transformers checkpoint). InvalidArgument for malformed files.
Result<std::optional<SentencePooling>> ParseSentencePooling(
    const std::optional<std::string>& modules_json,
    const std::function<std::optional<std::string>(const std::string&)>& read);

// The files of a sentence-transformers checkpoint that ParseSentencePooling reads, by
// relative name, from modules.json's text (for embedding them in an engine file).
std::vector<std::string> SentencePoolingFiles(const std::string& modules_json);

std::string_view PoolingModeName(PoolingMode mode);

}  // namespace ferry::io
