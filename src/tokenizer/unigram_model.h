// Unigram (SentencePiece's unigram language model, as tokenizer.json stores it): the split
// of a word into pieces with the highest total log-probability (Viterbi over the word's
// characters). XLM-RoBERTa, bge-m3, multilingual-e5, T5 and many other SentencePiece
// tokenizers converted by transformers use it.
#pragma once

#include <string>
#include <vector>

#include "tokenizer/model.h"

namespace ferry::tokenizer {

// Thread-safe: immutable after Create().
//
// Matches Hugging Face tokenizers' Unigram: a character no piece of one character covers
// becomes an unknown node scored min_score - 10; among equal-scoring paths the one whose
// last piece starts earliest wins (the lattice's insertion order); consecutive unknowns are
// fused into one unk token, or with byte_fallback spelled as <0xXX> byte pieces.
class UnigramModel : public Model {
 public:
  static Result<std::unique_ptr<UnigramModel>> Create(const Json& config);

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
  std::vector<double> scores_;
  int32_t unk_id_ = -1;
  double unk_score_ = 0.0;
  bool byte_fallback_ = false;
  size_t max_piece_bytes_ = 0;
  int32_t byte_ids_[256] = {};
};

}  // namespace ferry::tokenizer
