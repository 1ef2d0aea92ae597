// What HF-format and SentencePiece tokenizers share: added/special token handling, the
// post-processor, the decoder chain, special ids and streaming bytes. Subclasses supply the
// encoding of ordinary text and the model vocabulary.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "tokenizer/added_vocabulary.h"
#include "tokenizer/decoders.h"
#include "tokenizer/model.h"
#include "tokenizer/post_processors.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_config.h"

namespace ferry::tokenizer {

// Thread-safe after Finish(): all members are read-only from then on.
class PipelineTokenizer : public Tokenizer {
 public:
  Result<std::vector<int32_t>> Encode(std::string_view text) const final;
  std::vector<std::pair<size_t, size_t>> FindSpecialTokenText(std::string_view text) const final;
  Result<std::vector<int32_t>> EncodeWithLiteralRanges(std::string_view text,
                                                       std::span<const std::pair<size_t, size_t>> literal) const final;
  Result<Encoding> EncodeWithSpecial(std::string_view text,
                                     std::optional<std::string_view> pair) const final;
  Result<std::string> Decode(std::span<const int32_t> ids, bool skip_special) const final;
  Result<std::vector<int32_t>> EncodeWithOffsets(std::string_view text,
                                                 std::vector<TokenOffset>* offsets) const final;
  Result<TemplatedEncoding> ApplyTemplate(std::span<const int32_t> first,
                                          std::optional<std::span<const int32_t>> second) const final;
  std::string TokensToString(const std::vector<std::string>& tokens) const final;
  std::string continuing_subword_prefix() const override { return std::string(); }
  std::optional<int32_t> unk_id() const override { return std::nullopt; }

  int32_t vocab_size() const final { return vocab_size_; }
  std::optional<int32_t> bos_id() const final { return bos_id_; }
  std::vector<int32_t> eos_ids() const final { return eos_ids_; }
  std::optional<int32_t> pad_id() const final { return pad_id_; }
  bool IsSpecial(int32_t id) const final;
  std::optional<int32_t> TokenToId(std::string_view token) const final;
  std::string IdToToken(int32_t id) const final;
  void AppendTokenBytes(int32_t id, bool first, std::string* out) const final;

 protected:
  // Encodes ordinary text found between added tokens; `at_start` when it begins the input.
  virtual Status EncodeText(std::string_view text, bool at_start, std::vector<int32_t>* ids) const = 0;
  // The same, appending each token's byte offsets into `text` shifted by `base`.
  virtual Status EncodeTextWithOffsets(std::string_view text, bool at_start, uint32_t base,
                                       std::vector<int32_t>* ids, std::vector<TokenOffset>* offsets) const = 0;
  virtual std::optional<int32_t> ModelTokenToId(std::string_view token) const = 0;
  // nullptr when the model has no token for `id`.
  virtual const std::string* ModelIdToToken(int32_t id) const = 0;
  virtual int32_t model_vocab_size() const = 0;

  struct Parts {
    // Tokens from tokenizer.json / the model; the config's tokens are merged in by Finish().
    std::vector<AddedToken> added_tokens;
    std::unique_ptr<PostProcessor> post_processor;
    std::unique_ptr<Decoder> decoder;
    // Used when the config sets neither add_bos_token nor add_eos_token and there is no
    // post-processor of its own (SentencePiece files).
    bool default_add_bos = false;
    std::optional<int32_t> default_bos_id;
    std::optional<int32_t> default_eos_id;
    std::optional<int32_t> default_pad_id;
    // Without a normalizer stage of our own (SentencePiece), "normalized" tokens are
    // searched for in the raw text like the others.
    bool match_all_tokens_raw = false;
  };
  // Completes construction; subclasses call it once their model is loaded.
  Status Finish(const TokenizerConfig& config, Parts parts);

  // Tokens matched against normalized text (HF "normalized": true), for the subclass.
  const std::vector<AddedToken>& normalized_added_tokens() const { return normalized_added_; }

 private:
  Status EncodeInto(std::string_view text, std::vector<int32_t>* ids,
                    std::span<const std::pair<size_t, size_t>> literal = {}) const;
  // HF's ByteLevel process_offsets, when the post-processor trims offsets.
  void TrimOffsets(const std::vector<int32_t>& ids, std::vector<TokenOffset>* offsets) const;
  const std::string* TokenString(int32_t id) const;
  std::string StreamBytes(int32_t id, bool first) const;

  std::vector<AddedToken> normalized_added_;
  AddedTokenMatcher raw_matcher_;
  Vocab added_by_content_;
  std::vector<std::string> added_by_id_;  // empty where the id is not an added token
  std::vector<bool> special_;
  std::unique_ptr<PostProcessor> post_processor_;
  std::unique_ptr<Decoder> decoder_;
  bool clean_up_spaces_ = false;
  int32_t vocab_size_ = 0;
  std::optional<int32_t> bos_id_;
  std::vector<int32_t> eos_ids_;
  std::optional<int32_t> pad_id_;
  // Mid-sequence bytes of every token, precomputed so streaming allocates nothing per token.
  std::string stream_bytes_;
  std::vector<uint32_t> stream_offsets_;
};

}  // namespace ferry::tokenizer
