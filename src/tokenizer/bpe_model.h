// Byte-pair encoding as Hugging Face's BPE model runs it: byte-level (GPT-2, Llama-3) and
// SentencePiece-style with byte fallback and fused unknowns (LLaMA-2).
#pragma once

#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "tokenizer/model.h"

namespace ferry::tokenizer {

struct BpeOptions {
  std::optional<std::string> unk_token;
  std::string continuing_subword_prefix;
  std::string end_of_word_suffix;
  bool fuse_unk = false;
  bool byte_fallback = false;
  // Look the whole word up before merging (Llama-3).
  bool ignore_merges = false;
};

// Thread-safe: immutable after Create().
class BpeModel : public Model {
 public:
  static Result<std::unique_ptr<BpeModel>> Create(const Json& config);

  Status Tokenize(std::string_view word, std::vector<int32_t>* ids,
                  std::vector<ByteRange>* spans = nullptr) const override;
  std::optional<int32_t> TokenToId(std::string_view token) const override;
  const std::string* IdToToken(int32_t id) const override;
  int32_t vocab_size() const override { return static_cast<int32_t>(tokens_.size()); }
  std::string continuing_subword_prefix() const override { return options_.continuing_subword_prefix; }
  std::optional<int32_t> unk_id() const override { return unk_id_; }

 private:
  struct Merge {
    int32_t rank;
    int32_t new_id;
  };
  static uint64_t PairKey(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
  }
  const Merge* FindMerge(int32_t left, int32_t right) const;

  BpeOptions options_;
  Vocab vocab_;
  std::vector<std::string> tokens_;
  std::unordered_map<uint64_t, Merge> merges_;
  std::optional<int32_t> unk_id_;
  // Ids of the "<0xAB>" byte tokens, -1 where the vocabulary has none.
  std::vector<int32_t> byte_ids_;
};

}  // namespace ferry::tokenizer
