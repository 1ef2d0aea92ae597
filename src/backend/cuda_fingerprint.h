// What a GPU engine is tied to: the GPU architecture its weights were laid out and its GEMM
// algorithms tuned for, and the cuBLASLt whose algorithm ids it stores. CudaBackend's
// Fingerprint and CheckFingerprint; CUDA builds only.
#pragma once

#include "core/status.h"
#include "io/engine_fingerprint.h"

namespace ferry::backend {

// The device-specific fingerprint of GPU `device` (Unavailable without it).
Result<io::EngineFingerprint> CudaFingerprint(int device);
// FailedPrecondition, naming the fix, when an engine with `fingerprint` cannot run on GPU
// `device`: another architecture, or another cuBLASLt version.
Status CheckCudaFingerprint(const io::EngineFingerprint& fingerprint, int device);

}  // namespace ferry::backend
