// Writes a Hugging Face llama checkpoint directory as a GGUF file the way llama.cpp's
// converter lays it out: llama.* metadata, the tokenizer as tokenizer.ggml.* (SentencePiece
// pieces from tokenizer.model, or byte-level BPE tokens and merges from tokenizer.json),
// q/k rows permuted into interleaved rotary pairs, 2-D weights in the chosen type (1-D ones
// in F32), and Llama 3 RoPE scaling as rope_freqs.weight.
#pragma once

#include <string>

#include "core/status.h"
#include "gguf_test_writer.h"

namespace ferry::testing {

struct GgufLlamaOptions {
  uint32_t type = GgufBuilder::kTF32;  // F32, F16, BF16 or Q8_0
  uint32_t version = 3;
  std::string pre = "gpt2";  // tokenizer.ggml.pre for byte-level BPE
  bool rope_freqs = true;    // write Llama 3 scaling as rope_freqs.weight (else leave it out)
};

Status WriteLlamaGguf(const std::string& checkpoint_dir, const std::string& out_path, const GgufLlamaOptions& o);

}  // namespace ferry::testing
