// Random-weight checkpoints with the exact shapes and Hugging Face layout of real models
// (config.json + sharded safetensors), for benchmarks: nothing is downloaded here.
#pragma once

#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"

namespace ferry::tools {

struct CheckpointSpec {
  std::string preset;  // e.g. "llama-3.2-1b", "bert-base"
  DType dtype = DType::kBF16;
  uint64_t seed = 0;
  double shard_bytes = 2e9;  // split into shards of about this size
  // BERT presets: the head on top, "sequence" (BertForSequenceClassification, pooler and
  // classifier), "token" (BertForTokenClassification) or "none" (BertModel, embeddings only).
  std::string head = "sequence";
  // Labels of the head; 0: two for "sequence", CoNLL-2003's nine BIO tags for "token".
  int num_labels = 0;
  // A folder whose tokenizer files are copied in (tokenizer.json, vocab.txt, ...), so that
  // the checkpoint takes text; the preset's vocabulary must match the tokenizer's.
  std::string tokenizer_dir;
};

// Names of the known presets.
std::vector<std::string> CheckpointPresets();
// Writes the checkpoint into `dir` (created if needed).
Status MakeCheckpoint(const CheckpointSpec& spec, const std::string& dir);

}  // namespace ferry::tools
