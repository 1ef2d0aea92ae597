// `ferry build`: compiles a Hugging Face checkpoint into an engine file for one device
// and precision (fused and pre-packed weights, quantized and calibrated variants,
// tokenizer and config embedded), in the spirit of TensorRT's builder.
#pragma once

#include <optional>
#include <string>

#include "core/device_spec.h"
#include "core/precision.h"
#include "core/status.h"
#include "io/engine_manifest.h"

namespace ferry {
class Progress;
}  // namespace ferry

namespace ferry::engine {

struct BuildOptions {
  Precision precision = Precision::kFp32;  // fp8 on GPUs only
  DeviceSpec device = DeviceSpec::Cpu();  // or the GPU the engine is laid out and tuned on
  std::string calibration_path;    // text or JSONL ("text" fields); empty: the built-in default
  // Calibration budget: tokens run through the fp32 model, the last document cut to fit.
  // 2048 by default: on the demo decoder, int8 logits against fp32 reach a mean |error| of
  // 0.037 at 2048 tokens and 0.035 at 16384 (docs/performance.md), while each 1,000 tokens
  // cost ~10 s for the 1b shape on 2 cores.
  int calibration_tokens = 2048;
  float smooth_alpha = 0.5f;       // SmoothQuant migration strength
  int max_seq_len = 0;             // recorded for preload (0: the model's context, capped at 4096)
  int max_batch_tokens = 0;        // recorded for preload (0: max_seq_len)
  int threads = 0;
  bool tune = true;                // time kernel candidates per weight shape and record the winners
  // fp8 engines: GEMMs accumulate at the tensor cores' own precision (cuBLASLt's fast
  // accumulation) rather than promoting partial sums to f32. On an H200 (llama-3-8B linears)
  // 1.03-1.18x the GEMM rate from 256 rows up (two runs), level below; the accumulation error (relative
  // RMS 1e-3 to 3e-3 against an f32 GEMM of the same e4m3 values) is far below what rounding
  // the operands to e4m3 adds. vLLM's fp8 GEMMs accumulate the same way. False: exact.
  bool fp8_fast_accumulation = true;
  // Reports the phases (calibrate, read, tune, write) with their bytes; null: silent.
  Progress* progress = nullptr;
};

struct BuildReport {
  double seconds = 0;
  size_t file_bytes = 0;
  size_t weight_bytes = 0;
  int blobs = 0;
  std::optional<io::CalibrationInfo> calibration;  // what calibration saw, when it ran
};

Result<BuildReport> BuildEngine(const std::string& model_dir, const std::string& output_path,
                                const BuildOptions& options);


}  // namespace ferry::engine
