// WordPiece (BERT): greedy longest-match-first over the vocabulary, "##" continuations.
// Also WordLevel, the plain word -> id lookup some tokenizer.json files use.
#pragma once

#include <string>
#include <vector>

#include "tokenizer/model.h"

namespace ferry::tokenizer {

// Thread-safe: immutable after Create().
class WordPieceModel : public Model {
 public:
  static Result<std::unique_ptr<WordPieceModel>> Create(const Json& config);

  Status Tokenize(std::string_view word, std::vector<int32_t>* ids,
                  std::vector<ByteRange>* spans = nullptr) const override;
  std::optional<int32_t> TokenToId(std::string_view token) const override;
  const std::string* IdToToken(int32_t id) const override;
  int32_t vocab_size() const override { return static_cast<int32_t>(tokens_.size()); }
  std::string continuing_subword_prefix() const override { return prefix_; }
  std::optional<int32_t> unk_id() const override { return unk_id_; }

 private:
  Vocab vocab_;
  std::vector<std::string> tokens_;
  std::string prefix_;
  size_t max_input_chars_per_word_ = 100;
  int32_t unk_id_ = -1;
  std::string unk_token_;
};

// Thread-safe: immutable after Create().
class WordLevelModel : public Model {
 public:
  static Result<std::unique_ptr<WordLevelModel>> Create(const Json& config);

  Status Tokenize(std::string_view word, std::vector<int32_t>* ids,
                  std::vector<ByteRange>* spans = nullptr) const override;
  std::optional<int32_t> TokenToId(std::string_view token) const override;
  const std::string* IdToToken(int32_t id) const override;
  int32_t vocab_size() const override { return static_cast<int32_t>(tokens_.size()); }
  std::optional<int32_t> unk_id() const override {
    return unk_id_ < 0 ? std::nullopt : std::optional<int32_t>(unk_id_);
  }

 private:
  Vocab vocab_;
  std::vector<std::string> tokens_;
  int32_t unk_id_ = -1;
  std::string unk_token_;
};

}  // namespace ferry::tokenizer
