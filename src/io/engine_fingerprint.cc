#include "io/engine_fingerprint.h"

#include "io/json_reader.h"

namespace ferry::io {

nlohmann::json EngineFingerprint::ToJson() const {
  nlohmann::json j = nlohmann::json::object();
  j["device"] = device;
  j["ferry_version"] = ferry_version;
  j["weight_layout_version"] = weight_layout_version;
  if (!cpu_isa.empty()) j["cpu_isa"] = cpu_isa;
  if (!gpu.empty()) j["gpu"] = gpu;
  if (!arch.empty()) j["arch"] = arch;
  nlohmann::json libraries = nlohmann::json::object();
  if (!onednn_version.empty()) libraries["onednn"] = onednn_version;
  if (cuda_runtime_version != 0) libraries["cuda_runtime"] = cuda_runtime_version;
  if (cublaslt_version != 0) libraries["cublaslt"] = cublaslt_version;
  if (!libraries.empty()) j["libraries"] = libraries;
  return j;
}

Result<EngineFingerprint> EngineFingerprint::FromJson(const nlohmann::json& j) {
  FERRY_ASSIGN_OR_RETURN(const JsonReader r, JsonReader::Open(j, "engine fingerprint", ""));
  EngineFingerprint fp;
  FERRY_RETURN_IF_ERROR(r.String("device", fp.device));
  FERRY_RETURN_IF_ERROR(r.String("ferry_version", fp.ferry_version));
  FERRY_RETURN_IF_ERROR(r.Integer("weight_layout_version", fp.weight_layout_version));
  FERRY_RETURN_IF_ERROR(r.String("cpu_isa", fp.cpu_isa));
  FERRY_RETURN_IF_ERROR(r.String("gpu", fp.gpu));
  FERRY_RETURN_IF_ERROR(r.String("arch", fp.arch));
  if (r.Find("libraries") != nullptr) {
    FERRY_ASSIGN_OR_RETURN(const JsonReader libs, r.Object("libraries"));
    FERRY_RETURN_IF_ERROR(libs.String("onednn", fp.onednn_version));
    FERRY_RETURN_IF_ERROR(libs.Integer("cuda_runtime", fp.cuda_runtime_version));
    FERRY_RETURN_IF_ERROR(libs.Integer("cublaslt", fp.cublaslt_version));
  }
  return fp;
}

}  // namespace ferry::io
