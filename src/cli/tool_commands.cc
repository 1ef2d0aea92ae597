// make-checkpoint and bench: tools for measuring ferry.
#include <nlohmann/json.hpp>

#include <cstdio>

#include "cli/subcommands.h"
#include "core/device_spec.h"
#include "core/thread_pool.h"
#include "engine/engine.h"
#include "tools/model_bench.h"
#include "tools/checkpoint_maker.h"
#include "tools/structured_bench.h"

namespace ferry::cli {

namespace {

struct MakeCheckpointOptions {
  std::string arch;
  std::string preset;
  std::string dtype = "bf16";
  std::string out;
  uint64_t seed = 0;
  std::string head = "sequence";
  int labels = 0;
  std::string tokenizer;
};

int RunMakeCheckpoint(const MakeCheckpointOptions& o) {
  auto dtype = ParseDType(o.dtype);
  if (!dtype.ok()) return Fail(dtype.status());
  tools::CheckpointSpec spec;
  spec.preset = o.preset;
  spec.dtype = *dtype;
  spec.seed = o.seed;
  spec.head = o.head;
  spec.num_labels = o.labels;
  spec.tokenizer_dir = o.tokenizer;
  // --arch is accepted for readability; the preset decides the architecture.
  // Compared without '-' and '.', so that gemma2 names gemma-2-2b and phi3 phi-3.5-mini.
  auto squash = [](const std::string& s) {
    std::string out;
    for (char c : s) {
      if (c != '-' && c != '.') out += c;
    }
    return out;
  };
  const std::string arch = o.arch == "xlm-roberta" ? "xlmr" : o.arch;
  if (!arch.empty() && squash(o.preset).rfind(squash(arch), 0) != 0) {
    return Fail(InvalidArgument("preset '" + o.preset + "' is not a '" + o.arch + "' model"));
  }
  Status st = tools::MakeCheckpoint(spec, o.out);
  if (!st.ok()) return Fail(st);
  std::printf("wrote %s checkpoint (%s) to %s\n", o.preset.c_str(), o.dtype.c_str(), o.out.c_str());
  return 0;
}

struct BenchModelOptions {
  std::string model;
  std::vector<int> threads{1, 2};
  int prompt_len = 512;
  std::vector<int> batches{1, 8};
  int decode_steps = 32;
  int decode_context = 16;
  int repeats = 3;
  int encoder_batch = 32;
  int encoder_seq_len = 128;
  bool json = false;
  std::string device = "cpu";
  std::string activations = "bf16";
  std::string cpu_activations = "f32";
  std::string kv_cache = "auto";
  bool eager = false;
  bool map_weights = false;
  std::string serving_mix;  // "IN/OUT": the serving mix's prompt and output lengths
  int mix_batched_tokens = 8192;
};

int RunBenchModel(const BenchModelOptions& o) {
  engine::EngineOptions eo;
  auto device = ParseDevice(o.device);
  if (!device.ok()) return Fail(device.status());
  eo.device = *device;
  eo.map_weights = o.map_weights;
  auto act = ParseDType(o.activations);
  if (!act.ok()) return Fail(act.status());
  eo.cuda_activations = act.value();
  if (o.cpu_activations != "f32" && o.cpu_activations != "bf16") {
    return Fail(InvalidArgument("--cpu-activations must be f32 or bf16, got '" + o.cpu_activations + "'"));
  }
  eo.cpu_activations = o.cpu_activations == "bf16" ? DType::kBF16 : DType::kF32;
  if (o.kv_cache != "auto") {
    auto kv = ParseDType(o.kv_cache);
    if (!kv.ok()) return Fail(kv.status());
    eo.cuda_kv_cache = kv.value();
  }
  auto engine_or = engine::Engine::Load(o.model, eo);
  if (!engine_or.ok()) return Fail(engine_or.status());
  std::shared_ptr<engine::Engine> engine = std::move(engine_or).value();
  tools::ModelBenchOptions mo;
  mo.prompt_len = o.prompt_len;
  mo.decode_batches = o.batches;
  mo.decode_steps = o.decode_steps;
  mo.decode_context = o.decode_context;
  mo.repeats = o.repeats;
  mo.encoder_batch = o.encoder_batch;
  mo.encoder_seq_len = o.encoder_seq_len;
  mo.step_graphs = !o.eager;
  if (!o.serving_mix.empty()) {
    int in = 0, out = 0;
    char tail = 0;
    if (std::sscanf(o.serving_mix.c_str(), "%d/%d%c", &in, &out, &tail) != 2 || in <= 0 || out <= 0) {
      return Fail(InvalidArgument("--serving-mix takes IN/OUT, two positive token counts (e.g. 128/128), not '" +
                                  o.serving_mix + "'"));
    }
    if (!engine->is_decoder()) return Fail(InvalidArgument("--serving-mix is for decoders"));
    mo.mix_prompt_len = in;
    mo.mix_output_len = out;
    mo.mix_batched_tokens = o.mix_batched_tokens;
  }
  if (!engine->is_decoder() && o.encoder_seq_len > engine->config().max_position_embeddings) {
    return Fail(InvalidArgument("--encoder-seq-len " + std::to_string(o.encoder_seq_len) + " exceeds the model's " +
                                std::to_string(engine->config().max_position_embeddings) + " positions"));
  }
  nlohmann::json all = nlohmann::json::array();
  for (int t : o.threads) {
    SetComputeThreads(t);
    auto r = tools::BenchModel(engine, mo);
    if (!r.ok()) return Fail(r.status());
    nlohmann::json j;
    j["threads"] = t;
    if (engine->is_decoder()) {
      j["prefill_tokens"] = o.prompt_len;
      j["prefill_tokens_per_s"] = r->prefill_tokens_per_s;
      j["prefill_tokens_per_s_range"] = {r->prefill_tokens_per_s_runs.min, r->prefill_tokens_per_s_runs.max};
      for (size_t i = 0; i < r->decode_tokens_per_s.size(); ++i) {
        const tools::Spread& d = r->decode_tokens_per_s_runs[i];
        j["decode"].push_back({{"batch", r->decode_tokens_per_s[i].first},
                               {"tokens_per_s", r->decode_tokens_per_s[i].second},
                               {"tokens_per_s_range", {d.min, d.max}},
                               {"step_ms", r->decode_step_ms[i].second}});
      }
      for (const tools::MixResult& m : r->mix) {
        j["serving_mix"].push_back({{"batch", m.batch},
                                    {"prompt_len", mo.mix_prompt_len},
                                    {"output_len", mo.mix_output_len},
                                    {"output_tokens_per_s", m.output_tokens_per_s.median},
                                    {"output_tokens_per_s_range", {m.output_tokens_per_s.min, m.output_tokens_per_s.max}},
                                    {"step_ms", m.step_ms},
                                    {"seqs_per_step", m.seqs_per_step},
                                    {"tokens_per_step", m.tokens_per_step}});
      }
      j["runs"] = o.repeats;
      j["weight_gb"] = r->weight_gb;
      j["step_graphs"] = r->step_graphs;
      j["device_sampling"] = r->device_sampling;
      if (!o.json) {
        // Medians of the runs, with the lowest and highest.
        std::printf("threads=%d  prefill(%d tok): %.1f tok/s [%.1f-%.1f]", t, o.prompt_len, r->prefill_tokens_per_s,
                    r->prefill_tokens_per_s_runs.min, r->prefill_tokens_per_s_runs.max);
        for (size_t i = 0; i < r->decode_tokens_per_s.size(); ++i) {
          const tools::Spread& d = r->decode_tokens_per_s_runs[i];
          std::printf("  decode(batch %d): %.2f tok/s [%.2f-%.2f]", r->decode_tokens_per_s[i].first, d.median, d.min,
                      d.max);
        }
        std::printf("  (median of %d runs)\n", o.repeats);
        for (const tools::MixResult& m : r->mix) {
          std::printf("threads=%d  serving mix(batch %d, %d/%d): %.1f out tok/s [%.1f-%.1f], step %.2f ms, "
                      "%.1f sequences and %.1f tokens a step\n",
                      t, m.batch, mo.mix_prompt_len, mo.mix_output_len, m.output_tokens_per_s.median,
                      m.output_tokens_per_s.min, m.output_tokens_per_s.max, m.step_ms, m.seqs_per_step,
                      m.tokens_per_step);
        }
      }
    } else {
      j["encoder_batch"] = mo.encoder_batch;
      j["encoder_seq_len"] = mo.encoder_seq_len;
      j["sequences_per_s"] = r->encoder_sequences_per_s;
      j["sequences_per_s_range"] = {r->encoder_sequences_per_s_runs.min, r->encoder_sequences_per_s_runs.max};
      j["runs"] = o.repeats;
      if (!o.json) {
        std::printf("threads=%d  encoder(%dx%d): %.1f seq/s [%.1f-%.1f] (median of %d runs)\n", t, mo.encoder_batch,
                    mo.encoder_seq_len, r->encoder_sequences_per_s, r->encoder_sequences_per_s_runs.min,
                    r->encoder_sequences_per_s_runs.max, o.repeats);
      }
    }
    all.push_back(j);
  }
  if (o.json) std::printf("%s\n", all.dump(2).c_str());
  return 0;
}

struct BenchStructuredOptions {
  std::string model;
  std::string device = "cpu";
  int threads = 0;  // 0: the runtime's default
  tools::StructuredBenchOptions bench;
  bool eager = false;
  bool json = false;
};

int RunBenchStructured(const BenchStructuredOptions& o) {
  engine::EngineOptions eo;
  auto device = ParseDevice(o.device);
  if (!device.ok()) return Fail(device.status());
  eo.device = *device;
  auto engine_or = engine::Engine::Load(o.model, eo);
  if (!engine_or.ok()) return Fail(engine_or.status());
  if (o.threads > 0) SetComputeThreads(o.threads);
  tools::StructuredBenchOptions bo = o.bench;
  bo.step_graphs = !o.eager;
  auto r = tools::BenchStructured(std::move(engine_or).value(), bo);
  if (!r.ok()) return Fail(r.status());
  nlohmann::json j = {{"model", o.model},
                      {"device", o.device},
                      {"vocab", r->vocab},
                      {"vocab_source", r->vocab_source},
                      {"batch", bo.batch},
                      {"decode_steps", bo.decode_steps},
                      {"compile_50_properties_ms", r->compile_ms},
                      {"matcher_first_mask_ms", r->matcher_ms},
                      {"unconstrained_step_ms", r->unconstrained_step_ms},
                      {"constrained_cold_step_ms", r->constrained_cold_step_ms},
                      {"grammar_cold_ms_per_step", r->grammar_cold_ms_per_step},
                      {"constrained_step_ms", r->constrained_step_ms},
                      {"grammar_ms_per_step", r->grammar_ms_per_step},
                      {"grammar_share", r->grammar_share},
                      {"overhead", r->overhead},
                      {"grammar_states", r->states},
                      {"masks_kept", r->masks},
                      {"device_sampling", r->device_sampling}};
  if (o.json) {
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf("%s\n", j.dump(2).c_str());
  }
  return 0;
}

}  // namespace

void RegisterMakeCheckpoint(CLI::App& app, int& exit_code) {
  auto o = std::make_shared<MakeCheckpointOptions>();
  CLI::App* sub = app.add_subcommand("make-checkpoint", "Write a random-weight checkpoint of a real model's shape");
  sub->add_option("--arch", o->arch, "llama, mistral, qwen2, qwen3, gemma2, phi3, bert or xlm-roberta (checked against the preset)");
  std::string presets;
  for (const std::string& p : tools::CheckpointPresets()) presets += (presets.empty() ? "" : ", ") + p;
  sub->add_option("--preset", o->preset, "One of: " + presets)->required();
  sub->add_option("--dtype", o->dtype, "fp32, bf16 or fp16");
  sub->add_option("--seed", o->seed, "Random seed");
  sub->add_option("--head", o->head, "BERT: sequence (classifier), token (token classifier) or none (embeddings)");
  sub->add_option("--labels", o->labels, "BERT: labels of the head (default: 2, or CoNLL's 9 BIO tags for token)");
  sub->add_option("--tokenizer", o->tokenizer, "Copy the tokenizer files of this folder into the checkpoint");
  sub->add_option("-o,--output", o->out, "Output directory")->required();
  sub->callback([o, &exit_code] { exit_code = RunMakeCheckpoint(*o); });
}

void RegisterBench(CLI::App& app, int& exit_code) {
  CLI::App* bench = app.add_subcommand("bench", "Benchmarks");
  bench->require_subcommand(1);
  auto o = std::make_shared<BenchModelOptions>();
  CLI::App* sub = bench->add_subcommand("model", "Prefill and decode throughput of a model");
  sub->add_option("--model", o->model, "Checkpoint directory or GGUF file")->required();
  sub->add_option("--threads", o->threads, "Thread counts to measure")->delimiter(',');
  sub->add_option("--prompt-len", o->prompt_len, "Prefill prompt length");
  sub->add_option("--batch", o->batches, "Decode batch sizes")->delimiter(',');
  sub->add_option("--decode-steps", o->decode_steps, "Decode steps timed");
  sub->add_option("--decode-context", o->decode_context, "Tokens in each sequence's KV cache before decoding");
  sub->add_option("--device", o->device, "cpu, cuda or cuda:N");
  sub->add_option("--activations", o->activations, "CUDA activation dtype: bf16, f16 or f32");
  sub->add_option("--cpu-activations", o->cpu_activations,
                  "CPU: f32, or bf16 (bf16 and int8-wo weights' prefill GEMMs round x to bf16, on vdpbf16ps)");
  sub->add_option("--kv-cache-dtype", o->kv_cache, "CUDA KV cache dtype: auto (the activations'), bf16, f16, f32 or fp8");
  sub->add_option("--repeats", o->repeats, "Timed runs of each measurement (median reported, with the range)");
  sub->add_option("--encoder-batch", o->encoder_batch, "Encoders: sequences per batch");
  sub->add_option("--encoder-seq-len", o->encoder_seq_len, "Encoders: tokens per sequence");
  sub->add_flag("--eager", o->eager, "Decode without step graphs (CUDA graphs), for comparison");
  sub->add_flag("--map-weights", o->map_weights, "CPU engine files: weights from the file's mapping, not a huge-page copy");
  sub->add_option("--serving-mix", o->serving_mix,
                  "IN/OUT: also run each --batch as a closed-loop server would (sequences replaced as they "
                  "finish by prompts of IN tokens generating OUT), and report output tok/s and the step");
  sub->add_option("--mix-batched-tokens", o->mix_batched_tokens,
                  "The serving mix's max_num_batched_tokens (default 8192)");
  sub->add_flag("--json", o->json, "JSON output");
  sub->callback([o, &exit_code] { exit_code = RunBenchModel(*o); });
  auto so = std::make_shared<BenchStructuredOptions>();
  CLI::App* st = bench->add_subcommand("structured",
                                       "Structured outputs: schema compile time and constrained vs unconstrained decode");
  st->add_option("--model", so->model, "Checkpoint directory, GGUF file or engine file")->required();
  st->add_option("--device", so->device, "cpu, cuda or cuda:N");
  st->add_option("--threads", so->threads, "CPU threads (default: all)");
  st->add_option("--batch", so->bench.batch, "Decode batch size");
  st->add_option("--decode-steps", so->bench.decode_steps, "Decode steps timed per run");
  st->add_option("--repeats", so->bench.repeats, "Runs of each kind after the first (best reported)");
  st->add_option("--compile-repeats", so->bench.compile_repeats, "Compiles of the 50-property schema (median)");
  st->add_flag("--eager", so->eager, "Decode without step graphs");
  st->add_flag("--json", so->json, "One JSON line");
  st->callback([so, &exit_code] { exit_code = RunBenchStructured(*so); });
  RegisterColdstart(*bench, exit_code);
  RegisterBenchServe(*bench, exit_code);
}

}  // namespace ferry::cli
