#include "template/lexer.h"

#include <cctype>
#include <cerrno>
#include <cstring>
#include <cstdlib>

#include "template/value.h"

namespace ferry::jinja {

std::string Where(int line, int column) {
  return "line " + std::to_string(line) + ", column " + std::to_string(column);
}

namespace {

struct SyntaxError {
  std::string message;
  size_t pos;
};

// Length in bytes of the Python whitespace character at s[pos], or 0.
size_t SpaceAt(std::string_view s, size_t pos) {
  if (pos >= s.size()) return 0;
  const unsigned char c = static_cast<unsigned char>(s[pos]);
  if (c < 0x80) return IsPySpace(c) ? 1 : 0;
  const size_t len = (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
  if (pos + len > s.size()) return 0;
  const std::vector<uint32_t> cp = DecodeUtf8(s.substr(pos, len));
  return cp.size() == 1 && IsPySpace(cp[0]) ? len : 0;
}

size_t SkipSpaces(std::string_view s, size_t pos) {
  while (size_t n = SpaceAt(s, pos)) pos += n;
  return pos;
}

// Python's str.rstrip(): drops trailing whitespace (any Unicode space).
std::string_view RStrip(std::string_view s) {
  const std::vector<uint32_t> cps = DecodeUtf8(s);
  size_t keep_bytes = s.size();
  for (size_t i = cps.size(); i > 0 && IsPySpace(cps[i - 1]); --i) {
    std::string enc;
    AppendUtf8(cps[i - 1], enc);
    keep_bytes -= enc.size();
  }
  return s.substr(0, keep_bytes);
}

bool AllSpace(std::string_view s) {
  if (s.empty()) return false;
  size_t pos = 0;
  while (pos < s.size()) {
    const size_t n = SpaceAt(s, pos);
    if (n == 0) return false;
    pos += n;
  }
  return true;
}

bool IsNameStart(unsigned char c) { return std::isalpha(c) || c == '_' || c >= 0x80; }
bool IsNameChar(unsigned char c) { return std::isalnum(c) || c == '_' || c >= 0x80; }

class Lexer {
 public:
  explicit Lexer(std::string source) : s_(std::move(source)) {}

  std::vector<Token> Run() {
    size_t pos = 0;
    bool line_starting = true;
    while (pos < s_.size()) {
      const size_t tag = FindTag(pos);
      if (tag == std::string::npos) {
        Emit(TokenType::kData, s_.substr(pos), pos);
        break;
      }
      const char kind = s_[tag + 1];
      char sign = tag + 2 < s_.size() && (s_[tag + 2] == '-' || s_[tag + 2] == '+') ? s_[tag + 2] : 0;
      size_t raw_body = std::string::npos;
      if (kind == '%') raw_body = MatchRawBegin(tag);
      std::string_view text(s_.data() + pos, tag - pos);
      if (sign == '-') {
        text = RStrip(text);
      } else if (sign != '+' && kind != '{') {
        const size_t nl = text.rfind('\n');
        const size_t l_pos = nl == std::string_view::npos ? 0 : nl + 1;
        if ((l_pos > 0 || line_starting) && AllSpace(text.substr(l_pos))) text = text.substr(0, l_pos);
      }
      if (!text.empty()) Emit(TokenType::kData, std::string(text), pos);
      if (raw_body != std::string::npos) {
        pos = Raw(raw_body, line_starting);
        continue;
      }
      const size_t body = tag + 2 + (sign != 0 ? 1 : 0);
      if (kind == '#') {
        pos = Comment(tag, body, line_starting);
      } else {
        pos = Tag(tag, body, kind == '%', line_starting);
      }
    }
    Emit(TokenType::kEof, "", s_.size());
    return std::move(tokens_);
  }

 private:
  size_t FindTag(size_t from) const {
    for (size_t i = s_.find('{', from); i != std::string::npos; i = s_.find('{', i + 1)) {
      if (i + 1 < s_.size() && (s_[i + 1] == '{' || s_[i + 1] == '%' || s_[i + 1] == '#')) return i;
    }
    return std::string::npos;
  }

  // `{%[-+]? raw [-]%}`: the position after it, or npos.
  size_t MatchRawBegin(size_t tag) const {
    size_t p = tag + 2;
    if (p < s_.size() && (s_[p] == '-' || s_[p] == '+')) ++p;
    p = SkipSpaces(s_, p);
    if (s_.compare(p, 3, "raw") != 0) return std::string::npos;
    p = SkipSpaces(s_, p + 3);
    if (s_.compare(p, 3, "-%}") == 0) return SkipSpaces(s_, p + 3);
    if (s_.compare(p, 2, "%}") == 0) return p + 2;
    return std::string::npos;
  }

  size_t Raw(size_t body, bool& line_starting) {
    for (size_t i = s_.find("{%", body); i != std::string::npos; i = s_.find("{%", i + 1)) {
      size_t p = i + 2;
      char sign = 0;
      if (p < s_.size() && (s_[p] == '-' || s_[p] == '+')) sign = s_[p++];
      p = SkipSpaces(s_, p);
      if (s_.compare(p, 6, "endraw") != 0) continue;
      p = SkipSpaces(s_, p + 6);
      size_t end;
      if (s_.compare(p, 3, "+%}") == 0) {
        end = p + 3;
      } else if (s_.compare(p, 3, "-%}") == 0) {
        end = SkipSpaces(s_, p + 3);
      } else if (s_.compare(p, 2, "%}") == 0) {
        end = p + 2;
        if (end < s_.size() && s_[end] == '\n') ++end;
      } else {
        continue;
      }
      std::string_view text(s_.data() + body, i - body);
      // The raw state's line_starting comes from the `{% raw %}` match.
      const bool starting = body > 0 && s_[body - 1] == '\n';
      if (sign == '-') {
        text = RStrip(text);
      } else if (sign != '+') {
        const size_t nl = text.rfind('\n');
        const size_t l_pos = nl == std::string_view::npos ? 0 : nl + 1;
        if ((l_pos > 0 || starting) && AllSpace(text.substr(l_pos))) text = text.substr(0, l_pos);
      }
      if (!text.empty()) Emit(TokenType::kData, std::string(text), body);
      line_starting = s_[end - 1] == '\n';
      return end;
    }
    throw SyntaxError{"missing end of raw directive", body};
  }

  size_t Comment(size_t tag, size_t body, bool& line_starting) {
    const size_t close = s_.find("#}", body);
    if (close == std::string::npos) throw SyntaxError{"missing end of comment tag", tag};
    size_t end = close + 2;
    if (close > body && s_[close - 1] == '-') {
      end = SkipSpaces(s_, end);
    } else if (!(close > body && s_[close - 1] == '+')) {
      if (end < s_.size() && s_[end] == '\n') ++end;
    }
    line_starting = s_[end - 1] == '\n';
    return end;
  }

  // Expression tokens up to the closing delimiter (brackets balanced).
  size_t Tag(size_t tag, size_t body, bool block, bool& line_starting) {
    Emit(block ? TokenType::kBlockBegin : TokenType::kVariableBegin, block ? "{%" : "{{", tag);
    std::string brackets;
    size_t p = body;
    while (true) {
      if (p >= s_.size()) {
        throw SyntaxError{block ? "unexpected end of template; the block tag was never closed ('%}')"
                                : "unexpected end of template; the variable tag was never closed ('}}')",
                          tag};
      }
      if (brackets.empty()) {
        size_t end = std::string::npos;
        if (block) {
          if (s_.compare(p, 3, "+%}") == 0) {
            end = p + 3;
          } else if (s_.compare(p, 3, "-%}") == 0) {
            end = SkipSpaces(s_, p + 3);
          } else if (s_.compare(p, 2, "%}") == 0) {
            end = p + 2;
            if (end < s_.size() && s_[end] == '\n') ++end;
          }
        } else if (s_.compare(p, 3, "-}}") == 0) {
          end = SkipSpaces(s_, p + 3);
        } else if (s_.compare(p, 2, "}}") == 0) {
          end = p + 2;
        }
        if (end != std::string::npos) {
          Emit(block ? TokenType::kBlockEnd : TokenType::kVariableEnd, block ? "%}" : "}}", p);
          line_starting = s_[end - 1] == '\n';
          return end;
        }
      }
      if (size_t n = SpaceAt(s_, p)) {
        p += n;
        continue;
      }
      p = ExpressionToken(p, brackets);
    }
  }

  size_t ExpressionToken(size_t p, std::string& brackets) {
    const unsigned char c = static_cast<unsigned char>(s_[p]);
    if (std::isdigit(c)) return Number(p);
    if (IsNameStart(c)) {
      size_t e = p;
      while (e < s_.size() && IsNameChar(static_cast<unsigned char>(s_[e]))) ++e;
      Emit(TokenType::kName, s_.substr(p, e - p), p);
      return e;
    }
    if (c == '\'' || c == '"') return String(p);
    static const char* const kTwo[] = {"//", "**", "==", "!=", ">=", "<="};
    for (const char* op : kTwo) {
      if (s_.compare(p, 2, op) == 0) {
        Emit(TokenType::kOperator, op, p);
        return p + 2;
      }
    }
    if (std::string_view("+-/*%~[](){}><=.:|,;").find(static_cast<char>(c)) != std::string_view::npos) {
      if (c == '(' || c == '[' || c == '{') {
        brackets += static_cast<char>(c);
      } else if (c == ')' || c == ']' || c == '}') {
        const char open = c == ')' ? '(' : c == ']' ? '[' : '{';
        if (brackets.empty()) throw SyntaxError{std::string("unexpected '") + static_cast<char>(c) + "'", p};
        if (brackets.back() != open) {
          throw SyntaxError{std::string("unexpected '") + static_cast<char>(c) + "', expected '" +
                                (brackets.back() == '(' ? ")" : brackets.back() == '[' ? "]" : "}") + "'",
                            p};
        }
        brackets.pop_back();
      }
      Emit(TokenType::kOperator, std::string(1, static_cast<char>(c)), p);
      return p + 1;
    }
    std::string shown = c < 0x80 ? std::string(1, static_cast<char>(c)) : "non-ASCII character";
    throw SyntaxError{"unexpected char '" + shown + "'", p};
  }

  size_t Digits(size_t p, bool (*ok)(unsigned char)) const {
    // (d+_)*d+ : digits with single underscores between them
    size_t e = p;
    while (e < s_.size()) {
      if (ok(static_cast<unsigned char>(s_[e]))) {
        ++e;
      } else if (s_[e] == '_' && e > p && e + 1 < s_.size() && ok(static_cast<unsigned char>(s_[e + 1]))) {
        ++e;
      } else {
        break;
      }
    }
    return e;
  }

  static bool IsDec(unsigned char c) { return std::isdigit(c) != 0; }

  size_t Number(size_t p) {
    auto strip = [](std::string t) {
      std::string o;
      for (char ch : t) {
        if (ch != '_') o += ch;
      }
      return o;
    };
    // float: digits ((. digits)? e[+-]? digits | . digits), not preceded by a dot
    const bool after_dot = p > 0 && s_[p - 1] == '.';
    size_t e = Digits(p, IsDec);
    if (!after_dot) {
      size_t f = e;
      bool is_float = false;
      if (f < s_.size() && s_[f] == '.' && f + 1 < s_.size() && IsDec(static_cast<unsigned char>(s_[f + 1]))) {
        f = Digits(f + 1, IsDec);
        is_float = true;
      }
      if (f < s_.size() && (s_[f] == 'e' || s_[f] == 'E')) {
        size_t g = f + 1;
        if (g < s_.size() && (s_[g] == '+' || s_[g] == '-')) ++g;
        if (g < s_.size() && IsDec(static_cast<unsigned char>(s_[g]))) {
          f = Digits(g, IsDec);
          is_float = true;
        }
      }
      if (is_float) {
        Token& t = Emit(TokenType::kFloat, strip(s_.substr(p, f - p)), p);
        t.float_value = std::strtod(t.value.c_str(), nullptr);
        return f;
      }
    }
    // integer: 0b / 0o / 0x prefixes, or decimal
    if (s_[p] == '0' && p + 1 < s_.size() && std::strchr("bBoOxX", s_[p + 1]) != nullptr) {
      const char base_char = static_cast<char>(std::tolower(static_cast<unsigned char>(s_[p + 1])));
      const int base = base_char == 'b' ? 2 : base_char == 'o' ? 8 : 16;
      size_t q = p + 2;
      std::string digits;
      while (q < s_.size()) {
        const char ch = s_[q];
        if (ch == '_' && q + 1 < s_.size()) {
          ++q;
          continue;
        }
        const int d = std::isdigit(static_cast<unsigned char>(ch)) ? ch - '0'
                      : std::isxdigit(static_cast<unsigned char>(ch)) ? std::tolower(static_cast<unsigned char>(ch)) - 'a' + 10
                                                                      : 99;
        if (d >= base) break;
        digits += ch;
        ++q;
      }
      if (!digits.empty()) {
        Token& t = Emit(TokenType::kInteger, s_.substr(p, q - p), p);
        t.int_value = static_cast<int64_t>(std::strtoull(digits.c_str(), nullptr, base));
        return q;
      }
    }
    if (s_[p] == '0') {  // 0(_?0)*
      size_t q = p + 1;
      while (q < s_.size() && (s_[q] == '0' || (s_[q] == '_' && q + 1 < s_.size() && s_[q + 1] == '0'))) ++q;
      Emit(TokenType::kInteger, "0", p).int_value = 0;
      return q;
    }
    const std::string text = strip(s_.substr(p, e - p));
    errno = 0;
    const unsigned long long v = std::strtoull(text.c_str(), nullptr, 10);
    if (errno == ERANGE || v > static_cast<unsigned long long>(INT64_MAX)) {
      throw SyntaxError{"integer literal too large: " + text, p};
    }
    Emit(TokenType::kInteger, text, p).int_value = static_cast<int64_t>(v);
    return e;
  }

  size_t String(size_t p) {
    const char quote = s_[p];
    size_t q = p + 1;
    while (q < s_.size() && s_[q] != quote) q += s_[q] == '\\' ? 2 : 1;
    if (q >= s_.size()) throw SyntaxError{"unterminated string literal", p};
    Emit(TokenType::kString, Unescape(std::string_view(s_).substr(p + 1, q - p - 1), p), p);
    return q + 1;
  }

  // Python's "unicode-escape" decoding, which is what Jinja applies to string literals.
  std::string Unescape(std::string_view in, size_t at) const {
    std::string out;
    for (size_t i = 0; i < in.size(); ++i) {
      if (in[i] != '\\' || i + 1 >= in.size()) {
        out += in[i];
        continue;
      }
      const char e = in[++i];
      auto hex = [&](size_t n) -> uint32_t {
        uint32_t v = 0;
        for (size_t k = 1; k <= n; ++k) {
          if (i + k >= in.size() || !std::isxdigit(static_cast<unsigned char>(in[i + k]))) {
            throw SyntaxError{"truncated \\" + std::string(1, e) + " escape in a string", at};
          }
          const char ch = in[i + k];
          v = v * 16 + static_cast<uint32_t>(std::isdigit(static_cast<unsigned char>(ch)) ? ch - '0'
                                                                                         : std::tolower(ch) - 'a' + 10);
        }
        i += n;
        return v;
      };
      switch (e) {
        case '\n': break;
        case '\\': out += '\\'; break;
        case '\'': out += '\''; break;
        case '"': out += '"'; break;
        case 'a': out += '\a'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'v': out += '\v'; break;
        case 'x': AppendUtf8(hex(2), out); break;
        case 'u': AppendUtf8(hex(4), out); break;
        case 'U': {
          const uint32_t cp = hex(8);
          if (cp > 0x10FFFF) throw SyntaxError{"\\U escape out of range in a string", at};
          AppendUtf8(cp, out);
          break;
        }
        default:
          if (e >= '0' && e <= '7') {
            uint32_t v = static_cast<uint32_t>(e - '0');
            for (int k = 0; k < 2 && i + 1 < in.size() && in[i + 1] >= '0' && in[i + 1] <= '7'; ++k) {
              v = v * 8 + static_cast<uint32_t>(in[++i] - '0');
            }
            AppendUtf8(v, out);
          } else {
            out += '\\';
            out += e;
          }
      }
    }
    return out;
  }

  Token& Emit(TokenType type, std::string value, size_t pos) {
    Token& t = tokens_.emplace_back();
    t.type = type;
    t.value = std::move(value);
    Locate(pos, t.line, t.column);
    return t;
  }

 public:
  void Locate(size_t pos, int& line, int& column) {
    // Tokens come in order: advance a cursor instead of rescanning from the start.
    if (pos < cursor_) {
      cursor_ = 0;
      cursor_line_ = 1;
      line_start_ = 0;
    }
    for (; cursor_ < pos && cursor_ < s_.size(); ++cursor_) {
      if (s_[cursor_] == '\n') {
        ++cursor_line_;
        line_start_ = cursor_ + 1;
      }
    }
    line = cursor_line_;
    column = static_cast<int>(Utf8Length(std::string_view(s_).substr(line_start_, pos - line_start_))) + 1;
  }

 private:
  std::string s_;
  std::vector<Token> tokens_;
  size_t cursor_ = 0;
  int cursor_line_ = 1;
  size_t line_start_ = 0;
};

std::string Normalize(std::string_view source) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out += source[i];
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();  // keep_trailing_newline is off
  return out;
}

}  // namespace

Result<std::vector<Token>> Tokenize(std::string_view source) {
  Lexer lexer(Normalize(source));
  try {
    return lexer.Run();
  } catch (const SyntaxError& e) {
    int line = 1, column = 1;
    lexer.Locate(e.pos, line, column);
    return InvalidArgument("TemplateSyntaxError: " + e.message + " (" + Where(line, column) + ")");
  }
}

}  // namespace ferry::jinja
