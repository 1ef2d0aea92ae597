#include "engine/model_bench.h"

#include <algorithm>
#include <chrono>
#include <random>

#include "engine/generator.h"

namespace ferry::engine {

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

Status BenchDecoder(const std::shared_ptr<Engine>& engine, const ModelBenchOptions& o, ModelBenchResult& r) {
  const int vocab = engine->config().vocab_size;
  const int max_batch = std::max(1, *std::max_element(o.decode_batches.begin(), o.decode_batches.end()));
  RunnerOptions ro;
  ro.max_batch_seqs = max_batch;
  ro.max_seq_len = std::max(o.prompt_len, o.decode_context + o.decode_steps + 1);
  ro.step_graphs = o.step_graphs;
  FERRY_ASSIGN_OR_RETURN(auto runner, DecoderRunner::Create(engine, ro));
  StepExecutor& ex = runner->executor();
  KvCache& cache = runner->cache();
  r.weight_gb = static_cast<double>(engine->decoder()->weight_bytes()) / 1e9;
  // Greedy decoding as the server runs it: on a GPU the token is picked there and only its id
  // comes back; on the CPU the logits are host memory and the argmax runs on them.
  r.device_sampling = engine->backend().samples_on_device();
  std::vector<backend::TokenSampling> greedy(static_cast<size_t>(max_batch));
  for (backend::TokenSampling& g : greedy) g.temperature = 0.0f;
  auto decode_step = [&](const std::vector<SeqStep>& steps) -> Status {
    if (r.device_sampling) {
      FERRY_ASSIGN_OR_RETURN(std::vector<int32_t> next,
                             ex.StepAndSample(steps, std::span(greedy.data(), steps.size())));
      return Status::Ok();
    }
    FERRY_ASSIGN_OR_RETURN(Tensor logits, ex.Step(steps));
    for (int64_t i = 0; i < logits.dim(0); ++i) {
      (void)Argmax(std::span<const float>(logits.data<float>() + i * logits.dim(1), logits.dim(1)));
    }
    return Status::Ok();
  };

  // Prefill: one prompt of prompt_len tokens in one step (best of N; the first run warms).
  const std::vector<int32_t> prompt = RandomIds(o.prompt_len, vocab, 1);
  double best = 1e30;
  for (int rep = 0; rep < o.repeats + 1; ++rep) {
    const auto t0 = Clock::now();
    FERRY_ASSIGN_OR_RETURN(Tensor logits, ex.Step({SeqStep{1000 + rep, prompt, 0, false}}));
    const double s = Seconds(t0, Clock::now());
    cache.Free(1000 + rep);
    if (rep > 0) best = std::min(best, s);
  }
  r.prefill_ms = best * 1e3;
  r.prefill_tokens_per_s = o.prompt_len / best;

  // Decode: `batch` sequences with decode_context tokens of cache, then decode_steps steps.
  for (int batch : o.decode_batches) {
    std::vector<std::vector<int32_t>> ctx(batch);
    std::vector<SeqStep> steps(batch);
    for (int b = 0; b < batch; ++b) {
      ctx[b] = RandomIds(o.decode_context + o.decode_steps, vocab, 100 + b);
      steps[b] = SeqStep{b, std::span<const int32_t>(ctx[b].data(), o.decode_context), 0, false};
    }
    double best_step = 1e30;
    for (int rep = 0; rep < o.repeats; ++rep) {
      for (int b = 0; b < batch; ++b) steps[b] = SeqStep{b, std::span<const int32_t>(ctx[b].data(), o.decode_context), 0, false};
      FERRY_ASSIGN_OR_RETURN(Tensor warm, ex.Step(steps));
      const auto t0 = Clock::now();
      for (int i = 0; i < o.decode_steps; ++i) {
        for (int b = 0; b < batch; ++b) {
          const int pos = o.decode_context + i;
          steps[b] = SeqStep{b, std::span<const int32_t>(ctx[b].data() + pos, 1), pos, false};
        }
        FERRY_RETURN_IF_ERROR(decode_step(steps));
      }
      best_step = std::min(best_step, Seconds(t0, Clock::now()) / o.decode_steps);
      for (int b = 0; b < batch; ++b) cache.Free(b);
    }
    r.decode_step_ms.emplace_back(batch, best_step * 1e3);
    r.decode_tokens_per_s.emplace_back(batch, batch / best_step);
  }
  r.step_graphs = engine->backend().graph_count();
  return Status::Ok();
}

Status BenchEncoder(const std::shared_ptr<Engine>& engine, const ModelBenchOptions& o, ModelBenchResult& r) {
  const int vocab = engine->config().vocab_size;
  std::vector<EncodedInput> inputs(o.encoder_batch);
  for (int b = 0; b < o.encoder_batch; ++b) {
    inputs[b].ids = RandomIds(o.encoder_seq_len, vocab, 500 + b);
    inputs[b].type_ids.assign(o.encoder_seq_len, 0);
  }
  double best = 1e30;
  for (int rep = 0; rep < o.repeats + 1; ++rep) {
    const auto t0 = Clock::now();
    FERRY_ASSIGN_OR_RETURN(Tensor emb, Embed(*engine, inputs, Pooling::kCls, false));
    if (rep > 0) best = std::min(best, Seconds(t0, Clock::now()));
  }
  r.encoder_sequences_per_s = o.encoder_batch / best;
  return Status::Ok();
}

}  // namespace

Result<ModelBenchResult> BenchModel(std::shared_ptr<Engine> engine, const ModelBenchOptions& options) {
  if (options.prompt_len <= 0 || options.decode_steps <= 0 || options.decode_context <= 0 || options.repeats <= 0) {
    return InvalidArgument("benchmark lengths must be positive");
  }
  ModelBenchResult r;
  if (engine->is_decoder()) {
    if (options.decode_batches.empty()) return InvalidArgument("no decode batch sizes");
    FERRY_RETURN_IF_ERROR(BenchDecoder(engine, options, r));
  } else {
    FERRY_RETURN_IF_ERROR(BenchEncoder(engine, options, r));
  }
  return r;
}

}  // namespace ferry::engine
