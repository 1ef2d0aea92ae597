// Text <-> token ids for every model ferry serves: Hugging Face tokenizer.json pipelines
// (byte-level BPE, SentencePiece-style BPE, WordPiece) and SentencePiece tokenizer.model
// files, plus a streaming detokenizer that never splits a UTF-8 character.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <utility>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace ferry::tokenizer {

struct Encoding {
  std::vector<int32_t> ids;
  std::vector<int32_t> type_ids;  // same length as ids
};

// A token's place in the text it was encoded from: bytes [begin, end) of that text. Tokens
// that a normalizer or pre-tokenizer produced from several characters cover all of them;
// added tokens cover their match.
struct TokenOffset {
  uint32_t begin = 0;
  uint32_t end = 0;
};

// One or two encoded sequences with the model's special tokens added (the post-processor's
// template), and where each token came from.
struct TemplatedEncoding {
  std::vector<int32_t> ids;
  std::vector<int32_t> type_ids;
  // Per token: 0 or 1, the sequence it belongs to, or -1 for a token the template added.
  std::vector<int8_t> sequence;
  // Per token: its index in that sequence, or -1 for a token the template added.
  std::vector<int32_t> position;
};

// Thread-safe after Load: Encode/Decode are const and share no mutable state.
class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // Without special tokens: exactly the ids of HF `tokenizer.encode(text,
  // add_special_tokens=False)`. Special and added tokens written in the text are still
  // recognised. Invalid UTF-8 is an InvalidArgument error.
  virtual Result<std::vector<int32_t>> Encode(std::string_view text) const = 0;
  // Byte ranges [begin, end) of `text` where special-token text is written, in order (what
  // Encode would turn into control tokens).
  virtual std::vector<std::pair<size_t, size_t>> FindSpecialTokenText(std::string_view text) const = 0;
  // Encode, except that special-token text starting inside one of the `literal` byte ranges
  // (sorted, disjoint) is ordinary text, as HF's split_special_tokens treats it: a chat
  // message that writes "<|eot_id|>" gets the characters, not the control token.
  virtual Result<std::vector<int32_t>> EncodeWithLiteralRanges(
      std::string_view text, std::span<const std::pair<size_t, size_t>> literal) const = 0;
  // With the model's special tokens as HF adds them (BOS for LLaMA, [CLS] .. [SEP] for BERT,
  // pairs with type ids).
  virtual Result<Encoding> EncodeWithSpecial(
      std::string_view text, std::optional<std::string_view> pair = std::nullopt) const = 0;
  // Encode(text) plus each token's byte offsets into `text` (HF's offset mapping, in bytes;
  // byte-level tokenizers trim the offsets of tokens that begin or end with a space when
  // their post-processor says trim_offsets, as HF does).
  virtual Result<std::vector<int32_t>> EncodeWithOffsets(std::string_view text,
                                                         std::vector<TokenOffset>* offsets) const = 0;
  // The post-processor's template around already-encoded sequences (HF post_process): what
  // EncodeWithSpecial adds, applied to ids, so that windows of a long input each get their
  // own special tokens.
  virtual Result<TemplatedEncoding> ApplyTemplate(
      std::span<const int32_t> first, std::optional<std::span<const int32_t>> second = std::nullopt) const = 0;
  // HF convert_tokens_to_string: token strings joined by the tokenizer's decoder.
  virtual std::string TokensToString(const std::vector<std::string>& tokens) const = 0;
  // The model's continuing-subword prefix ("##" for WordPiece), empty when it has none: the
  // tokens of such a model say themselves whether they continue a word.
  virtual std::string continuing_subword_prefix() const = 0;
  virtual std::optional<int32_t> unk_id() const = 0;

  // HF decode(ids, skip_special_tokens=skip_special). Ids outside the vocabulary are an
  // OutOfRange error.
  virtual Result<std::string> Decode(std::span<const int32_t> ids, bool skip_special = true) const = 0;

  // One past the largest token id (model vocabulary plus added tokens).
  virtual int32_t vocab_size() const = 0;
  virtual std::optional<int32_t> bos_id() const = 0;
  // The tokenizer's EOS plus any listed in generation_config.json (e.g. Llama-3's <|eot_id|>).
  virtual std::vector<int32_t> eos_ids() const = 0;
  virtual std::optional<int32_t> pad_id() const = 0;
  virtual bool IsSpecial(int32_t id) const = 0;
  virtual std::optional<int32_t> TokenToId(std::string_view token) const = 0;
  // Empty for ids without a token.
  virtual std::string IdToToken(int32_t id) const = 0;

  // Raw bytes a token contributes when decoded (used by the incremental detokenizer); may
  // be part of a UTF-8 character. `first` marks the first decoded token of a sequence, where
  // decoders drop the space a SentencePiece-style tokenizer prepended to the text.
  virtual void AppendTokenBytes(int32_t id, bool first, std::string* out) const = 0;
};

// Loads from a model/tokenizer directory: tokenizer.json and/or tokenizer.model (preferred
// when present, through SentencePiece), tokenizer_config.json, special_tokens_map.json and
// generation_config.json when present.
Result<std::unique_ptr<Tokenizer>> LoadTokenizer(const std::string& dir);
// The same from in-memory file contents (the engine file embeds them): file name -> bytes.
Result<std::unique_ptr<Tokenizer>> LoadTokenizerFromFiles(const std::map<std::string, std::string>& files);

// Streaming: feed ids one at a time; each call returns the newly completed text (maybe
// empty), never half a UTF-8 character. Thread-compatible; the tokenizer must outlive it.
class IncrementalDetokenizer {
 public:
  // `sequence_start` = false continues text decoded elsewhere (e.g. generated tokens after a
  // prompt), so the first token keeps its leading space.
  explicit IncrementalDetokenizer(const Tokenizer& tok, bool skip_special = true,
                                  bool sequence_start = true);

  std::string Add(int32_t id);
  // Appends instead of returning, to reuse the caller's buffer.
  void Add(int32_t id, std::string* out);
  // Whatever is left (invalid trailing bytes replaced by U+FFFD); the stream then restarts
  // mid-sequence.
  std::string Flush();

 private:
  const Tokenizer* tokenizer_;
  bool skip_special_;
  bool first_;
  std::string pending_;  // bytes not yet emitted: an incomplete UTF-8 character at most
};

}  // namespace ferry::tokenizer
