// The engine manifest: everything in an engine file besides the blobs themselves — the
// model's identity and embedded files, how the engine was built, the tuned kernel choices,
// and where every tensor and packed weight lies. The builder fills one in and writes it,
// the loader and `ferry inspect` read it back; all three see this typed value and never
// the JSON. Parsing validates everything that does not need the blobs' bytes: every field's
// type, every tensor's byte size against its dtype and shape, and (CheckExtents) every
// blob's place in the file. docs/engine-format.md describes each field.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/device_spec.h"
#include "core/dtype.h"
#include "core/precision.h"
#include "core/status.h"
#include "core/tensor.h"
#include "io/engine_fingerprint.h"
#include "io/model_config.h"

namespace ferry::io {

// The engine file format this ferry writes and the newest it reads.
inline constexpr uint32_t kEngineFormatVersion = 1;
// Blobs start on multiples of this, so a mapping of the file hands kernels aligned data.
inline constexpr uint64_t kEngineBlobAlignment = 4096;

// A blob's place in the file: {"offset", "bytes", "crc32c"}.
struct BlobRef {
  uint64_t offset = 0;
  uint64_t bytes = 0;
  uint32_t crc32c = 0;
  nlohmann::json ToJson() const;
  static Result<BlobRef> FromJson(const nlohmann::json& j);
  bool operator==(const BlobRef&) const = default;
};

// A tensor stored as one blob. Parsing checks blob.bytes == dtype size x elements.
struct StoredTensor {
  DType dtype = DType::kF32;
  Shape shape;
  BlobRef blob;
  bool operator==(const StoredTensor&) const = default;
};

// A prepared linear weight as its backend serialized it (Backend::SerializeLinear).
struct StoredLinear {
  nlohmann::json layout = nlohmann::json::object();  // the backend's own description; an object
  std::vector<StoredTensor> blobs;                   // in the order the layout names them
  std::optional<int> small_m_max;                    // the CPU's tuned decode-kernel crossover
  bool operator==(const StoredLinear&) const = default;
};

// One entry of the blob index: every blob of the file, named, for `ferry inspect --verify`.
struct NamedBlob {
  std::string name;  // a tensor key, "KEY#i" for a linear's i-th blob, "file:NAME" for a binary file
  BlobRef blob;
  bool operator==(const NamedBlob&) const = default;
};

// The model's identity. Its full configuration is the embedded config.json.
struct ManifestModel {
  ModelFamily family = ModelFamily::kDecoder;
  std::string model_type;  // config.json's model_type
  std::vector<int> eos_token_ids;
  std::vector<int> bos_token_ids;
  bool operator==(const ManifestModel&) const = default;
};

// What int8 (W8A8) calibration ran on.
struct CalibrationInfo {
  std::string path;  // the calibration text
  int documents = 0;
  int64_t tokens = 0;
  double alpha = 0.5;  // SmoothQuant migration strength
  int layers = 0;      // linears that got smoothing factors
  bool synthetic_token_ids = false;  // a checkpoint without a tokenizer: pseudo-random ids
  nlohmann::json ToJson() const;
  bool operator==(const CalibrationInfo&) const = default;
};

// How the engine was built.
struct ManifestBuild {
  Precision precision = Precision::kFp32;
  DeviceSpec device = DeviceSpec::Cpu();
  std::string weight_format;  // backend::WeightFormatName of the linears' format
  int max_seq_len = 0;        // what preload prepares for
  int max_batch_tokens = 0;
  std::string source;                 // the checkpoint's absolute path
  std::optional<DType> activations;   // GPU engines: the dtype the engine runs in
  std::optional<CalibrationInfo> calibration;  // int8 engines
  std::optional<std::string> fp8_accumulation;  // fp8 engines: "fast" or "exact"
  bool operator==(const ManifestBuild&) const = default;
};

// Value type.
struct EngineManifest {
  uint32_t format_version = kEngineFormatVersion;
  EngineFingerprint fingerprint;
  ManifestModel model;
  std::map<std::string, std::string> files;  // text files of the checkpoint, verbatim; has config.json
  std::map<std::string, BlobRef> binary_files;  // binary ones (tokenizer.model) as blobs
  ManifestBuild build;
  // The backend's report of its tuned choices ({"choice": ..., "linear_shapes": [...]});
  // null when the build did not tune.
  nlohmann::json tuned;
  std::map<std::string, StoredTensor> tensors;
  std::map<std::string, StoredLinear> linears;
  std::vector<NamedBlob> blobs_index;

  nlohmann::json ToJson() const;
  // Validates structure and types; DataLoss naming the field on any error.
  static Result<EngineManifest> FromJson(const nlohmann::json& j);
  // Parses manifest text from a file (nesting bounded, see core/json_limits.h), then FromJson.
  static Result<EngineManifest> Parse(std::string_view text);

  // Every blob the manifest refers to (tensors, linears, binary files, the index), each
  // place once, named by its first mention.
  std::vector<NamedBlob> AllBlobs() const;
  // DataLoss unless every blob starts on a kEngineBlobAlignment boundary and lies inside
  // [data_begin, data_end), without overflow.
  Status CheckExtents(uint64_t data_begin, uint64_t data_end) const;

  bool operator==(const EngineManifest&) const = default;
};

}  // namespace ferry::io
