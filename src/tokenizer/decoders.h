// Hugging Face decoders: turn token strings back into text. Also run one token at a time
// for streaming, where the position-dependent steps need to know where the token sits.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "tokenizer/json_util.h"

namespace ferry::tokenizer {

struct DecodeContext {
  // tokens[0] is the first token of the decoded sequence (Metaspace and WordPiece drop the
  // leading space there; Strip after Fuse strips only there).
  bool starts_sequence = true;
  // tokens.back() is the last token of the sequence (BPE suffix, trailing Strip).
  bool ends_sequence = true;
  // Keep byte-fallback bytes raw instead of HF's per-run lossy conversion; the streaming
  // detokenizer completes UTF-8 across tokens itself.
  bool streaming = false;
  // Set once a step joined all tokens into one (Fuse, ByteLevel).
  bool fused = false;
};

// Thread-safe: immutable after construction.
class Decoder {
 public:
  virtual ~Decoder() = default;
  // Token strings may hold raw, possibly incomplete, UTF-8 bytes.
  virtual void DecodeChain(std::vector<std::string>* tokens, DecodeContext* context) const = 0;
};

// Builds from a tokenizer.json "decoder" object. A null JSON value yields nullptr.
Result<std::unique_ptr<Decoder>> MakeDecoder(const Json& config);

// What HF's LLaMA tokenizer.json uses: "▁" -> " ", byte fallback, fuse, and strip the one
// leading space the dummy prefix added (when `strip_leading_space`).
std::unique_ptr<Decoder> MakeSentencePieceDecoder(bool strip_leading_space);

// HF decode of already filtered token strings: the decoder chain (or a " " join without
// one), then ill-formed UTF-8 replaced by U+FFFD.
std::string DecodeTokens(std::vector<std::string> tokens, const Decoder* decoder);

}  // namespace ferry::tokenizer
