// `ferry bench structured`: what structured outputs cost. In one run: grammar compile time
// for a 50-property JSON schema, and decode step time at one batch size with every row
// under a JSON-schema grammar against the same batch unconstrained, through the engine core
// the server runs (masks found on the scheduler thread, applied where sampling happens).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "engine/engine.h"
#include "structured/matcher.h"

namespace ferry::tools {

struct StructuredBenchOptions {
  int batch = 64;
  int decode_steps = 32;      // decode steps timed per run
  int repeats = 3;            // constrained and unconstrained runs, interleaved (the first constrained run is cold)
  int compile_repeats = 20;   // compiles of the 50-property schema (median reported)
  bool step_graphs = true;
};

struct StructuredBenchResult {
  int vocab = 0;                  // the model's vocabulary
  int tokenizer_tokens = 0;       // ids the tokenizer spells; the rest are synthesized (see vocab_source)
  std::string vocab_source;
  double compile_ms = 0;          // median: schema text → grammar
  double matcher_ms = 0;          // median: the matcher and the first state's mask (a trie walk)
  int schema_properties = 0;
  double unconstrained_step_ms = 0;  // best run
  double constrained_cold_step_ms = 0;  // first constrained run: every state's mask found for the first time
  double grammar_cold_ms_per_step = 0;  // in that run: the grammar's part, per step
  double constrained_step_ms = 0;       // best later run (new prompts, masks of states seen before reused)
  double grammar_ms_per_step = 0;       // in that run: mask lookups/walks and state advances, per step
  double grammar_share = 0;             // grammar_ms_per_step / constrained_step_ms
  double overhead = 0;                  // constrained_step_ms / unconstrained_step_ms - 1
  size_t states = 0;                    // distinct grammar states found by the end
  size_t masks = 0;                     // masks kept by the end
  bool device_sampling = false;
};

// The 50-property schema the compile time is measured on (every supported kind of value).
std::string FiftyPropertySchema();

// The model's vocabulary as a structured::Vocabulary: the tokenizer's tokens, and when the
// model has more ids than the tokenizer spells (a random-weight checkpoint of a 128k-vocab
// shape with a smaller tokenizer), the rest made of pairs of the tokenizer's tokens
// (deterministic), so that the trie has the model's size. `source` says which.
std::shared_ptr<const structured::Vocabulary> BenchVocabulary(const engine::Engine& engine, int* tokenizer_tokens,
                                                              std::string* source);

Result<StructuredBenchResult> BenchStructured(std::shared_ptr<engine::Engine> engine,
                                              const StructuredBenchOptions& options);

}  // namespace ferry::tools
