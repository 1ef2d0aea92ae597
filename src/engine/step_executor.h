// One ragged decoder step: any mix of whole prompts, prefill chunks and decode tokens,
// each sequence adding a span of new tokens against its paged KV, and what the step's
// logits are for (a sampled token, log-probabilities). The scheduler (sched::EngineCore)
// reserves the KV blocks first; the executor runs the model and samples, on whatever
// device the engine is on, and returns tokens, never device memory.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "core/tensor.h"
#include "engine/kv_cache.h"
#include "engine/sampler.h"
#include "model/decoder.h"

namespace ferry::engine {

struct SeqStep {
  int64_t seq_id = 0;
  std::span<const int32_t> tokens;  // new tokens this step
  int32_t start_pos = 0;            // position of tokens[0]; the cache holds [0, start_pos) already
  // Prompt log-probabilities: row i (the logits after tokens[i]) scores targets[i]. At most
  // tokens.size() targets; when there are any, every row of the step is computed.
  std::span<const int32_t> targets;
  bool sample = false;          // pick the next token from the last row
  int logprobs = -1;            // with `sample`: the chosen token's log-probability and the top k (k >= 0)
  int top_logprobs = 0;         // for `targets`: the top k of each row
  bool keep_logits = false;     // return every row computed for it (host f32; offline tools)
  backend::TokenSampling sampling;  // with `sample`: settings, seed, counter and history
  // Asynchronous steps (Launch): >= 0 when tokens[0] is a placeholder for the id drawn for
  // row `from_previous` of the step launched just before this one (a decode token the host
  // does not know yet; tokens must then be that one placeholder).
  int32_t from_previous = -1;
};

// What one sequence's step produced.
struct SeqResult {
  int32_t token = -1;              // the sampled token; -1 when not sampled or not finite
  bool finite = true;              // false: the sampled row had a NaN or infinite logit
  TokenOutput sampled;             // token + log-probabilities when logprobs >= 0
  std::vector<TokenOutput> targets;  // one per target
  std::vector<float> logits;       // keep_logits: its rows, [1 or tokens.size(), vocab]
};

// Step graphs for decode batches (backends that support them: CUDA graphs). A decode-only
// step of n sequences runs as the recording for the smallest batch bucket >= n, padded with
// rows that write into the cache's padding block; the first step of each bucket records it.
struct StepGraphOptions {
  int max_batch = 0;     // largest decode batch run as a graph; 0: graphs off
  int plan_context = 0;  // longest context a graphed step may have (longer: run eagerly)
};

// Decode batch sizes that get their own recording: 1, 2, 4, 8, then steps of about 1.5x
// (16, 24, 32, 48, 64, 96, ...), ending with max_batch itself.
std::vector<int> GraphBatchBuckets(int max_batch);

// Thread-compatible: one caller (the scheduler thread) at a time.
class StepExecutor {
 public:
  StepExecutor(model::DecoderModel& model, KvCache& cache);
  ~StepExecutor();
  StepExecutor(const StepExecutor&) = delete;
  StepExecutor& operator=(const StepExecutor&) = delete;

  // Turns step graphs on (when the backend supports them) or off (max_batch 0).
  void SetGraphOptions(const StepGraphOptions& options);
  const StepGraphOptions& graph_options() const { return graph_options_; }

  // Runs the step and samples: one result per step, in order. Every sequence's blocks must
  // be reserved for start_pos + tokens.size() tokens. Where the logits live on a GPU the
  // tokens are drawn there, and logits travel to the host only when log-probabilities or
  // logits were asked for.
  // `before_sampling`, when given, runs once the forward pass is under way (on a GPU, while
  // it runs) and before any row is sampled: the caller may still set the rows'
  // sampling.allowed then (structured outputs find new masks there).
  Result<std::vector<SeqResult>> Step(const std::vector<SeqStep>& steps,
                                      const std::function<Status()>& before_sampling = {});

  // Asynchronous steps: Launch queues a step and returns before its tokens are known, so the
  // caller can plan and launch the next one (whose decode rows may take their input from this
  // step's draws: SeqStep::from_previous) while the device runs this one; Collect returns the
  // oldest launched step's results, waiting for them. Only steps that need nothing but the
  // drawn ids and the sampled rows' log-probabilities (whose logits come back with the ids):
  // no targets, kept logits or structured-output masks (Launchable). On a backend that samples on the host, Launch runs the step at once.
  // A failed Launch queues nothing. Do not mix with Step while launches are outstanding.
  static bool Launchable(const SeqStep& step);
  Status Launch(const std::vector<SeqStep>& steps);
  Result<std::vector<SeqResult>> Collect();
  int launched() const { return static_cast<int>(launched_.size()); }
  // Waits for every launched step and drops its results.
  void Drain();

  // The step's logits on the host (f32): for each step in order, one row (its last token),
  // or tokens.size() rows when it has targets. Offline tools and tests.
  Result<Tensor> Logits(const std::vector<SeqStep>& steps);
  // Sampling and log-probabilities on the host from Logits()' rows.
  Result<std::vector<SeqResult>> SampleOnHost(const Tensor& logits, const std::vector<SeqStep>& steps);

  KvCache& cache() { return cache_; }
  model::DecoderModel& model() { return model_; }
  // Steps that ran as a step graph (captures and replays), for reports and tests.
  int64_t graphed_steps() const { return graphed_steps_; }

 private:
  // Builds the batch and runs the model: `logits` gets the wanted rows on the device (the
  // first `rows` of it; a graphed step has padding rows after them).
  // `patch_source`: the device ids of the previous launch, for rows with from_previous.
  Status Run(const std::vector<SeqStep>& steps, Tensor& logits, int64_t& rows, const Tensor* patch_source = nullptr);
  // device_sampling_ for the steps: their settings, a greedy pick for rows not drawn for.
  void FillDeviceSampling(const std::vector<SeqStep>& steps);
  // Fills log-probabilities and kept logits from host rows (sampling done elsewhere).
  void ScoreOnHost(const Tensor& logits, const std::vector<SeqStep>& steps, std::vector<SeqResult>& out);

  model::DecoderModel& model_;
  KvCache& cache_;
  const int64_t graph_owner_;  // unique per executor: its recordings use its KV cache
  model::DecoderBatch batch_;  // reused between steps so steady state does not allocate
  StepGraphOptions graph_options_;
  std::vector<int> graph_buckets_;
  std::vector<int32_t> padding_table_;  // the block table of a padding row
  int64_t graphed_steps_ = 0;
  std::vector<backend::TokenSampling> device_sampling_;  // reused
  std::vector<int32_t> device_tokens_;
  Sampler sampler_;
  // Launched steps, oldest first: the draws on their way (device sampling), or the results
  // (a host backend's launch runs at once).
  struct Launched {
    std::unique_ptr<backend::PendingTokens> pending;
    std::vector<SeqResult> results;
    std::vector<char> sample;  // per step: whether its row was drawn for
    std::vector<int32_t> logprobs;    // per step: SeqStep::logprobs
    std::vector<int32_t> score_rows;  // the sampled steps with logprobs >= 0 (their logits come back)
  };
  std::deque<Launched> launched_;
  std::vector<int32_t> patched_ids_;  // host launches: the placeholders' ids
};

}  // namespace ferry::engine
