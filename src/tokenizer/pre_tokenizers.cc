#include "tokenizer/pre_tokenizers.h"

#include <algorithm>
#include <utility>

#include "tokenizer/byte_level.h"
#include "tokenizer/regex.h"
#include "tokenizer/unicode.h"
#include "tokenizer/utf8.h"

namespace ferry::tokenizer {

PreToken PreToken::Sub(size_t begin, size_t end, bool starts) const {
  PreToken out{text.substr(begin, end - begin), starts, {}};
  if (!align.empty()) {
    out.align.assign(align.begin() + static_cast<std::ptrdiff_t>(begin),
                     align.begin() + static_cast<std::ptrdiff_t>(end));
  }
  return out;
}

namespace {

// GPT-2's word split, also what the ByteLevel pre-tokenizer applies with use_regex.
constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

Result<SplitBehavior> ParseBehavior(const std::string& name) {
  if (name == "Removed") return SplitBehavior::kRemoved;
  if (name == "Isolated") return SplitBehavior::kIsolated;
  if (name == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (name == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  if (name == "Contiguous") return SplitBehavior::kContiguous;
  return InvalidArgument("unknown split behavior '" + name + "'");
}

// A piece of text, flagged when it is a delimiter (a pattern match).
struct Span {
  size_t begin;
  size_t end;
  bool is_match;
};

// Covers `text` with the matches and the gaps between them.
void SpansFromMatches(size_t text_size, const std::vector<Regex::Match>& matches, bool invert,
                      std::vector<Span>* spans) {
  size_t last = 0;
  for (const Regex::Match& m : matches) {
    if (m.begin > last) spans->push_back({last, m.begin, invert});
    spans->push_back({m.begin, m.end, !invert});
    last = m.end;
  }
  if (last < text_size) spans->push_back({last, text_size, invert});
}

// Every character satisfying `is_delimiter` is a match of its own, as HF's char patterns do.
template <typename Predicate>
void SpansFromChars(const std::string& text, Predicate is_delimiter, std::vector<Span>* spans) {
  size_t last = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t start = pos;
    const char32_t cp = NextCodePoint(text, &pos);
    if (!is_delimiter(cp)) continue;
    if (start > last) spans->push_back({last, start, false});
    spans->push_back({start, pos, true});
    last = pos;
  }
  if (last < text.size()) spans->push_back({last, text.size(), false});
}

// Applies an HF SplitDelimiterBehavior to the spans of `piece` and appends the results.
void EmitSplits(const PreToken& piece, std::vector<Span>* spans, SplitBehavior behavior,
                std::vector<PreToken>* out) {
  std::vector<Span> merged;
  const std::vector<Span>* result = spans;
  switch (behavior) {
    case SplitBehavior::kRemoved:
    case SplitBehavior::kIsolated:
      break;
    case SplitBehavior::kContiguous: {
      bool previous_match = false;
      for (const Span& s : *spans) {
        if (!merged.empty() && s.is_match == previous_match) {
          merged.back().end = s.end;
        } else {
          merged.push_back({s.begin, s.end, false});
        }
        previous_match = s.is_match;
      }
      result = &merged;
      break;
    }
    case SplitBehavior::kMergedWithPrevious: {
      bool previous_match = false;
      for (const Span& s : *spans) {
        if (s.is_match && !previous_match && !merged.empty()) {
          merged.back().end = s.end;
        } else {
          merged.push_back({s.begin, s.end, false});
        }
        previous_match = s.is_match;
      }
      result = &merged;
      break;
    }
    case SplitBehavior::kMergedWithNext: {
      bool previous_match = false;
      for (size_t i = spans->size(); i-- > 0;) {
        const Span& s = (*spans)[i];
        if (s.is_match && !previous_match && !merged.empty()) {
          merged.back().begin = s.begin;
        } else {
          merged.push_back({s.begin, s.end, false});
        }
        previous_match = s.is_match;
      }
      std::reverse(merged.begin(), merged.end());
      result = &merged;
      break;
    }
  }
  for (const Span& s : *result) {
    if (s.end == s.begin) continue;
    if (behavior == SplitBehavior::kRemoved && s.is_match) continue;
    out->push_back(piece.Sub(s.begin, s.end, piece.at_start && s.begin == 0));
  }
}

template <typename Fn>
Status SplitEach(std::vector<PreToken>* pieces, Fn split_one) {
  std::vector<PreToken> out;
  out.reserve(pieces->size() * 2);
  for (const PreToken& piece : *pieces) FERRY_RETURN_IF_ERROR(split_one(piece, &out));
  pieces->swap(out);
  return Status::Ok();
}

Status SplitOnRegex(const Regex& regex, bool invert, SplitBehavior behavior,
                    std::vector<PreToken>* pieces) {
  std::vector<Regex::Match> matches;
  std::vector<Span> spans;
  return SplitEach(pieces, [&](const PreToken& piece, std::vector<PreToken>* out) -> Status {
    matches.clear();
    spans.clear();
    FERRY_RETURN_IF_ERROR(regex.FindAll(piece.text, &matches));
    SpansFromMatches(piece.text.size(), matches, invert, &spans);
    EmitSplits(piece, &spans, behavior, out);
    return Status::Ok();
  });
}

template <typename Predicate>
Status SplitOnChars(Predicate is_delimiter, SplitBehavior behavior,
                    std::vector<PreToken>* pieces) {
  std::vector<Span> spans;
  return SplitEach(pieces, [&](const PreToken& piece, std::vector<PreToken>* out) -> Status {
    spans.clear();
    SpansFromChars(piece.text, is_delimiter, &spans);
    EmitSplits(piece, &spans, behavior, out);
    return Status::Ok();
  });
}

const Regex* Gpt2Regex() {
  static const Result<Regex> regex = Regex::Compile(kGpt2Pattern);
  return regex.ok() ? &regex.value() : nullptr;
}

class ByteLevelPreTokenizer : public PreTokenizer {
 public:
  ByteLevelPreTokenizer(bool add_prefix_space, bool use_regex)
      : add_prefix_space_(add_prefix_space), use_regex_(use_regex) {}

  Status PreTokenize(std::vector<PreToken>* pieces) const override {
    if (add_prefix_space_) {
      for (PreToken& piece : *pieces) {
        if (!piece.text.empty() && piece.text[0] != ' ') {
          piece.text.insert(piece.text.begin(), ' ');
          // Aligned with the first character, as HF's prepend does.
          if (!piece.align.empty()) piece.align.insert(piece.align.begin(), piece.align.front());
        }
      }
    }
    if (use_regex_) {
      const Regex* regex = Gpt2Regex();
      if (regex == nullptr) return Internal("GPT-2 split pattern failed to compile");
      FERRY_RETURN_IF_ERROR(SplitOnRegex(*regex, false, SplitBehavior::kIsolated, pieces));
    }
    const ByteLevelAlphabet& alphabet = ByteLevelAlphabet::Get();
    std::string mapped;
    std::vector<ByteRange> align;
    for (PreToken& piece : *pieces) {
      mapped.clear();
      if (piece.align.empty()) {
        alphabet.Encode(piece.text, &mapped);
      } else {
        // Each byte becomes one visible character of one or two bytes, aligned like it.
        align.clear();
        for (size_t i = 0; i < piece.text.size(); ++i) {
          const size_t before = mapped.size();
          alphabet.Encode(std::string_view(piece.text).substr(i, 1), &mapped);
          align.insert(align.end(), mapped.size() - before, piece.align[i]);
        }
        piece.align.swap(align);
      }
      piece.text.swap(mapped);
    }
    return Status::Ok();
  }

 private:
  bool add_prefix_space_;
  bool use_regex_;
};

enum class PrependScheme { kAlways, kFirst, kNever };

class MetaspacePreTokenizer : public PreTokenizer {
 public:
  MetaspacePreTokenizer(char32_t replacement, PrependScheme scheme, bool split)
      : replacement_cp_(replacement), scheme_(scheme), split_(split) {
    AppendUtf8(replacement, &replacement_);
  }

  Status PreTokenize(std::vector<PreToken>* pieces) const override {
    for (PreToken& piece : *pieces) {
      if (piece.text.find(' ') != std::string::npos) {
        std::string replaced;
        replaced.reserve(piece.text.size() + 8);
        std::vector<ByteRange> align;
        for (size_t i = 0; i < piece.text.size(); ++i) {
          const char c = piece.text[i];
          const size_t n = c == ' ' ? replacement_.size() : 1;
          if (c == ' ') {
            replaced += replacement_;
          } else {
            replaced.push_back(c);
          }
          if (!piece.align.empty()) align.insert(align.end(), n, piece.align[i]);
        }
        piece.text.swap(replaced);
        piece.align.swap(align);
      }
      const bool prepend = scheme_ == PrependScheme::kAlways ||
                           (scheme_ == PrependScheme::kFirst && piece.at_start);
      if (prepend && !piece.text.empty() && piece.text.compare(0, replacement_.size(), replacement_) != 0) {
        piece.text.insert(0, replacement_);
        if (!piece.align.empty()) piece.align.insert(piece.align.begin(), replacement_.size(), piece.align.front());
      }
    }
    if (!split_) {
      std::erase_if(*pieces, [](const PreToken& p) { return p.text.empty(); });
      return Status::Ok();
    }
    const char32_t replacement = replacement_cp_;
    return SplitOnChars([replacement](char32_t cp) { return cp == replacement; },
                        SplitBehavior::kMergedWithNext, pieces);
  }

 private:
  char32_t replacement_cp_;
  std::string replacement_;
  PrependScheme scheme_;
  bool split_;
};

// Whitespace is dropped and every punctuation character becomes its own word.
class BertPreTokenizer : public PreTokenizer {
 public:
  Status PreTokenize(std::vector<PreToken>* pieces) const override {
    return SplitEach(pieces, [](const PreToken& piece, std::vector<PreToken>* out) -> Status {
      size_t word_begin = 0;
      size_t pos = 0;
      const std::string& text = piece.text;
      auto flush = [&](size_t end) {
        if (end > word_begin) out->push_back(piece.Sub(word_begin, end, piece.at_start && word_begin == 0));
      };
      while (pos < text.size()) {
        const size_t start = pos;
        const char32_t cp = NextCodePoint(text, &pos);
        if (unicode::IsWhitespace(cp)) {
          flush(start);
          word_begin = pos;
        } else if (unicode::IsBertPunctuation(cp)) {
          flush(start);
          out->push_back(piece.Sub(start, pos, piece.at_start && start == 0));
          word_begin = pos;
        }
      }
      flush(text.size());
      return Status::Ok();
    });
  }
};

class RegexSplitPreTokenizer : public PreTokenizer {
 public:
  RegexSplitPreTokenizer(Regex regex, SplitBehavior behavior, bool invert)
      : regex_(std::move(regex)), behavior_(behavior), invert_(invert) {}
  Status PreTokenize(std::vector<PreToken>* pieces) const override {
    return SplitOnRegex(regex_, invert_, behavior_, pieces);
  }

 private:
  Regex regex_;
  SplitBehavior behavior_;
  bool invert_;
};

template <typename Predicate>
class CharSplitPreTokenizer : public PreTokenizer {
 public:
  CharSplitPreTokenizer(Predicate is_delimiter, SplitBehavior behavior)
      : is_delimiter_(is_delimiter), behavior_(behavior) {}
  Status PreTokenize(std::vector<PreToken>* pieces) const override {
    return SplitOnChars(is_delimiter_, behavior_, pieces);
  }

 private:
  Predicate is_delimiter_;
  SplitBehavior behavior_;
};

template <typename Predicate>
std::unique_ptr<PreTokenizer> MakeCharSplit(Predicate is_delimiter, SplitBehavior behavior) {
  return std::make_unique<CharSplitPreTokenizer<Predicate>>(is_delimiter, behavior);
}

class SequencePreTokenizer : public PreTokenizer {
 public:
  explicit SequencePreTokenizer(std::vector<std::unique_ptr<PreTokenizer>> steps)
      : steps_(std::move(steps)) {}
  Status PreTokenize(std::vector<PreToken>* pieces) const override {
    for (const auto& step : steps_) FERRY_RETURN_IF_ERROR(step->PreTokenize(pieces));
    return Status::Ok();
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> steps_;
};

Result<char32_t> ReadReplacementChar(const Json& config) {
  const std::string replacement = JsonString(config, "replacement", "\xE2\x96\x81");
  size_t pos = 0;
  if (replacement.empty() || !IsValidUtf8(replacement)) {
    return InvalidArgument("Metaspace replacement must be one character");
  }
  const char32_t cp = NextCodePoint(replacement, &pos);
  if (pos != replacement.size()) return InvalidArgument("Metaspace replacement must be one character");
  return cp;
}

}  // namespace

Result<std::unique_ptr<PreTokenizer>> MakePreTokenizer(const Json& config) {
  if (config.is_null()) return std::unique_ptr<PreTokenizer>();
  const std::string type = JsonString(config, "type", "");
  if (type == "ByteLevel") {
    return std::unique_ptr<PreTokenizer>(new ByteLevelPreTokenizer(
        JsonBool(config, "add_prefix_space", true), JsonBool(config, "use_regex", true)));
  }
  if (type == "Metaspace") {
    FERRY_ASSIGN_OR_RETURN(char32_t replacement, ReadReplacementChar(config));
    PrependScheme scheme = PrependScheme::kAlways;
    if (auto name = JsonOptString(config, "prepend_scheme")) {
      if (*name == "always") {
        scheme = PrependScheme::kAlways;
      } else if (*name == "first") {
        scheme = PrependScheme::kFirst;
      } else if (*name == "never") {
        scheme = PrependScheme::kNever;
      } else {
        return InvalidArgument("unknown Metaspace prepend_scheme '" + *name + "'");
      }
    } else if (auto add_prefix_space = JsonOptBool(config, "add_prefix_space")) {
      // Files written before prepend_scheme existed.
      scheme = *add_prefix_space ? PrependScheme::kAlways : PrependScheme::kNever;
    }
    return std::unique_ptr<PreTokenizer>(
        new MetaspacePreTokenizer(replacement, scheme, JsonBool(config, "split", true)));
  }
  if (type == "BertPreTokenizer") return std::unique_ptr<PreTokenizer>(new BertPreTokenizer());
  if (type == "Whitespace") {
    FERRY_ASSIGN_OR_RETURN(Regex regex, Regex::Compile(R"(\w+|[^\w\s]+)"));
    return std::unique_ptr<PreTokenizer>(
        new RegexSplitPreTokenizer(std::move(regex), SplitBehavior::kRemoved, /*invert=*/true));
  }
  if (type == "WhitespaceSplit") {
    return MakeCharSplit([](char32_t cp) { return unicode::IsWhitespace(cp); },
                         SplitBehavior::kRemoved);
  }
  if (type == "Digits") {
    const bool individual = JsonBool(config, "individual_digits", false);
    return MakeCharSplit([](char32_t cp) { return unicode::IsNumeric(cp); },
                         individual ? SplitBehavior::kIsolated : SplitBehavior::kContiguous);
  }
  if (type == "Punctuation") {
    FERRY_ASSIGN_OR_RETURN(SplitBehavior behavior,
                           ParseBehavior(JsonString(config, "behavior", "Isolated")));
    return MakeCharSplit([](char32_t cp) { return unicode::IsBertPunctuation(cp); }, behavior);
  }
  if (type == "CharDelimiterSplit") {
    const std::string delimiter = JsonString(config, "delimiter", "");
    size_t pos = 0;
    if (delimiter.empty() || !IsValidUtf8(delimiter)) {
      return InvalidArgument("CharDelimiterSplit needs a one-character delimiter");
    }
    const char32_t cp = NextCodePoint(delimiter, &pos);
    return MakeCharSplit([cp](char32_t c) { return c == cp; }, SplitBehavior::kRemoved);
  }
  if (type == "Split") {
    const Json* pattern = JsonField(config, "pattern");
    if (pattern == nullptr) return InvalidArgument("Split pre-tokenizer without a pattern");
    FERRY_ASSIGN_OR_RETURN(Regex regex, MakePattern(*pattern));
    FERRY_ASSIGN_OR_RETURN(SplitBehavior behavior,
                           ParseBehavior(JsonString(config, "behavior", "Isolated")));
    return std::unique_ptr<PreTokenizer>(
        new RegexSplitPreTokenizer(std::move(regex), behavior, JsonBool(config, "invert", false)));
  }
  if (type == "Sequence") {
    const Json* list = JsonField(config, "pretokenizers");
    if (list == nullptr || !list->is_array()) {
      return InvalidArgument("Sequence pre-tokenizer without a 'pretokenizers' list");
    }
    std::vector<std::unique_ptr<PreTokenizer>> steps;
    for (const Json& item : *list) {
      FERRY_ASSIGN_OR_RETURN(std::unique_ptr<PreTokenizer> step, MakePreTokenizer(item));
      if (step) steps.push_back(std::move(step));
    }
    return std::unique_ptr<PreTokenizer>(new SequencePreTokenizer(std::move(steps)));
  }
  return Unimplemented("pre-tokenizer type '" + type + "' is not supported");
}

}  // namespace ferry::tokenizer
