#include "structured/ebnf.h"

#include <cctype>
#include <string>
#include <unordered_map>
#include <vector>

#include "structured/regex.h"

namespace ferry::structured {
namespace {

bool IsNameStart(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
bool IsNameChar(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-'; }

class EbnfParser {
 public:
  explicit EbnfParser(std::string_view text) : t_(text) {}

  Result<Grammar> Parse() {
    int32_t first = -1;
    SkipSpace();
    while (!AtEnd()) {
      const size_t at = i_;
      std::string name = Name();
      SkipSpace();
      if (name.empty() || t_.substr(i_, 3) != "::=") {
        i_ = at;
        return Error("expected a rule definition 'name ::= ...'");
      }
      i_ += 3;
      const int32_t rule = RuleFor(name);
      if (defined_.count(name)) return Error("rule '" + name + "' is defined twice");
      defined_[name] = true;
      if (first < 0) first = rule;
      FERRY_ASSIGN_OR_RETURN(std::vector<Sequence> alts, Alternation(/*nested=*/false));
      for (Sequence& s : alts) b_.AddAlternative(rule, std::move(s));
      SkipSpace();
    }
    if (first < 0) return InvalidArgument("grammar: no rules");
    auto root = rules_.find("root");
    const int32_t root_rule = root != rules_.end() ? root->second : first;
    return b_.Build(root_rule);
  }

 private:
  Status Error(const std::string& what) const {
    int line = 1;
    for (size_t k = 0; k < i_ && k < t_.size(); ++k) line += t_[k] == '\n';
    return InvalidArgument("grammar line " + std::to_string(line) + ": " + what);
  }
  bool AtEnd() const { return i_ >= t_.size(); }

  void SkipSpace() {
    while (!AtEnd()) {
      if (std::isspace(static_cast<unsigned char>(t_[i_]))) {
        ++i_;
      } else if (t_[i_] == '#') {
        while (!AtEnd() && t_[i_] != '\n') ++i_;
      } else {
        break;
      }
    }
  }

  std::string Name() {
    const size_t start = i_;
    if (AtEnd() || !IsNameStart(t_[i_])) return {};
    while (!AtEnd() && IsNameChar(t_[i_])) ++i_;
    return std::string(t_.substr(start, i_ - start));
  }

  int32_t RuleFor(const std::string& name) {
    auto [it, inserted] = rules_.emplace(name, 0);
    if (inserted) it->second = b_.AddRule(name);
    return it->second;
  }

  // Whether the next tokens are "name ::=" (the start of the next rule).
  bool AtDefinition() {
    const size_t save = i_;
    const std::string n = Name();
    SkipSpace();
    const bool yes = !n.empty() && t_.substr(i_, 3) == "::=";
    i_ = save;
    return yes;
  }

  Result<std::vector<Sequence>> Alternation(bool nested) {
    std::vector<Sequence> alts;
    while (true) {
      FERRY_ASSIGN_OR_RETURN(Sequence s, Concatenation(nested));
      alts.push_back(std::move(s));
      SkipSpace();
      if (!AtEnd() && t_[i_] == '|') {
        ++i_;
        continue;
      }
      return alts;
    }
  }

  Result<Sequence> Concatenation(bool nested) {
    Sequence seq;
    while (true) {
      SkipSpace();
      if (AtEnd() || t_[i_] == '|' || t_[i_] == ')') break;
      if (!nested && AtDefinition()) break;
      FERRY_ASSIGN_OR_RETURN(Sequence item, Primary());
      FERRY_ASSIGN_OR_RETURN(Sequence q, Quantified(std::move(item)));
      seq.insert(seq.end(), q.begin(), q.end());
    }
    return seq;
  }

  Result<Sequence> Quantified(Sequence item) {
    if (AtEnd()) return item;
    const char c = t_[i_];
    int64_t min = 0, max = -1;
    if (c == '*') {
      ++i_;
      return Sequence{GrammarBuilder::Ref(b_.Star("star", std::move(item)))};
    }
    if (c == '+') {
      ++i_;
      return Sequence{GrammarBuilder::Ref(b_.Plus("plus", std::move(item)))};
    }
    if (c == '?') {
      ++i_;
      return Sequence{GrammarBuilder::Ref(b_.Optional("opt", std::move(item)))};
    }
    if (c != '{') return item;
    ++i_;
    auto number = [&](int64_t& v) {
      SkipSpace();
      const size_t start = i_;
      v = 0;
      while (!AtEnd() && std::isdigit(static_cast<unsigned char>(t_[i_])) && v <= GrammarBuilder::kMaxRepeat) {
        v = v * 10 + (t_[i_++] - '0');
      }
      SkipSpace();
      return i_ > start;
    };
    if (!number(min)) return Error("expected a number after '{'");
    if (!AtEnd() && t_[i_] == ',') {
      ++i_;
      if (!number(max)) max = -1;
    } else {
      max = min;
    }
    if (AtEnd() || t_[i_] != '}') return Error("expected '}'");
    ++i_;
    auto r = b_.Repeat("repeat", item, min, max);
    if (!r.ok()) return Error(r.status().message());
    return Sequence{GrammarBuilder::Ref(r.value())};
  }

  Result<Sequence> Primary() {
    const char c = t_[i_];
    if (c == '"' || c == '\'') return String(c);
    if (c == '(') {
      if (++depth_ > kMaxDepth) return Error("groups nested deeper than " + std::to_string(kMaxDepth));
      struct Leave {
        int& d;
        ~Leave() { --d; }
      } leave{depth_};
      ++i_;
      FERRY_ASSIGN_OR_RETURN(std::vector<Sequence> alts, Alternation(/*nested=*/true));
      SkipSpace();
      if (AtEnd() || t_[i_] != ')') return Error("missing ')'");
      ++i_;
      if (alts.size() == 1) return std::move(alts[0]);
      return Sequence{GrammarBuilder::Ref(b_.Choice("group", std::move(alts)))};
    }
    if (c == '[' || c == '.') {
      size_t end = i_ + 1;
      if (c == '[') {
        // The class's extent: up to the first unescaped ']' that is not its first member.
        if (end < t_.size() && t_[end] == '^') ++end;
        if (end < t_.size() && t_[end] == ']') ++end;
        while (end < t_.size() && t_[end] != ']') end += t_[end] == '\\' ? 2 : 1;
        if (end >= t_.size()) return Error("missing ']'");
        ++end;
      }
      auto r = AddRegex(b_, t_.substr(i_, end - i_), RegexOptions{}, "class");
      if (!r.ok()) return Error(r.status().message());
      i_ = end;
      return Sequence{GrammarBuilder::Ref(r.value())};
    }
    if (IsNameStart(c)) return Sequence{GrammarBuilder::Ref(RuleFor(Name()))};
    return Error(std::string("unexpected '") + c + "'");
  }

  Result<Sequence> String(char quote) {
    ++i_;
    std::string bytes;
    while (true) {
      if (AtEnd()) return Error("unterminated string");
      const char c = t_[i_++];
      if (c == quote) break;
      if (c != '\\') {
        bytes += c;
        continue;
      }
      if (AtEnd()) return Error("unterminated string");
      const char e = t_[i_++];
      switch (e) {
        case 'n': bytes += '\n'; break;
        case 't': bytes += '\t'; break;
        case 'r': bytes += '\r'; break;
        case '\\': bytes += '\\'; break;
        case '"': bytes += '"'; break;
        case '\'': bytes += '\''; break;
        case 'x': case 'u': {
          const size_t digits = e == 'x' ? 2 : 4;
          if (i_ + digits > t_.size()) return Error("short escape");
          uint32_t cp = 0;
          for (size_t k = 0; k < digits; ++k) {
            const char h = t_[i_ + k];
            const int v = h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10 : h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
            if (v < 0) return Error("bad hex digit");
            cp = cp * 16 + static_cast<uint32_t>(v);
          }
          i_ += digits;
          if (e == 'x' || cp < 0x80) {
            bytes += static_cast<char>(cp);
          } else if (cp < 0x800) {
            bytes += static_cast<char>(0xC0 | (cp >> 6));
            bytes += static_cast<char>(0x80 | (cp & 0x3F));
          } else {
            bytes += static_cast<char>(0xE0 | (cp >> 12));
            bytes += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
            bytes += static_cast<char>(0x80 | (cp & 0x3F));
          }
          break;
        }
        default: return Error(std::string("unknown escape \\") + e);
      }
    }
    return b_.Literal(bytes);
  }

  static constexpr int kMaxDepth = 100;
  std::string_view t_;
  size_t i_ = 0;
  int depth_ = 0;
  GrammarBuilder b_;
  std::unordered_map<std::string, int32_t> rules_;
  std::unordered_map<std::string, bool> defined_;
};

}  // namespace

Result<Grammar> ParseEbnf(std::string_view text) { return EbnfParser(text).Parse(); }

}  // namespace ferry::structured
