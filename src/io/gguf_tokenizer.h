// The tokenizer files that a GGUF file's tokenizer.ggml.* metadata stands for, written as a
// Hugging Face checkpoint holds them, so the tokenizer loader reads them unchanged:
//  - "llama" (SentencePiece): tokenizer.model, a serialized ModelProto built from the tokens,
//    scores and token types (BPE; byte fallback when the vocabulary has byte tokens): the
//    canonical form of these vocabularies, which a converted tokenizer.json is not.
//  - "gpt2" (byte-level BPE): tokenizer.json with the tokens and merges; tokenizer.ggml.pre
//    picks the pre-tokenizer: "default"/"gpt2" (GPT-2's regex) or "llama-bpe"/"llama3"
//    (Llama 3's); others are refused by name.
// Both also get tokenizer_config.json (special tokens, add_bos_token, chat template) and
// generation_config.json (bos/eos ids).
#pragma once

#include <map>
#include <string>

#include "core/status.h"
#include "io/gguf.h"

namespace ferry::io {

// GGUF token types (llama.cpp's numbering, the same as SentencePiece's piece types).
enum class GgufTokenType : int32_t {
  kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5, kByte = 6,
};

// File name -> contents; empty when the file has no tokenizer.ggml.model.
Result<std::map<std::string, std::string>> GgufTokenizerFiles(const GgufFile& file);

}  // namespace ferry::io
