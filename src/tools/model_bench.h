// `ferry bench model`: prefill and decode throughput of one engine, measured on random
// token ids through the same engine core (scheduler, KV accounting, executor, sampling) the
// server runs.
#pragma once

#include <memory>
#include <vector>

#include "engine/engine.h"

namespace ferry::tools {

struct ModelBenchOptions {
  int prompt_len = 512;                  // prefill: one prompt of this many tokens
  std::vector<int> decode_batches{1, 8};
  int decode_context = 16;               // tokens in each sequence's cache before decoding starts
  int decode_steps = 32;                 // decode steps timed per batch size
  int encoder_batch = 32;                // encoder: sequences per batch
  int encoder_seq_len = 128;             // encoder: tokens per sequence
  int repeats = 3;                       // best of N for each measurement
  bool step_graphs = true;               // decode steps as recorded graphs where the backend has them
};

struct ModelBenchResult {
  double prefill_tokens_per_s = 0;
  double prefill_ms = 0;
  std::vector<std::pair<int, double>> decode_tokens_per_s;  // (batch, tokens/s)
  std::vector<std::pair<int, double>> decode_step_ms;       // (batch, ms per step)
  double encoder_sequences_per_s = 0;
  double weight_gb = 0;
  int step_graphs = 0;          // recordings the decode runs made (0: eager)
  bool device_sampling = false;  // decode tokens picked on the device (only ids reach the host)
};

Result<ModelBenchResult> BenchModel(std::shared_ptr<engine::Engine> engine, const ModelBenchOptions& options);

}  // namespace ferry::tools
