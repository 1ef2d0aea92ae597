#include "tools/model_bench.h"

#include <algorithm>
#include <chrono>
#include <random>

#include "engine/encoder_runner.h"
#include "sched/engine_core.h"

namespace ferry::tools {

namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

std::vector<int32_t> RandomIds(int n, int vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int32_t> dist(0, vocab - 1);
  std::vector<int32_t> ids(n);
  for (int32_t& id : ids) id = dist(rng);
  return ids;
}

Status BenchDecoder(const std::shared_ptr<engine::Engine>& model, const ModelBenchOptions& o, ModelBenchResult& r) {
  const int vocab = model->config().vocab_size;
  const int max_batch = std::max(1, *std::max_element(o.decode_batches.begin(), o.decode_batches.end()));
  sched::EngineCoreOptions co;
  co.batching.max_num_seqs = max_batch;
  co.batching.max_seq_len = std::max(o.prompt_len + 1, o.decode_context + o.decode_steps + 1);
  // Every prompt of a measurement in one step, as a single ragged prefill.
  co.batching.max_num_batched_tokens = std::max({o.prompt_len, max_batch * o.decode_context, max_batch});
  co.batching.max_queue_requests = std::max(max_batch, 1);
  co.batching.max_queue_tokens = static_cast<int64_t>(co.batching.max_num_batched_tokens) + 1;
  co.step_graphs = o.step_graphs;
  // One step at a time, each with its tokens on the host: the engine's own step time, which
  // the serving figures (asynchronous steps) are compared against.
  co.batching.async_scheduling = sched::AsyncScheduling::kOff;
  // Every prefill is computed: with prefix caching on, each repeat would find the previous
  // one's blocks cached and time a near-empty step.
  co.batching.enable_prefix_caching = false;
  FERRY_ASSIGN_OR_RETURN(auto core, sched::EngineCore::Create("bench", model, co));
  r.weight_gb = static_cast<double>(model->decoder()->weight_bytes()) / 1e9;
  // Greedy decoding as the server runs it: on a GPU the token is picked there and only its id
  // comes back; on the CPU the logits are host memory and the argmax runs on them.
  r.device_sampling = model->backend().samples_on_device();
  uint64_t next_handle = 1;
  std::vector<sched::GenerationEvent> events;
  auto step = [&]() -> Status {
    events.clear();
    if (!core->Step(events)) return Internal("the benchmark's step could not be scheduled");
    for (const sched::GenerationEvent& ev : events) {
      if (!ev.error.ok()) return ev.error;
    }
    return Status::Ok();
  };

  // Prefill: one prompt of prompt_len tokens in one step (median of N; the first run warms).
  std::vector<double> prefill_rates;
  for (int rep = 0; rep < o.repeats + 1; ++rep) {
    const std::vector<int32_t> prompt = RandomIds(o.prompt_len, vocab, 1 + static_cast<uint32_t>(rep));
    core->Add(next_handle++, sched::FixedLengthGreedy("bench", prompt, 1));
    const auto t0 = Clock::now();
    FERRY_RETURN_IF_ERROR(step());
    const double s = Seconds(t0, Clock::now());
    if (!core->empty()) return Internal("the prefill did not finish in one step");
    if (rep > 0) prefill_rates.push_back(o.prompt_len / s);
  }
  r.prefill_tokens_per_s_runs = SpreadOf(prefill_rates);
  r.prefill_tokens_per_s = r.prefill_tokens_per_s_runs.median;
  r.prefill_ms = 1e3 * o.prompt_len / r.prefill_tokens_per_s;

  // Decode: `batch` requests with decode_context prompt tokens, prefilled together in one
  // step, then decode_steps steps of one token each, timed.
  for (int batch : o.decode_batches) {
    std::vector<double> rates;
    for (int rep = 0; rep < o.repeats; ++rep) {
      for (int b = 0; b < batch; ++b) {
        core->Add(next_handle++,
                  sched::FixedLengthGreedy("bench", RandomIds(o.decode_context, vocab, 100 + b), o.decode_steps + 1));
      }
      FERRY_RETURN_IF_ERROR(step());  // the prefill (and each request's first token)
      if (core->running() != batch || core->waiting() != 0) {
        return Internal("the decode batch did not start in one step");
      }
      const auto t0 = Clock::now();
      for (int i = 0; i < o.decode_steps; ++i) FERRY_RETURN_IF_ERROR(step());
      rates.push_back(batch * o.decode_steps / Seconds(t0, Clock::now()));
      if (!core->empty()) return Internal("the decode requests did not finish");
    }
    const Spread spread = SpreadOf(rates);
    r.decode_tokens_per_s_runs.push_back(spread);
    r.decode_tokens_per_s.emplace_back(batch, spread.median);
    r.decode_step_ms.emplace_back(batch, 1e3 * batch / spread.median);
  }
  r.step_graphs = model->backend().graph_count();
  return Status::Ok();
}

// The step statistics of the mix's core.
class StepTally : public sched::BatcherObserver {
 public:
  void OnStep(const sched::StepStats& s) override {
    steps += 1;
    seqs += s.num_seqs;
    tokens += s.num_tokens;
  }
  void OnPreemption(int count) override { preemptions += count; }
  int64_t steps = 0, seqs = 0, tokens = 0, preemptions = 0;
};

Status BenchMix(const std::shared_ptr<engine::Engine>& model, const ModelBenchOptions& o, ModelBenchResult& r) {
  const int vocab = model->config().vocab_size;
  const int in_len = o.mix_prompt_len, out_len = o.mix_output_len;
  for (int batch : o.decode_batches) {
    // A core of its own, configured as the server's: batching defaults (the step-time target
    // included) but for the sizes, and synchronous steps, so each step is the engine's own.
    sched::EngineCoreOptions co;
    co.batching.max_num_seqs = batch;
    co.batching.max_seq_len = in_len + out_len + 1;
    co.batching.max_num_batched_tokens = std::max(o.mix_batched_tokens, batch);
    co.batching.max_queue_requests = 2 * batch;
    co.batching.max_queue_tokens = static_cast<int64_t>(2 * batch) * (in_len + out_len);
    co.step_graphs = o.step_graphs;
    co.batching.async_scheduling = sched::AsyncScheduling::kOff;
    FERRY_ASSIGN_OR_RETURN(auto core, sched::EngineCore::Create("bench-mix", model, co));
    StepTally tally;
    core->SetObserver(&tally);
    uint64_t next_handle = 1;
    uint64_t seed = 1000;
    std::vector<sched::GenerationEvent> events;
    int64_t generated = 0;
    auto add = [&](int max_tokens) {
      core->Add(next_handle++, sched::FixedLengthGreedy("bench", RandomIds(in_len, vocab, seed++), max_tokens));
    };
    auto step = [&]() -> Status {
      events.clear();
      if (!core->Step(events)) return Internal("the benchmark's step could not be scheduled");
      for (const sched::GenerationEvent& ev : events) {
        if (!ev.error.ok()) return ev.error;
        generated += static_cast<int64_t>(ev.tokens.size());
        if (ev.finished) add(out_len);
      }
      return Status::Ok();
    };
    // The first sequences finish one after another (lengths spread over 1..out_len), so the
    // arrivals are spread as in a closed loop that has been running for a while.
    for (int b = 0; b < batch; ++b) add(1 + static_cast<int>(static_cast<int64_t>(b) * out_len / batch));
    const uint64_t first_replacement = next_handle;
    // Warm-up: until every initial sequence has finished and its replacement has started.
    for (int guard = 0; core->running() + core->waiting() > 0; ++guard) {
      FERRY_RETURN_IF_ERROR(step());
      bool initial_left = false;
      for (uint64_t h = 1; h < first_replacement && !initial_left; ++h) initial_left = core->Contains(h);
      if (!initial_left) break;
      if (guard > 100 * (out_len + batch)) return Internal("the serving mix did not reach a steady state");
    }
    std::vector<double> rates, step_ms, seqs, tokens;
    for (int rep = 0; rep < o.repeats; ++rep) {
      tally = StepTally();
      generated = 0;
      const auto t0 = Clock::now();
      for (int i = 0; i < out_len; ++i) FERRY_RETURN_IF_ERROR(step());
      const double s = Seconds(t0, Clock::now());
      if (tally.preemptions > 0) return Internal("the serving mix preempted sequences: the KV cache is too small");
      rates.push_back(static_cast<double>(generated) / s);
      step_ms.push_back(1e3 * s / static_cast<double>(std::max<int64_t>(tally.steps, 1)));
      seqs.push_back(static_cast<double>(tally.seqs) / std::max<int64_t>(tally.steps, 1));
      tokens.push_back(static_cast<double>(tally.tokens) / std::max<int64_t>(tally.steps, 1));
    }
    MixResult m;
    m.batch = batch;
    m.output_tokens_per_s = SpreadOf(rates);
    m.step_ms = SpreadOf(step_ms).median;
    m.seqs_per_step = SpreadOf(seqs).median;
    m.tokens_per_step = SpreadOf(tokens).median;
    r.mix.push_back(m);
    core->SetObserver(nullptr);
  }
  return Status::Ok();
}

Status BenchEncoder(const std::shared_ptr<engine::Engine>& model, const ModelBenchOptions& o, ModelBenchResult& r) {
  const int vocab = model->config().vocab_size;
  std::vector<engine::EncodedInput> inputs(o.encoder_batch);
  for (int b = 0; b < o.encoder_batch; ++b) {
    inputs[b].ids = RandomIds(o.encoder_seq_len, vocab, 500 + b);
    inputs[b].type_ids.assign(o.encoder_seq_len, 0);
  }
  std::vector<double> rates;
  for (int rep = 0; rep < o.repeats + 1; ++rep) {
    const auto t0 = Clock::now();
    FERRY_ASSIGN_OR_RETURN(Tensor emb, engine::Embed(*model, inputs, engine::Pooling::kCls, false));
    if (rep > 0) rates.push_back(o.encoder_batch / Seconds(t0, Clock::now()));
  }
  r.encoder_sequences_per_s_runs = SpreadOf(rates);
  r.encoder_sequences_per_s = r.encoder_sequences_per_s_runs.median;
  return Status::Ok();
}

}  // namespace

Spread SpreadOf(std::vector<double> values) {
  Spread s;
  if (values.empty()) return s;
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  s.median = n % 2 == 1 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
  s.min = values.front();
  s.max = values.back();
  s.runs = static_cast<int>(n);
  return s;
}

Result<ModelBenchResult> BenchModel(std::shared_ptr<engine::Engine> model, const ModelBenchOptions& options) {
  if (options.prompt_len <= 0 || options.decode_steps <= 0 || options.decode_context <= 0 || options.repeats <= 0 ||
      options.encoder_batch <= 0 || options.encoder_seq_len <= 0) {
    return InvalidArgument("benchmark lengths must be positive");
  }
  if (options.mix_prompt_len < 0 || (options.mix_prompt_len > 0 && options.mix_output_len <= 0)) {
    return InvalidArgument("the serving mix needs a positive prompt and output length");
  }
  ModelBenchResult r;
  if (model->is_decoder()) {
    if (options.decode_batches.empty()) return InvalidArgument("no decode batch sizes");
    FERRY_RETURN_IF_ERROR(BenchDecoder(model, options, r));
    if (options.mix_prompt_len > 0) FERRY_RETURN_IF_ERROR(BenchMix(model, options, r));
  } else {
    FERRY_RETURN_IF_ERROR(BenchEncoder(model, options, r));
  }
  return r;
}

}  // namespace ferry::tools
