// Added and special tokens: found in the raw text before normalization and
// pre-tokenization, leftmost-longest, honouring single_word / lstrip / rstrip like Hugging
// Face's AddedVocabulary.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ferry::tokenizer {

struct AddedToken {
  std::string content;
  int32_t id = -1;
  bool single_word = false;
  bool lstrip = false;
  bool rstrip = false;
  // Matched against normalized text rather than the raw input.
  bool normalized = false;
  bool special = false;
};

// A stretch of the input: ordinary text (id < 0) or one added token (with any whitespace it
// strips).
struct TextSegment {
  size_t begin;
  size_t end;
  int32_t id;
};

// Thread-safe: immutable after construction.
class AddedTokenMatcher {
 public:
  AddedTokenMatcher() { bucket_begin_.fill(0); }
  // Each token is searched for as its `content`.
  explicit AddedTokenMatcher(const std::vector<AddedToken>& tokens);

  bool empty() const { return entries_.empty(); }
  // Covers `text` with segments, in order. Empty text gives no segments.
  void Split(std::string_view text, std::vector<TextSegment>* segments) const;

 private:
  struct Entry {
    std::string pattern;
    int32_t id;
    bool single_word;
    bool lstrip;
    bool rstrip;
  };
  // Longest entry starting at text[pos], or nullptr.
  const Entry* LongestAt(std::string_view text, size_t pos) const;

  // Sorted by first byte, longest first; bucket_begin_[b] .. bucket_begin_[b + 1] start with b.
  std::vector<Entry> entries_;
  std::array<uint32_t, 257> bucket_begin_;
};

}  // namespace ferry::tokenizer
