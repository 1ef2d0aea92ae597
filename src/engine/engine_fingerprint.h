// Fingerprints of engine files: what this process writes into an engine it builds, and
// whether an engine may run here. The device-specific parts belong to the backends
// (backend::Backend::Fingerprint, CheckFingerprint); this adds ferry's own versions and the
// checks that need no device.
#pragma once

#include "backend/backend.h"
#include "core/device_spec.h"
#include "core/status.h"
#include "io/engine_fingerprint.h"

namespace ferry::engine {

// The fingerprint an engine laid out and tuned by `backend` records.
Result<io::EngineFingerprint> CurrentFingerprint(const backend::Backend& backend);

// The checks that need no device, made before a backend exists: the weight layout version,
// and that the engine is for the kind of device asked for (a CPU engine with --device cuda,
// a GPU engine on the CPU). FailedPrecondition naming the command that fixes it.
Status CheckEngineDevice(const io::EngineFingerprint& fingerprint, const DeviceSpec& device);

// Whether an engine with `fingerprint` runs on `device` here: CheckEngineDevice, then the
// checks of a backend made for `device` (CPU ISA; GPU architecture and cuBLASLt version).
Status CheckFingerprint(const io::EngineFingerprint& fingerprint, const DeviceSpec& device);

}  // namespace ferry::engine
