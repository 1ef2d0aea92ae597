#include <nlohmann/json.hpp>

#include <cstdio>
#include <sstream>

#include "cli/subcommands.h"
#include "core/device_spec.h"
#include "engine/engine.h"
#include "sched/engine_core.h"

namespace ferry::cli {

namespace {

struct GenerateOptions {
  std::string model;
  std::string prompt;
  std::string prompt_ids;
  int max_tokens = 16;
  float temperature = 1.0f;
  float top_p = 1.0f;
  int top_k = 0;
  float min_p = 0.0f;
  float repetition_penalty = 1.0f;
  int64_t seed = -1;
  int threads = 0;
  std::string device = "cpu";
  bool json = false;
  bool dump_logits = false;
};

Result<std::vector<int32_t>> ParseIds(const std::string& text) {
  std::vector<int32_t> ids;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    size_t used = 0;
    long long v = 0;
    try {
      v = std::stoll(item, &used);
    } catch (const std::exception&) {
      return InvalidArgument("--prompt-ids: '" + item + "' is not an integer");
    }
    if (used != item.size() || v < 0 || v > INT32_MAX) {
      return InvalidArgument("--prompt-ids: '" + item + "' is not a valid token id");
    }
    ids.push_back(static_cast<int32_t>(v));
  }
  if (ids.empty()) return InvalidArgument("--prompt-ids is empty");
  return ids;
}

int RunGenerate(const GenerateOptions& o) {
  if (o.prompt.empty() == o.prompt_ids.empty()) {
    return Fail(InvalidArgument("give exactly one of --prompt (non-empty) or --prompt-ids"));
  }
  auto device = ParseDevice(o.device);
  if (!device.ok()) return Fail(device.status());
  auto engine_or = engine::Engine::Load(o.model, {.threads = o.threads, .device = *device});
  if (!engine_or.ok()) return Fail(engine_or.status());
  std::shared_ptr<engine::Engine> engine = std::move(engine_or).value();
  if (!engine->is_decoder()) return Fail(InvalidArgument("'" + o.model + "' is not a decoder model"));

  sched::GenerationRequest req;
  auto ids = o.prompt_ids.empty() ? engine->EncodePrompt(o.prompt) : ParseIds(o.prompt_ids);
  if (!ids.ok()) return Fail(ids.status());
  req.prompt = std::move(ids).value();
  if (req.prompt.empty()) return Fail(InvalidArgument("the prompt encodes to no tokens"));
  req.max_tokens = o.max_tokens;
  req.sampling.temperature = o.temperature;
  req.sampling.top_p = o.top_p;
  req.sampling.top_k = o.top_k;
  req.sampling.min_p = o.min_p;
  req.sampling.repetition_penalty = o.repetition_penalty;
  if (o.seed >= 0) req.sampling.seed = static_cast<uint64_t>(o.seed);
  req.stop_ids = engine->StopIds();
  req.keep_logits = o.dump_logits;
  const std::vector<int32_t> prompt = req.prompt;

  // The same engine core the server runs, with room for this one request; the whole
  // prompt is prefilled in one step.
  sched::EngineCoreOptions co;
  co.batching.max_num_seqs = 1;
  co.batching.max_seq_len = std::min<int>(engine->config().max_position_embeddings,
                                          std::max<int>(4096, static_cast<int>(prompt.size()) + o.max_tokens));
  co.batching.max_num_batched_tokens = std::max<int>(512, static_cast<int>(prompt.size()));
  co.batching.max_queue_tokens = std::max<int64_t>(co.batching.max_queue_tokens, static_cast<int64_t>(prompt.size()));
  auto core = sched::EngineCore::Create("generate", engine, co);
  if (!core.ok()) return Fail(core.status());
  auto results = sched::GenerateAll(**core, {std::move(req)});
  if (!results.ok()) return Fail(results.status());
  const sched::GenerationEvent& r = (*results)[0];
  if (!r.error.ok()) return Fail(r.error);
  std::vector<int32_t> tokens;
  for (const sched::TokenOutput& t : r.tokens) tokens.push_back(t.token);
  const int vocab = engine->config().vocab_size;

  std::string text;
  if (engine->tokenizer() != nullptr) {
    auto decoded = engine->tokenizer()->Decode(tokens, /*skip_special=*/true);
    if (!decoded.ok()) return Fail(decoded.status());
    text = std::move(decoded).value();
  }
  if (o.json || o.dump_logits) {
    nlohmann::json out;
    out["prompt_token_ids"] = prompt;
    out["token_ids"] = tokens;
    out["text"] = text;
    out["finish_reason"] = sched::FinishReasonName(r.finish_reason);
    if (o.dump_logits) {
      const size_t n = std::min<size_t>(r.logits.size(), static_cast<size_t>(vocab));
      out["first_logits"] = std::vector<float>(r.logits.begin(), r.logits.begin() + static_cast<std::ptrdiff_t>(n));
    }
    std::printf("%s\n", out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  } else if (engine->tokenizer() != nullptr) {
    std::printf("%s\n", text.c_str());
  } else {
    nlohmann::json out = tokens;
    std::printf("%s\n", out.dump().c_str());
  }
  return 0;
}

}  // namespace

void RegisterGenerate(CLI::App& app, int& exit_code) {
  auto o = std::make_shared<GenerateOptions>();
  CLI::App* sub = app.add_subcommand("generate", "Generate text with a decoder model");
  sub->add_option("--model", o->model, "Checkpoint directory or GGUF file")->required();
  sub->add_option("--prompt", o->prompt, "Prompt text (BOS added as the tokenizer config says)");
  sub->add_option("--prompt-ids", o->prompt_ids, "Prompt token ids, comma separated, used exactly as given");
  sub->add_option("--max-tokens", o->max_tokens, "Tokens to generate")->check(CLI::Range(0, 1 << 20));
  sub->add_option("--temperature", o->temperature, "Sampling temperature (0 = greedy)");
  sub->add_option("--top-p", o->top_p, "Nucleus sampling mass");
  sub->add_option("--top-k", o->top_k, "Keep the k most likely tokens (0 = off)");
  sub->add_option("--min-p", o->min_p, "Drop tokens below min_p x the top probability");
  sub->add_option("--repetition-penalty", o->repetition_penalty, "Penalty for earlier tokens (1 = off)");
  sub->add_option("--seed", o->seed, "Random seed");
  sub->add_option("--threads", o->threads, "Compute threads (0 = all cores)");
  sub->add_option("--device", o->device, "cpu, cuda or cuda:N");
  sub->add_flag("--json", o->json, "Print one JSON object");
  sub->add_flag("--dump-logits", o->dump_logits, "Include the logits that chose the first token");
  sub->callback([o, &exit_code] { exit_code = RunGenerate(*o); });
}

}  // namespace ferry::cli
