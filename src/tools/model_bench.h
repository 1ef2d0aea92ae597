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
  int repeats = 3;                       // timed runs of each measurement (after one untimed warm run); median reported
  bool step_graphs = true;               // decode steps as recorded graphs where the backend has them
  // The serving mix (off while mix_prompt_len is 0): per batch size B, B sequences kept
  // running, each finished one replaced at once by a new request of mix_prompt_len random
  // prompt tokens and mix_output_len generated ones, as a closed-loop server with B clients
  // runs them: each step decodes the running sequences and prefills the prompts that
  // arrived. Timed after every initial sequence has been replaced, mix_output_len steps a
  // run (each slot finishes about once).
  int mix_prompt_len = 0;
  int mix_output_len = 0;
  int mix_batched_tokens = 8192;         // max_num_batched_tokens of the mix's core (serving's)
};

// The runs of one measurement: median, and the spread as the lowest and highest.
struct Spread {
  double median = 0, min = 0, max = 0;
  int runs = 0;
};
Spread SpreadOf(std::vector<double> values);

// One batch size of the serving mix, medians over the runs.
struct MixResult {
  int batch = 0;
  Spread output_tokens_per_s;  // tokens generated per second
  double step_ms = 0;          // mean step, the time each running sequence waits for its next token
  double seqs_per_step = 0;    // sequences in a step (decoding and prefilling)
  double tokens_per_step = 0;  // tokens computed in a step (decode rows + prompt tokens)
};

struct ModelBenchResult {
  double prefill_tokens_per_s = 0;  // medians, as every figure below
  double prefill_ms = 0;
  Spread prefill_tokens_per_s_runs;
  std::vector<std::pair<int, double>> decode_tokens_per_s;  // (batch, tokens/s)
  std::vector<std::pair<int, double>> decode_step_ms;       // (batch, ms per step)
  std::vector<Spread> decode_tokens_per_s_runs;             // per batch, as decode_tokens_per_s
  std::vector<MixResult> mix;                               // per batch, with the serving mix
  double encoder_sequences_per_s = 0;
  Spread encoder_sequences_per_s_runs;
  double weight_gb = 0;
  int step_graphs = 0;          // recordings the decode runs made (0: eager)
  bool device_sampling = false;  // decode tokens picked on the device (only ids reach the host)
};

Result<ModelBenchResult> BenchModel(std::shared_ptr<engine::Engine> engine, const ModelBenchOptions& options);

}  // namespace ferry::tools
