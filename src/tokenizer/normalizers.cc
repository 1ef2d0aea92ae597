#include "tokenizer/normalizers.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "tokenizer/byte_level.h"
#include "tokenizer/precompiled_charsmap.h"
#include "tokenizer/regex.h"
#include "tokenizer/unicode.h"
#include "tokenizer/utf8.h"

namespace ferry::tokenizer {
namespace {

class UnicodeNormalizer : public Normalizer {
 public:
  explicit UnicodeNormalizer(unicode::NormalForm form) : form_(form) {}
  Status Normalize(std::string* text) const override {
    *text = unicode::Normalize(*text, form_);
    return Status::Ok();
  }

 private:
  unicode::NormalForm form_;
};

void Lowercase(std::string* text) {
  std::string out;
  out.reserve(text->size());
  size_t pos = 0;
  while (pos < text->size()) unicode::AppendLowercase(NextCodePoint(*text, &pos), &out);
  *text = std::move(out);
}

void StripNonspacingMarks(std::string* text) {
  std::string out;
  out.reserve(text->size());
  size_t pos = 0;
  while (pos < text->size()) {
    const size_t start = pos;
    const char32_t cp = NextCodePoint(*text, &pos);
    if (!unicode::IsNonspacingMark(cp)) out.append(*text, start, pos - start);
  }
  *text = std::move(out);
}

class LowercaseNormalizer : public Normalizer {
 public:
  Status Normalize(std::string* text) const override {
    Lowercase(text);
    return Status::Ok();
  }
};

class StripAccentsNormalizer : public Normalizer {
 public:
  Status Normalize(std::string* text) const override {
    StripNonspacingMarks(text);
    return Status::Ok();
  }
};

class BertNormalizer : public Normalizer {
 public:
  BertNormalizer(bool clean_text, bool handle_chinese_chars, bool strip_accents, bool lowercase)
      : clean_text_(clean_text),
        handle_chinese_chars_(handle_chinese_chars),
        strip_accents_(strip_accents),
        lowercase_(lowercase) {}

  Status Normalize(std::string* text) const override {
    if (clean_text_ || handle_chinese_chars_) {
      std::string out;
      out.reserve(text->size());
      size_t pos = 0;
      while (pos < text->size()) {
        const size_t start = pos;
        const char32_t cp = NextCodePoint(*text, &pos);
        if (clean_text_) {
          if (cp == 0 || cp == kReplacementChar) continue;
          const bool is_tab_or_newline = cp == '\t' || cp == '\n' || cp == '\r';
          if (is_tab_or_newline || unicode::IsWhitespace(cp)) {
            out.push_back(' ');
            continue;
          }
          if (unicode::IsOther(cp)) continue;
        }
        if (handle_chinese_chars_ && unicode::IsChineseChar(cp)) {
          out.push_back(' ');
          out.append(*text, start, pos - start);
          out.push_back(' ');
          continue;
        }
        out.append(*text, start, pos - start);
      }
      *text = std::move(out);
    }
    if (strip_accents_) {
      *text = unicode::Normalize(*text, unicode::NormalForm::kNfd);
      StripNonspacingMarks(text);
    }
    if (lowercase_) Lowercase(text);
    return Status::Ok();
  }

 private:
  bool clean_text_;
  bool handle_chinese_chars_;
  bool strip_accents_;
  bool lowercase_;
};

class StripNormalizer : public Normalizer {
 public:
  StripNormalizer(bool left, bool right) : left_(left), right_(right) {}
  Status Normalize(std::string* text) const override {
    const auto [begin, end] = Kept(*text);
    *text = text->substr(begin, end - begin);
    return Status::Ok();
  }
  Status NormalizeAligned(AlignedText* text) const override {
    const auto [begin, end] = Kept(text->text);
    *text = text->Slice(begin, end);
    return Status::Ok();
  }

 private:
  std::pair<size_t, size_t> Kept(const std::string& text) const {
    size_t begin = 0;
    size_t end = text.size();
    if (left_) {
      while (begin < end) {
        size_t next = begin;
        if (!unicode::IsWhitespace(NextCodePoint(text, &next))) break;
        begin = next;
      }
    }
    if (right_) {
      while (end > begin) {
        size_t start = 0;
        if (!unicode::IsWhitespace(PrevCodePoint(text, end, &start))) break;
        end = start;
      }
    }
    return {begin, end};
  }

  bool left_;
  bool right_;
};

class PrependNormalizer : public Normalizer {
 public:
  explicit PrependNormalizer(std::string prefix) : prefix_(std::move(prefix)) {}
  Status Normalize(std::string* text) const override {
    if (!text->empty()) text->insert(0, prefix_);
    return Status::Ok();
  }
  // The prefix is aligned with the first character, as HF's NormalizedString::prepend does.
  Status NormalizeAligned(AlignedText* text) const override {
    if (text->text.empty()) return Status::Ok();
    AlignedText out;
    out.Append(prefix_, text->At(0));
    out.AppendSlice(*text, 0, text->text.size());
    *text = std::move(out);
    return Status::Ok();
  }

 private:
  std::string prefix_;
};

class ReplaceNormalizer : public Normalizer {
 public:
  ReplaceNormalizer(Regex regex, std::string content)
      : regex_(std::move(regex)), content_(std::move(content)) {}
  Status Normalize(std::string* text) const override {
    std::vector<Regex::Match> matches;
    FERRY_RETURN_IF_ERROR(regex_.FindAll(*text, &matches));
    if (matches.empty()) return Status::Ok();
    std::string out;
    out.reserve(text->size());
    size_t last = 0;
    for (const Regex::Match& m : matches) {
      out.append(*text, last, m.begin - last);
      out += content_;
      last = m.end;
    }
    out.append(*text, last, std::string::npos);
    *text = std::move(out);
    return Status::Ok();
  }
  // The replacement is aligned with the last byte of the match (HF inserts it after what
  // it removes, aligned with what precedes the insertion point).
  Status NormalizeAligned(AlignedText* text) const override {
    std::vector<Regex::Match> matches;
    FERRY_RETURN_IF_ERROR(regex_.FindAll(text->text, &matches));
    if (matches.empty()) return Status::Ok();
    AlignedText out;
    size_t last = 0;
    for (const Regex::Match& m : matches) {
      out.AppendSlice(*text, last, m.begin);
      const size_t at = m.end > m.begin ? m.end - 1 : (m.begin > 0 ? m.begin - 1 : 0);
      if (!text->align.empty()) out.Append(content_, text->At(std::min(at, text->align.size() - 1)));
      last = m.end;
    }
    out.AppendSlice(*text, last, text->text.size());
    *text = std::move(out);
    return Status::Ok();
  }

 private:
  Regex regex_;
  std::string content_;
};

// Maps every byte to GPT-2's printable alphabet, as the ByteLevel pre-tokenizer does.
class PrecompiledNormalizer : public Normalizer {
 public:
  explicit PrecompiledNormalizer(PrecompiledCharsmap map) : map_(std::move(map)) {}
  Status Normalize(std::string* text) const override {
    *text = map_.Normalize(*text);
    return Status::Ok();
  }

 private:
  PrecompiledCharsmap map_;
};

class ByteLevelNormalizer : public Normalizer {
 public:
  Status Normalize(std::string* text) const override;
};

class SequenceNormalizer : public Normalizer {
 public:
  explicit SequenceNormalizer(std::vector<std::unique_ptr<Normalizer>> steps)
      : steps_(std::move(steps)) {}
  Status Normalize(std::string* text) const override {
    for (const auto& step : steps_) FERRY_RETURN_IF_ERROR(step->Normalize(text));
    return Status::Ok();
  }
  Status NormalizeAligned(AlignedText* text) const override {
    for (const auto& step : steps_) FERRY_RETURN_IF_ERROR(step->NormalizeAligned(text));
    return Status::Ok();
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> steps_;
};

Status ByteLevelNormalizer::Normalize(std::string* text) const {
  std::string out;
  out.reserve(text->size() * 2);
  ByteLevelAlphabet::Get().Encode(*text, &out);
  *text = std::move(out);
  return Status::Ok();
}

}  // namespace

Status Normalizer::NormalizeAligned(AlignedText* t) const {
  if (t->text.empty()) return Status::Ok();
  std::string whole = t->text;
  FERRY_RETURN_IF_ERROR(Normalize(&whole));
  auto pieces = [&](auto next_end) -> Result<AlignedText> {
    AlignedText out;
    std::string piece;
    size_t begin = 0;
    while (begin < t->text.size()) {
      const size_t end = next_end(begin);
      piece.assign(t->text, begin, end - begin);
      FERRY_RETURN_IF_ERROR(Normalize(&piece));
      out.Append(piece, {t->align[begin].first, t->align[end - 1].second});
      begin = end;
    }
    return out;
  };
  // One character at a time.
  FERRY_ASSIGN_OR_RETURN(AlignedText out, pieces([&](size_t begin) {
                           size_t pos = begin;
                           NextCodePoint(t->text, &pos);
                           return pos;
                         }));
  if (out.text != whole) {
    // One word (with the spaces after it) at a time: compositions do not cross spaces.
    FERRY_ASSIGN_OR_RETURN(out, pieces([&](size_t begin) {
                             size_t end = begin;
                             while (end < t->text.size() && t->text[end] != ' ') ++end;
                             while (end < t->text.size() && t->text[end] == ' ') ++end;
                             return end;
                           }));
  }
  if (out.text != whole) {
    out = AlignedText();
    out.Append(whole, {t->align.front().first, t->align.back().second});
  }
  *t = std::move(out);
  return Status::Ok();
}

Result<std::unique_ptr<Normalizer>> MakeNormalizer(const Json& config) {
  if (config.is_null()) return std::unique_ptr<Normalizer>();
  const std::string type = JsonString(config, "type", "");
  if (type == "NFC") return std::unique_ptr<Normalizer>(new UnicodeNormalizer(unicode::NormalForm::kNfc));
  if (type == "NFD") return std::unique_ptr<Normalizer>(new UnicodeNormalizer(unicode::NormalForm::kNfd));
  if (type == "NFKC") return std::unique_ptr<Normalizer>(new UnicodeNormalizer(unicode::NormalForm::kNfkc));
  if (type == "NFKD") return std::unique_ptr<Normalizer>(new UnicodeNormalizer(unicode::NormalForm::kNfkd));
  if (type == "Lowercase") return std::unique_ptr<Normalizer>(new LowercaseNormalizer());
  if (type == "StripAccents") return std::unique_ptr<Normalizer>(new StripAccentsNormalizer());
  if (type == "ByteLevel") return std::unique_ptr<Normalizer>(new ByteLevelNormalizer());
  if (type == "BertNormalizer") {
    const bool lowercase = JsonBool(config, "lowercase", true);
    // strip_accents: null means "follow lowercase", as in the original BERT.
    const bool strip_accents = JsonOptBool(config, "strip_accents").value_or(lowercase);
    return std::unique_ptr<Normalizer>(new BertNormalizer(
        JsonBool(config, "clean_text", true), JsonBool(config, "handle_chinese_chars", true),
        strip_accents, lowercase));
  }
  if (type == "Strip") {
    return std::unique_ptr<Normalizer>(new StripNormalizer(JsonBool(config, "strip_left", true),
                                                           JsonBool(config, "strip_right", true)));
  }
  if (type == "Prepend") {
    return std::unique_ptr<Normalizer>(new PrependNormalizer(JsonString(config, "prepend", "")));
  }
  if (type == "Replace") {
    const Json* pattern = JsonField(config, "pattern");
    if (pattern == nullptr) return InvalidArgument("Replace normalizer without a pattern");
    FERRY_ASSIGN_OR_RETURN(Regex regex, MakePattern(*pattern));
    return std::unique_ptr<Normalizer>(
        new ReplaceNormalizer(std::move(regex), JsonString(config, "content", "")));
  }
  if (type == "Sequence") {
    const Json* list = JsonField(config, "normalizers");
    if (list == nullptr || !list->is_array()) {
      return InvalidArgument("Sequence normalizer without a 'normalizers' list");
    }
    std::vector<std::unique_ptr<Normalizer>> steps;
    for (const Json& item : *list) {
      FERRY_ASSIGN_OR_RETURN(std::unique_ptr<Normalizer> step, MakeNormalizer(item));
      if (step) steps.push_back(std::move(step));
    }
    return std::unique_ptr<Normalizer>(new SequenceNormalizer(std::move(steps)));
  }
  if (type == "Precompiled") {
    // SentencePiece's precompiled character map (base64 in tokenizer.json). An empty one is
    // the identity.
    const Json* map = JsonField(config, "precompiled_charsmap");
    if (map == nullptr || map->is_null() || (map->is_string() && map->get_ref<const std::string&>().empty())) {
      return std::unique_ptr<Normalizer>(new SequenceNormalizer({}));
    }
    if (!map->is_string()) return InvalidArgument("Precompiled normalizer: 'precompiled_charsmap' must be a string");
    Result<PrecompiledCharsmap> charsmap = PrecompiledCharsmap::FromBase64(map->get_ref<const std::string&>());
    if (!charsmap.ok()) return charsmap.status().WithContext("Precompiled normalizer");
    return std::unique_ptr<Normalizer>(new PrecompiledNormalizer(std::move(charsmap).value()));
  }
  return Unimplemented("normalizer type '" + type + "' is not supported");
}

}  // namespace ferry::tokenizer
