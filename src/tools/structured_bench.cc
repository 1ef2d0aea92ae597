#include "tools/structured_bench.h"

#include <algorithm>
#include <chrono>
#include <nlohmann/json.hpp>
#include <random>

#include "sched/engine_core.h"
#include "structured/constraint.h"
#include "tokenizer/tokenizer.h"

namespace ferry::tools {

namespace {

using Clock = std::chrono::steady_clock;

double Ms(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double, std::milli>(b - a).count(); }

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// What the decode runs generate: an array that cannot end within the timed steps, of
// objects with strings, numbers, enums, booleans, nested arrays and dates.
const char* kDecodeSchema = R"({"type":"array","minItems":1000,"items":{"type":"object","properties":{
  "name":{"type":"string","maxLength":24},"id":{"type":"integer","minimum":0,"maximum":1000000},
  "score":{"type":"number","minimum":0,"maximum":1},"kind":{"enum":["book","chapter","verse","psalm"]},
  "ok":{"type":"boolean"},"tags":{"type":"array","items":{"type":"string","maxLength":8},"maxItems":3},
  "when":{"type":"string","format":"date"}},"required":["name","id","kind","ok"]}})";

}  // namespace

std::string FiftyPropertySchema() {
  nlohmann::ordered_json props = nlohmann::ordered_json::object();
  nlohmann::ordered_json required = nlohmann::ordered_json::array();
  for (int i = 0; i < 50; ++i) {
    const std::string key = "field_" + std::to_string(i);
    nlohmann::ordered_json s;
    switch (i % 10) {
      case 0: s = {{"type", "string"}, {"maxLength", 32}}; break;
      case 1: s = {{"type", "integer"}, {"minimum", -1000}, {"maximum", 1000000}}; break;
      case 2: s = {{"type", "number"}, {"minimum", 0}, {"maximum", 100}}; break;
      case 3: s = {{"type", "boolean"}}; break;
      case 4: s = {{"enum", {"alpha", "beta", "gamma", "delta", 42, nullptr}}}; break;
      case 5: s = {{"type", "string"}, {"format", "date-time"}}; break;
      case 6: s = {{"type", "array"}, {"items", {{"type", "integer"}}}, {"maxItems", 8}}; break;
      case 7:
        s = {{"type", "object"},
             {"properties", {{"a", {{"type", "string"}, {"maxLength", 8}}}, {"b", {{"type", "number"}}}}},
             {"required", {"a"}}};
        break;
      case 8: s = {{"type", "string"}, {"pattern", "^[A-Z]{2,3}-[0-9]{3,6}$"}}; break;
      default: s = {{"anyOf", {{{"type", "string"}, {"format", "uuid"}}, {{"type", "null"}}}}}; break;
    }
    props[key] = std::move(s);
    if (i % 2 == 0) required.push_back(key);
  }
  nlohmann::ordered_json schema = {{"type", "object"}, {"properties", props}, {"required", required},
                                   {"additionalProperties", false}};
  return schema.dump();
}

std::shared_ptr<const structured::Vocabulary> BenchVocabulary(const engine::Engine& engine, int* tokenizer_tokens,
                                                              std::string* source) {
  const int32_t vocab = engine.config().vocab_size;
  const tokenizer::Tokenizer* tok = engine.tokenizer();
  std::vector<std::string> tokens(static_cast<size_t>(vocab));
  std::vector<char> usable(static_cast<size_t>(vocab), 0);
  std::vector<int32_t> real;
  const int32_t known = tok == nullptr ? 0 : std::min(vocab, tok->vocab_size());
  for (int32_t id = 0; id < known; ++id) {
    if (tok->IsSpecial(id)) continue;
    tok->AppendTokenBytes(id, false, &tokens[id]);
    usable[id] = tokens[id].empty() ? 0 : 1;
    if (usable[id]) real.push_back(id);
  }
  *tokenizer_tokens = static_cast<int>(real.size());
  *source = "tokenizer";
  if (known < vocab && real.size() > 1) {
    // Ids the tokenizer does not spell: pairs of its tokens, as a larger BPE vocabulary has.
    std::mt19937_64 rng(128);
    for (int32_t id = known; id < vocab; ++id) {
      tokens[id] = tokens[real[rng() % real.size()]] + tokens[real[rng() % real.size()]];
      usable[id] = 1;
    }
    *source = "tokenizer (" + std::to_string(real.size()) + " tokens) + " + std::to_string(vocab - known) +
              " synthesized pairs";
  }
  return std::make_shared<const structured::Vocabulary>(std::move(tokens), std::move(usable));
}

Result<StructuredBenchResult> BenchStructured(std::shared_ptr<engine::Engine> engine, const StructuredBenchOptions& o) {
  if (!engine->is_decoder()) return InvalidArgument("bench structured needs a decoder");
  StructuredBenchResult r;
  r.vocab = engine->config().vocab_size;
  auto vocab = BenchVocabulary(*engine, &r.tokenizer_tokens, &r.vocab_source);
  r.device_sampling = engine->backend().samples_on_device();

  // Compile time: a fresh compile each time (no cache).
  const structured::Constraint fifty{structured::ConstraintKind::kJsonSchema, FiftyPropertySchema(), {}};
  r.schema_properties = 50;
  std::vector<double> compile, matcher;
  for (int i = 0; i < std::max(1, o.compile_repeats); ++i) {
    const auto t0 = Clock::now();
    FERRY_ASSIGN_OR_RETURN(structured::Grammar g, structured::CompileConstraint(fifty));
    const auto t1 = Clock::now();
    structured::TokenMatcher m(std::move(g), vocab);
    m.Mask(m.initial());
    const auto t2 = Clock::now();
    compile.push_back(Ms(t0, t1));
    matcher.push_back(Ms(t1, t2));
  }
  r.compile_ms = Median(compile);
  r.matcher_ms = Median(matcher);

  // Decode: batch rows of random prompts, greedy, end-of-sequence ignored, decode_steps
  // steps timed after the prefill; constrained and unconstrained runs interleaved.
  structured::GrammarCache cache(vocab);
  FERRY_ASSIGN_OR_RETURN(auto grammar,
                         cache.Get(structured::Constraint{structured::ConstraintKind::kJsonSchema, kDecodeSchema, {}}));
  const int context = 8;
  sched::EngineCoreOptions co;
  co.batching.max_num_seqs = o.batch;
  co.batching.max_seq_len = context + o.decode_steps + 2;
  co.batching.max_num_batched_tokens = std::max(o.batch * context, o.batch);
  co.batching.max_queue_requests = o.batch;
  co.batching.max_queue_tokens = static_cast<int64_t>(co.batching.max_num_batched_tokens) + 1;
  co.step_graphs = o.step_graphs;
  FERRY_ASSIGN_OR_RETURN(auto core, sched::EngineCore::Create("bench", engine, co));
  uint64_t handle = 1;
  std::vector<sched::GenerationEvent> events;
  auto step = [&]() -> Status {
    events.clear();
    if (!core->Step(events)) return Internal("the benchmark's step could not be scheduled");
    for (const sched::GenerationEvent& ev : events) {
      if (!ev.error.ok()) return ev.error;
    }
    return Status::Ok();
  };
  // One run: returns ms per timed step and the grammar's ms per step.
  auto run = [&](bool constrained, uint64_t prompt_seed, double& grammar_ms) -> Result<double> {
    std::mt19937_64 rng(prompt_seed);
    for (int b = 0; b < o.batch; ++b) {
      std::vector<int32_t> prompt(static_cast<size_t>(context));
      for (int32_t& id : prompt) id = static_cast<int32_t>(rng() % static_cast<uint64_t>(r.vocab));
      sched::GenerationRequest req = sched::FixedLengthGreedy("bench", std::move(prompt), o.decode_steps + 1);
      if (constrained) req.grammar = grammar;
      core->Add(handle++, std::move(req));
    }
    FERRY_RETURN_IF_ERROR(step());  // the prefill and each row's first token
    if (core->running() != o.batch) return Internal("the batch did not start in one step");
    const double g0 = core->grammar_seconds();
    const auto t0 = Clock::now();
    for (int s = 0; s < o.decode_steps; ++s) FERRY_RETURN_IF_ERROR(step());
    const double ms = Ms(t0, Clock::now()) / o.decode_steps;
    grammar_ms = (core->grammar_seconds() - g0) * 1e3 / o.decode_steps;
    while (!core->empty()) FERRY_RETURN_IF_ERROR(step());
    return ms;
  };
  double ignored = 0;
  FERRY_RETURN_IF_ERROR(run(false, 1, ignored).status());  // warm-up (graphs, allocations)
  r.unconstrained_step_ms = 1e30;
  r.constrained_step_ms = 1e30;
  for (int rep = 0; rep < std::max(2, o.repeats + 1); ++rep) {
    FERRY_ASSIGN_OR_RETURN(double plain, run(false, 1000 + static_cast<uint64_t>(rep), ignored));
    r.unconstrained_step_ms = std::min(r.unconstrained_step_ms, plain);
    double grammar_ms = 0;
    FERRY_ASSIGN_OR_RETURN(double constrained, run(true, 2000 + static_cast<uint64_t>(rep), grammar_ms));
    if (rep == 0) {
      r.constrained_cold_step_ms = constrained;
      r.grammar_cold_ms_per_step = grammar_ms;
    } else if (constrained < r.constrained_step_ms) {
      r.constrained_step_ms = constrained;
      r.grammar_ms_per_step = grammar_ms;
    }
  }
  r.grammar_share = r.grammar_ms_per_step / r.constrained_step_ms;
  r.overhead = r.constrained_step_ms / r.unconstrained_step_ms - 1.0;
  r.states = grammar->num_states();
  r.masks = grammar->num_masks();
  return r;
}

}  // namespace ferry::tools
