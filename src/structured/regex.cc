#include "structured/regex.h"

#include <string>
#include <vector>

#include "tokenizer/utf8.h"

namespace ferry::structured {
namespace {

// One character of the pattern's language: ASCII bytes, multi-byte characters, or (negated)
// any UTF-8 character except the ASCII bytes.
struct CharClass {
  ByteSet ascii;
  std::vector<std::string> multibyte;
  bool negated = false;
};

ByteSet Range(int lo, int hi) {
  ByteSet s;
  for (int c = lo; c <= hi; ++c) s.set(static_cast<size_t>(c));
  return s;
}

ByteSet Digits() { return Range('0', '9'); }
ByteSet Word() { return Range('a', 'z') | Range('A', 'Z') | Digits() | Range('_', '_'); }
ByteSet Space() {
  ByteSet s;
  for (char c : {' ', '\t', '\n', '\r', '\f', '\v'}) s.set(static_cast<uint8_t>(c));
  return s;
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

class RegexParser {
 public:
  RegexParser(GrammarBuilder& b, std::string_view p, const RegexOptions& o, std::string_view name)
      : b_(b), p_(p), opt_(o), name_(name) {}

  Result<int32_t> Parse() {
    if (!p_.empty() && p_[0] == '^') ++i_;
    FERRY_ASSIGN_OR_RETURN(std::vector<Sequence> alts, Alternation());
    if (i_ < p_.size()) return Error("unbalanced ')'");
    return b_.Choice(name_, std::move(alts));
  }

 private:
  Status Error(const std::string& what) const {
    return InvalidArgument("regex " + std::string(p_.substr(0, 200)) + ": " + what + " at offset " + std::to_string(i_));
  }
  bool AtEnd() const { return i_ >= p_.size(); }

  Result<std::vector<Sequence>> Alternation() {
    std::vector<Sequence> alts;
    while (true) {
      FERRY_ASSIGN_OR_RETURN(Sequence s, Concatenation());
      alts.push_back(std::move(s));
      if (!AtEnd() && p_[i_] == '|') {
        ++i_;
        continue;
      }
      return alts;
    }
  }

  Result<Sequence> Concatenation() {
    Sequence seq;
    while (!AtEnd() && p_[i_] != '|' && p_[i_] != ')') {
      if (p_[i_] == '$') {
        ++i_;
        if (!AtEnd() && p_[i_] != '|' && p_[i_] != ')') return Error("'$' is only supported at the end");
        continue;
      }
      FERRY_ASSIGN_OR_RETURN(Sequence atom, Atom());
      FERRY_ASSIGN_OR_RETURN(Sequence quantified, Quantifier(std::move(atom)));
      seq.insert(seq.end(), quantified.begin(), quantified.end());
    }
    return seq;
  }

  Result<Sequence> Quantifier(Sequence atom) {
    if (AtEnd()) return atom;
    int64_t min = 0, max = -1;
    const char c = p_[i_];
    if (c == '*') {
      ++i_;
    } else if (c == '+') {
      min = 1;
      ++i_;
    } else if (c == '?') {
      max = 1;
      ++i_;
    } else if (c == '{') {
      size_t j = i_ + 1;
      auto number = [&](int64_t& v) {
        const size_t start = j;
        v = 0;
        while (j < p_.size() && p_[j] >= '0' && p_[j] <= '9' && v <= GrammarBuilder::kMaxRepeat) v = v * 10 + (p_[j++] - '0');
        return j > start;
      };
      if (!number(min)) return atom;  // a literal '{', as in most engines
      if (j < p_.size() && p_[j] == ',') {
        ++j;
        if (!number(max)) max = -1;
      } else {
        max = min;
      }
      if (j >= p_.size() || p_[j] != '}') return Error("unterminated {m,n}");
      i_ = j + 1;
    } else {
      return atom;
    }
    if (!AtEnd() && p_[i_] == '?') ++i_;  // lazy: the same language
    if (!AtEnd() && p_[i_] == '+') return Error("possessive quantifiers are not supported");
    if (!AtEnd() && (p_[i_] == '*' || p_[i_] == '{' || (p_[i_] == '+' && c != '?'))) {
      return Error("nested quantifier");
    }
    if (min == 0 && max == -1) return Sequence{GrammarBuilder::Ref(b_.Star(name_ + "_star", std::move(atom)))};
    if (min == 1 && max == -1) return Sequence{GrammarBuilder::Ref(b_.Plus(name_ + "_plus", std::move(atom)))};
    if (min == 0 && max == 1) return Sequence{GrammarBuilder::Ref(b_.Optional(name_ + "_opt", std::move(atom)))};
    auto r = b_.Repeat(name_ + "_rep", atom, min, max);
    if (!r.ok()) return Error(r.status().message());
    return Sequence{GrammarBuilder::Ref(r.value())};
  }

  Result<Sequence> Atom() {
    const char c = p_[i_];
    if (c == '(') {
      if (++depth_ > kMaxDepth) return Error("groups nested deeper than " + std::to_string(kMaxDepth));
      struct Leave {
        int& d;
        ~Leave() { --d; }
      } leave{depth_};
      ++i_;
      if (!AtEnd() && p_[i_] == '?') {
        ++i_;
        if (!AtEnd() && p_[i_] == ':') {
          ++i_;
        } else if (!AtEnd() && (p_[i_] == 'P' || (p_[i_] == '<' && i_ + 1 < p_.size() && p_[i_ + 1] != '=' && p_[i_ + 1] != '!'))) {
          // A named group: (?P<name>...) or (?<name>...).
          const size_t close = p_.find('>', i_);
          if (close == std::string_view::npos) return Error("unterminated group name");
          i_ = close + 1;
        } else {
          return Error("lookaround and inline flags are not supported");
        }
      }
      FERRY_ASSIGN_OR_RETURN(std::vector<Sequence> alts, Alternation());
      if (AtEnd() || p_[i_] != ')') return Error("missing ')'");
      ++i_;
      if (alts.size() == 1) return std::move(alts[0]);
      return Sequence{GrammarBuilder::Ref(b_.Choice(name_ + "_group", std::move(alts)))};
    }
    if (c == '[') return Class();
    if (c == '.') {
      ++i_;
      CharClass cc;
      cc.negated = true;
      cc.ascii.set('\n');
      return Emit(cc);
    }
    if (c == '\\') {
      CharClass cc;
      FERRY_RETURN_IF_ERROR(Escape(cc, /*in_class=*/false));
      return Emit(cc);
    }
    if (c == '*' || c == '+' || c == '?') return Error("quantifier without an operand");
    if (c == '^') return Error("'^' is only supported at the start");
    CharClass cc;
    FERRY_RETURN_IF_ERROR(Literal(cc));
    return Emit(cc);
  }

  // One literal character (UTF-8) at i_ into cc.
  Status Literal(CharClass& cc) {
    const unsigned char c = static_cast<unsigned char>(p_[i_]);
    size_t len = c < 0x80 ? 1 : c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2;
    if (i_ + len > p_.size()) return Error("invalid UTF-8");
    if (len == 1) {
      cc.ascii.set(c);
    } else {
      cc.multibyte.emplace_back(p_.substr(i_, len));
    }
    i_ += len;
    return Status::Ok();
  }

  Status Codepoint(uint32_t cp, CharClass& cc) {
    if (cp < 0x80) {
      cc.ascii.set(cp);
    } else {
      std::string s;
      tokenizer::AppendUtf8(static_cast<char32_t>(cp), &s);
      cc.multibyte.push_back(std::move(s));
    }
    return Status::Ok();
  }

  // A backslash escape at i_ into cc (negated shorthands set cc.negated outside classes).
  Status Escape(CharClass& cc, bool in_class) {
    ++i_;
    if (AtEnd()) return Error("trailing backslash");
    const char e = p_[i_++];
    switch (e) {
      case 'd': cc.ascii |= Digits(); return Status::Ok();
      case 'w': cc.ascii |= Word(); return Status::Ok();
      case 's': cc.ascii |= Space(); return Status::Ok();
      case 'D': case 'W': case 'S': {
        if (in_class) return Error(std::string("\\") + e + " inside a class is not supported");
        cc.negated = true;
        cc.ascii |= e == 'D' ? Digits() : e == 'W' ? Word() : Space();
        return Status::Ok();
      }
      case 'n': cc.ascii.set('\n'); return Status::Ok();
      case 't': cc.ascii.set('\t'); return Status::Ok();
      case 'r': cc.ascii.set('\r'); return Status::Ok();
      case 'f': cc.ascii.set('\f'); return Status::Ok();
      case 'v': cc.ascii.set('\v'); return Status::Ok();
      case '0': cc.ascii.set(0); return Status::Ok();
      case 'x': case 'u': {
        const size_t digits = e == 'x' ? 2 : 4;
        if (i_ + digits > p_.size()) return Error("short \\x or \\u escape");
        uint32_t cp = 0;
        for (size_t k = 0; k < digits; ++k) {
          const int h = HexValue(p_[i_ + k]);
          if (h < 0) return Error("bad hex digit");
          cp = cp * 16 + static_cast<uint32_t>(h);
        }
        i_ += digits;
        if (cp >= 0xD800 && cp <= 0xDFFF) return Error("surrogate code point");
        return Codepoint(cp, cc);
      }
      case 'b': case 'B': return Error("word boundaries are not supported");
      default:
        if (e >= '1' && e <= '9') return Error("backreferences are not supported");
        if ((e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z')) return Error(std::string("unknown escape \\") + e);
        cc.ascii.set(static_cast<uint8_t>(e));
        return Status::Ok();
    }
  }

  Result<Sequence> Class() {
    ++i_;
    CharClass cc;
    if (!AtEnd() && p_[i_] == '^') {
      cc.negated = true;
      ++i_;
    }
    bool first = true;
    while (true) {
      if (AtEnd()) return Error("missing ']'");
      if (p_[i_] == ']' && !first) break;
      first = false;
      CharClass one;
      if (p_[i_] == '\\') {
        FERRY_RETURN_IF_ERROR(Escape(one, /*in_class=*/true));
      } else {
        FERRY_RETURN_IF_ERROR(Literal(one));
      }
      // A range a-z (ASCII, between two single characters).
      if (i_ + 1 < p_.size() && p_[i_] == '-' && p_[i_ + 1] != ']') {
        if (!one.multibyte.empty() || one.ascii.count() != 1) return Error("ranges are supported between ASCII characters only");
        ++i_;
        CharClass hi;
        if (p_[i_] == '\\') {
          FERRY_RETURN_IF_ERROR(Escape(hi, true));
        } else {
          FERRY_RETURN_IF_ERROR(Literal(hi));
        }
        if (!hi.multibyte.empty() || hi.ascii.count() != 1) return Error("ranges are supported between ASCII characters only");
        int lo = 0, up = 0;
        for (int c = 0; c < 128; ++c) {
          if (one.ascii.test(static_cast<size_t>(c))) lo = c;
          if (hi.ascii.test(static_cast<size_t>(c))) up = c;
        }
        if (up < lo) return Error("reversed range");
        cc.ascii |= Range(lo, up);
        continue;
      }
      cc.ascii |= one.ascii;
      cc.multibyte.insert(cc.multibyte.end(), one.multibyte.begin(), one.multibyte.end());
    }
    ++i_;
    if (cc.negated && !cc.multibyte.empty()) return Error("negated classes may list ASCII characters only");
    return Emit(cc);
  }

  // The elements for one character of the class (JSON-escaped in a JSON string).
  Sequence Emit(const CharClass& cc) {
    std::vector<Sequence> alts;
    ByteSet plain;
    ByteSet special;  // characters written as JSON escapes
    if (opt_.json_string) {
      for (int c = 0; c < 128; ++c) {
        const bool member = cc.negated ? !cc.ascii.test(static_cast<size_t>(c)) : cc.ascii.test(static_cast<size_t>(c));
        if (!member) continue;
        if (c == '"' || c == '\\' || c < 0x20) {
          special.set(static_cast<size_t>(c));
        } else {
          plain.set(static_cast<size_t>(c));
        }
      }
      for (int c = 0; c < 0x20 + 0x60; ++c) {
        if (!special.test(static_cast<size_t>(c))) continue;
        static const char* kShort[] = {"\\b", "\\t", "\\n", "\\f", "\\r"};
        const int short_index = c == '\b' ? 0 : c == '\t' ? 1 : c == '\n' ? 2 : c == '\f' ? 3 : c == '\r' ? 4 : -1;
        std::string esc;
        if (c == '"') {
          esc = "\\\"";
        } else if (c == '\\') {
          esc = "\\\\";
        } else if (short_index >= 0) {
          esc = kShort[short_index];
        } else {
          static const char* kHex = "0123456789abcdef";
          esc = std::string("\\u00") + kHex[c >> 4] + kHex[c & 15];
        }
        alts.push_back(b_.Literal(esc));
      }
      if (cc.negated) {
        ByteSet excluded;
        for (int c = 0; c < 128; ++c) {
          if (!plain.test(static_cast<size_t>(c))) excluded.set(static_cast<size_t>(c));
        }
        alts.push_back({GrammarBuilder::Ref(AnyUtf8Char(b_, excluded, name_ + "_char"))});
        plain.reset();
      }
    } else if (cc.negated) {
      alts.push_back({GrammarBuilder::Ref(AnyUtf8Char(b_, cc.ascii, name_ + "_char"))});
    } else {
      plain = cc.ascii;
    }
    if (plain.any()) alts.push_back({b_.Bytes(plain)});
    for (const std::string& m : cc.multibyte) alts.push_back(b_.Literal(m));
    if (alts.size() == 1) return alts[0];
    if (alts.empty()) {
      // An empty class matches nothing: a rule with no way through.
      const int32_t never = b_.AddRule(name_ + "_empty_class");
      b_.AddAlternative(never, {b_.Bytes(ByteSet())});
      return {GrammarBuilder::Ref(never)};
    }
    return {GrammarBuilder::Ref(b_.Choice(name_ + "_class", std::move(alts)))};
  }

  static constexpr int kMaxDepth = 100;
  GrammarBuilder& b_;
  std::string_view p_;
  RegexOptions opt_;
  std::string name_;
  size_t i_ = 0;
  int depth_ = 0;
};

}  // namespace

Result<int32_t> AddRegex(GrammarBuilder& b, std::string_view pattern, const RegexOptions& options,
                         std::string_view name) {
  return RegexParser(b, pattern, options, name).Parse();
}

}  // namespace ferry::structured
