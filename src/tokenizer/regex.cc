#include "tokenizer/regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <string>

#include "tokenizer/utf8.h"

namespace ferry::tokenizer {

struct Regex::Code {
  pcre2_code* code = nullptr;
  ~Code() { pcre2_code_free(code); }
};

namespace {

// Oniguruma's \s is the White_Space property, which includes U+0085; PCRE2's UCP \s does not.
// Its \w also covers marks and letter numbers, which PCRE2 10.42 leaves out.
constexpr std::string_view kSpaceClass = "\\s\\x{85}";
constexpr std::string_view kWordClass = "\\p{L}\\p{M}\\p{Nd}\\p{Nl}\\p{Pc}\\x{200C}\\x{200D}";

std::string PcreErrorMessage(int code) {
  PCRE2_UCHAR buffer[256];
  const int n = pcre2_get_error_message(code, buffer, sizeof(buffer));
  if (n < 0) return "error " + std::to_string(code);
  return std::string(reinterpret_cast<const char*>(buffer), static_cast<size_t>(n));
}

// Per-thread match scratch: JIT stack and match data are not shareable between threads.
class MatchScratch {
 public:
  MatchScratch() {
    match_data_ = pcre2_match_data_create(1, nullptr);
    context_ = pcre2_match_context_create(nullptr);
    jit_stack_ = pcre2_jit_stack_create(32 * 1024, 4 * 1024 * 1024, nullptr);
    if (context_ != nullptr && jit_stack_ != nullptr) {
      pcre2_jit_stack_assign(context_, nullptr, jit_stack_);
    }
  }
  ~MatchScratch() {
    pcre2_match_data_free(match_data_);
    pcre2_match_context_free(context_);
    pcre2_jit_stack_free(jit_stack_);
  }
  MatchScratch(const MatchScratch&) = delete;
  MatchScratch& operator=(const MatchScratch&) = delete;

  pcre2_match_data* match_data() const { return match_data_; }
  pcre2_match_context* context() const { return context_; }

 private:
  pcre2_match_data* match_data_ = nullptr;
  pcre2_match_context* context_ = nullptr;
  pcre2_jit_stack* jit_stack_ = nullptr;
};

MatchScratch& ThreadScratch() {
  thread_local MatchScratch scratch;
  return scratch;
}

}  // namespace

std::string TranslateOnigurumaPattern(std::string_view pattern) {
  std::string out;
  out.reserve(pattern.size() + 16);
  int class_depth = 0;
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      const char e = pattern[i + 1];
      ++i;
      const bool in_class = class_depth > 0;
      switch (e) {
        case 's':
        case 'w':
        case 'S':
        case 'W': {
          const bool negated = e == 'S' || e == 'W';
          const std::string_view members = (e == 's' || e == 'S') ? kSpaceClass : kWordClass;
          if (in_class && negated) {
            // A negated shorthand inside a class has no simple rewrite; keep PCRE2's.
            out.push_back('\\');
            out.push_back(e);
          } else if (in_class) {
            out.append(members);
          } else {
            out.append(negated ? "[^" : "[");
            out.append(members);
            out.push_back(']');
          }
          break;
        }
        default:
          out.push_back('\\');
          out.push_back(e);
          break;
      }
      continue;
    }
    if (c == '[') {
      // A '[' inside a class opens a nested class in Oniguruma, unless it starts a POSIX
      // bracket like [:alpha:], which PCRE2 reads the same way.
      if (class_depth > 0 && i + 1 < pattern.size() && pattern[i + 1] == ':') {
        const size_t close = pattern.find(":]", i + 2);
        if (close != std::string_view::npos) {
          out.append(pattern.substr(i, close + 2 - i));
          i = close + 1;
          continue;
        }
      }
      ++class_depth;
      out.push_back(c);
      // A ']' right after '[' or '[^' is a literal member, not the end of the class.
      if (i + 1 < pattern.size() && pattern[i + 1] == '^') {
        out.push_back('^');
        ++i;
      }
      if (i + 1 < pattern.size() && pattern[i + 1] == ']') {
        out += "\\]";
        ++i;
      }
      continue;
    }
    if (c == ']' && class_depth > 0) --class_depth;
    out.push_back(c);
  }
  return out;
}

Result<Regex> Regex::Compile(std::string_view pattern) {
  const std::string translated = TranslateOnigurumaPattern(pattern);
  int error = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()),
                                   translated.size(), PCRE2_UTF | PCRE2_UCP, &error, &offset,
                                   nullptr);
  if (code == nullptr) {
    return InvalidArgument("cannot compile regex '" + std::string(pattern) + "': " +
                           PcreErrorMessage(error) + " at offset " + std::to_string(offset));
  }
  auto holder = std::make_shared<Code>();
  holder->code = code;
  // Without JIT support PCRE2 falls back to its interpreter, which is slower but correct.
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
  return Regex(std::move(holder), std::string(pattern));
}

Result<Regex> Regex::Literal(std::string_view literal) {
  std::string quoted;
  quoted.reserve(literal.size() * 2);
  for (char c : literal) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x80 && !((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'))) {
      // Hex-escape every ASCII non-alphanumeric so no byte is read as syntax.
      static constexpr char kHex[] = "0123456789ABCDEF";
      quoted += "\\x{";
      quoted.push_back(kHex[u >> 4]);
      quoted.push_back(kHex[u & 0xF]);
      quoted.push_back('}');
    } else {
      quoted.push_back(c);
    }
  }
  return Compile(quoted);
}

Status Regex::FindAll(std::string_view text, std::vector<Match>* matches) const {
  MatchScratch& scratch = ThreadScratch();
  if (scratch.match_data() == nullptr) return ResourceExhausted("cannot allocate regex match data");
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t start = 0;
  while (start <= text.size()) {
    const int rc = pcre2_match(code_->code, subject, text.size(), start, PCRE2_NO_UTF_CHECK,
                               scratch.match_data(), scratch.context());
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      return Internal("regex '" + pattern_ + "' failed: " + PcreErrorMessage(rc));
    }
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(scratch.match_data());
    const size_t begin = ovector[0];
    const size_t end = ovector[1];
    if (end > begin) {
      matches->push_back({begin, end});
      start = end;
    } else {
      // Skip an empty match by one whole character so the next search stays on a boundary.
      if (begin >= text.size()) break;
      size_t next = begin;
      NextCodePoint(text, &next);
      start = next;
    }
  }
  return Status::Ok();
}

Result<Regex> MakePattern(const Json& pattern) {
  if (auto literal = JsonOptString(pattern, "String")) return Regex::Literal(*literal);
  if (auto regex = JsonOptString(pattern, "Regex")) return Regex::Compile(*regex);
  return InvalidArgument("pattern must be {\"String\": ...} or {\"Regex\": ...}");
}

}  // namespace ferry::tokenizer
