// `ferry build`: compiles a Hugging Face checkpoint into an engine file for one device
// and precision (fused and pre-packed weights, quantized and calibrated variants,
// tokenizer and config embedded), in the spirit of TensorRT's builder.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "core/status.h"

namespace ferry::engine {

struct BuildOptions {
  std::string precision = "fp32";  // fp32, bf16, fp16, int8-wo, int8 (W8A8), fp8 (CUDA only)
  std::string device = "cpu";      // cpu, cuda or cuda:N (the GPU the engine is tuned on)
  std::string calibration_path;    // text or JSONL ("text" fields); empty: the built-in default
  int calibration_tokens = 16384;  // calibration budget (tokens run through the model)
  float smooth_alpha = 0.5f;       // SmoothQuant migration strength
  int max_seq_len = 0;             // recorded for preload (0: the model's context, capped at 4096)
  int max_batch_tokens = 0;        // recorded for preload (0: max_seq_len)
  int threads = 0;
  bool tune = true;                // time kernel candidates per weight shape and record the winners
};

struct BuildReport {
  double seconds = 0;
  size_t file_bytes = 0;
  size_t weight_bytes = 0;
  int blobs = 0;
  nlohmann::json calibration;  // what calibration saw (tokens, documents), when it ran
};

Result<BuildReport> BuildEngine(const std::string& model_dir, const std::string& output_path,
                                const BuildOptions& options);

// The fingerprint of the machine and build this process would write into an engine for
// `device` (cpu: the CPU ISA and oneDNN version; cuda[:N]: that GPU's architecture and the
// CUDA runtime and cuBLASLt versions). Unavailable for a GPU that is not there.
Result<nlohmann::json> CurrentFingerprint(const std::string& device);
// Whether an engine with `fingerprint` may run here on `device` (cpu, cuda or cuda:N); the
// error names the mismatch and what to do about it.
Status CheckFingerprint(const nlohmann::json& fingerprint, const std::string& device = "cpu");

}  // namespace ferry::engine
