#include "tokenizer/added_vocabulary.h"

#include <algorithm>

#include "tokenizer/unicode.h"
#include "tokenizer/utf8.h"

namespace ferry::tokenizer {
namespace {

bool EndsWithWordChar(std::string_view text, size_t end) {
  if (end == 0) return false;
  size_t start = 0;
  return unicode::IsWordChar(PrevCodePoint(text, end, &start));
}

bool StartsWithWordChar(std::string_view text, size_t begin) {
  if (begin >= text.size()) return false;
  return unicode::IsWordChar(NextCodePoint(text, &begin));
}

// Start of the whitespace run that ends at `end`.
size_t WhitespaceRunBefore(std::string_view text, size_t end) {
  while (end > 0) {
    size_t start = 0;
    if (!unicode::IsWhitespace(PrevCodePoint(text, end, &start))) break;
    end = start;
  }
  return end;
}

// End of the whitespace run that starts at `begin`.
size_t WhitespaceRunAfter(std::string_view text, size_t begin) {
  while (begin < text.size()) {
    size_t next = begin;
    if (!unicode::IsWhitespace(NextCodePoint(text, &next))) break;
    begin = next;
  }
  return begin;
}

}  // namespace

AddedTokenMatcher::AddedTokenMatcher(const std::vector<AddedToken>& tokens) {
  for (const AddedToken& t : tokens) {
    if (t.content.empty()) continue;
    entries_.push_back({t.content, t.id, t.single_word, t.lstrip, t.rstrip});
  }
  std::stable_sort(entries_.begin(), entries_.end(), [](const Entry& a, const Entry& b) {
    const auto fa = static_cast<unsigned char>(a.pattern[0]);
    const auto fb = static_cast<unsigned char>(b.pattern[0]);
    if (fa != fb) return fa < fb;
    return a.pattern.size() > b.pattern.size();
  });
  size_t i = 0;
  for (int b = 0; b <= 256; ++b) {
    while (i < entries_.size() && static_cast<unsigned char>(entries_[i].pattern[0]) < b) ++i;
    bucket_begin_[static_cast<size_t>(b)] = static_cast<uint32_t>(b == 256 ? entries_.size() : i);
  }
}

const AddedTokenMatcher::Entry* AddedTokenMatcher::LongestAt(std::string_view text, size_t pos) const {
  const auto first = static_cast<unsigned char>(text[pos]);
  const size_t end = bucket_begin_[first + 1u];
  const std::string_view rest = text.substr(pos);
  for (size_t i = bucket_begin_[first]; i < end; ++i) {
    const Entry& e = entries_[i];
    if (rest.size() >= e.pattern.size() && rest.compare(0, e.pattern.size(), e.pattern) == 0) return &e;
  }
  return nullptr;
}

void AddedTokenMatcher::Split(std::string_view text, std::vector<TextSegment>* segments) const {
  if (text.empty()) return;
  size_t emitted = 0;  // end of the last segment pushed
  size_t pos = 0;
  while (pos < text.size()) {
    const Entry* entry = entries_.empty() ? nullptr : LongestAt(text, pos);
    if (entry == nullptr) {
      ++pos;
      continue;
    }
    const size_t match_begin = pos;
    const size_t match_end = pos + entry->pattern.size();
    pos = match_end;
    if (entry->single_word) {
      const bool word_before = match_begin > 0 && EndsWithWordChar(text, match_begin);
      const bool word_after = match_end < text.size() && StartsWithWordChar(text, match_end);
      if (word_before || word_after) continue;
    }
    size_t begin = match_begin;
    size_t end = match_end;
    // Whitespace already claimed by the previous token stays with it.
    if (entry->lstrip) begin = std::max(WhitespaceRunBefore(text, begin), emitted);
    if (entry->rstrip) end = WhitespaceRunAfter(text, end);
    if (begin > emitted) segments->push_back({emitted, begin, -1});
    segments->push_back({begin, end, entry->id});
    emitted = end;
    pos = std::max(pos, end);
  }
  if (emitted < text.size()) segments->push_back({emitted, text.size(), -1});
}

}  // namespace ferry::tokenizer
