// What an engine file is tied to: the device kind it was laid out for and the details that
// make its weights and tuned choices valid there (CPU ISA; GPU architecture, CUDA runtime
// and cuBLASLt versions). The engine header carries it so a loader can refuse an engine
// before reading the manifest; the manifest keeps a copy. The backend that builds an engine
// fills it in and the backend that loads one checks it (backend::Backend::Fingerprint,
// CheckFingerprint); docs/engine-format.md shows both forms.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>

#include "core/status.h"

namespace ferry::io {

// The version of the weight layouts the backends write; an engine of another version is
// refused (its blobs would be read in the wrong layout).
inline constexpr int kWeightLayoutVersion = 1;

// Value type. Fields that do not apply to the device are empty or zero and are not written.
struct EngineFingerprint {
  std::string device;  // "cpu" or "cuda"; any other name is a device this ferry does not know
  std::string ferry_version;
  int weight_layout_version = 0;
  // CPU engines.
  std::string cpu_isa;         // "avx512", "avx2" or "baseline"
  std::string onednn_version;  // "libraries": {"onednn": ...}
  // GPU engines.
  std::string gpu;                // the device's name, e.g. "NVIDIA H200"
  std::string arch;               // "sm_90"
  int cuda_runtime_version = 0;   // "libraries": {"cuda_runtime": ...}, e.g. 13000
  uint64_t cublaslt_version = 0;  // "libraries": {"cublaslt": ...}

  nlohmann::json ToJson() const;
  // Fields absent from `j` keep their defaults (a fingerprint names only what its device
  // needs); a field of the wrong type is DataLoss naming it.
  static Result<EngineFingerprint> FromJson(const nlohmann::json& j);
  bool operator==(const EngineFingerprint&) const = default;
};

}  // namespace ferry::io
