#include "engine/engine_fingerprint.h"

#include <string>

#include "core/version.h"
#include "engine/engine.h"

namespace ferry::engine {

Result<io::EngineFingerprint> CurrentFingerprint(const backend::Backend& backend) {
  FERRY_ASSIGN_OR_RETURN(io::EngineFingerprint fp, backend.Fingerprint());
  fp.ferry_version = std::string(kVersion);
  fp.weight_layout_version = io::kWeightLayoutVersion;
  return fp;
}

Status CheckEngineDevice(const io::EngineFingerprint& fp, const DeviceSpec& device) {
  if (fp.weight_layout_version != io::kWeightLayoutVersion) {
    return FailedPrecondition("engine uses weight layout version " + std::to_string(fp.weight_layout_version) +
                              ", this ferry reads version " + std::to_string(io::kWeightLayoutVersion));
  }
  if (fp.device == "cpu") {
    if (device.is_cuda()) {
      return FailedPrecondition("engine was built for the CPU; build a GPU engine with `ferry build --device cuda`, "
                                "or run the checkpoint itself with --device " + device.ToString());
    }
    return Status::Ok();
  }
  if (fp.device != "cuda") return FailedPrecondition("engine was built for an unknown device '" + fp.device + "'");
  if (device.is_cpu()) {
    return FailedPrecondition("engine was built for a GPU (" + fp.arch + "); load it with --device cuda");
  }
  return Status::Ok();
}

Status CheckFingerprint(const io::EngineFingerprint& fp, const DeviceSpec& device) {
  FERRY_RETURN_IF_ERROR(CheckEngineDevice(fp, device));
  EngineOptions options;
  options.device = device;
  auto backend = MakeBackend(options);
  // Only a GPU backend can fail to come up (no GPU, or none of this index).
  if (!backend.ok()) return backend.status().WithContext("engine was built for a GPU (" + fp.arch + ")");
  return (*backend)->CheckFingerprint(fp);
}

}  // namespace ferry::engine
