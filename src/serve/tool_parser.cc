#include "serve/tool_parser.h"

#include <cctype>
#include <optional>
#include <random>

namespace ferry::serve {

namespace {

bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

size_t SkipSpace(std::string_view s, size_t p) {
  while (p < s.size() && IsSpace(s[p])) ++p;
  return p;
}

// The end of the JSON string starting at s[p] == '"' (after its closing quote), or npos
// when it does not end within `s`. Appends the decoded characters to `out` if given.
size_t ScanString(std::string_view s, size_t p, std::string* out) {
  for (size_t i = p + 1; i < s.size(); ++i) {
    const char c = s[i];
    if (c == '"') return i + 1;
    if (c != '\\') {
      if (out) *out += c;
      continue;
    }
    if (++i >= s.size()) return std::string::npos;
    const char e = s[i];
    if (e == 'u') {
      if (i + 4 >= s.size()) return std::string::npos;
      const uint32_t cp = static_cast<uint32_t>(std::strtoul(std::string(s.substr(i + 1, 4)).c_str(), nullptr, 16));
      i += 4;
      if (out) {
        if (cp < 0x80) {
          *out += static_cast<char>(cp);
        } else if (cp < 0x800) {
          *out += static_cast<char>(0xC0 | (cp >> 6));
          *out += static_cast<char>(0x80 | (cp & 0x3F));
        } else {
          *out += static_cast<char>(0xE0 | (cp >> 12));
          *out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
          *out += static_cast<char>(0x80 | (cp & 0x3F));
        }
      }
      continue;
    }
    if (out) *out += e == 'n' ? '\n' : e == 't' ? '\t' : e == 'r' ? '\r' : e == 'b' ? '\b' : e == 'f' ? '\f' : e;
  }
  return std::string::npos;
}

// The end of the JSON value starting at s[p], or npos when it does not end within `s`.
// Primitives end at the next ',', '}', ']' or whitespace.
size_t SkipValue(std::string_view s, size_t p) {
  if (p >= s.size()) return std::string::npos;
  if (s[p] == '"') return ScanString(s, p, nullptr);
  if (s[p] == '{' || s[p] == '[') {
    int depth = 0;
    for (size_t i = p; i < s.size(); ++i) {
      const char c = s[i];
      if (c == '"') {
        i = ScanString(s, i, nullptr);
        if (i == std::string::npos) return std::string::npos;
        --i;
      } else if (c == '{' || c == '[') {
        ++depth;
      } else if ((c == '}' || c == ']') && --depth == 0) {
        return i + 1;
      }
    }
    return std::string::npos;
  }
  for (size_t i = p; i < s.size(); ++i) {
    if (s[i] == ',' || s[i] == '}' || s[i] == ']' || IsSpace(s[i])) return i;
  }
  return std::string::npos;
}

// What is known of one call object {"name": ..., "arguments" | "parameters": ...} from a
// prefix of its text.
struct CallScan {
  bool complete = false;  // the closing brace was seen
  bool malformed = false;
  size_t end = 0;         // after the closing brace
  std::optional<std::string> name;
  bool has_args = false;
  size_t args_begin = 0, args_end = 0;
  bool args_complete = false;
  bool args_is_string = false;  // "arguments": "{...}" (a JSON-encoded string)
};

CallScan ScanCall(std::string_view s) {
  CallScan r;
  size_t p = SkipSpace(s, 0);
  if (p >= s.size()) return r;
  if (s[p] != '{') {
    r.malformed = true;
    return r;
  }
  p = SkipSpace(s, p + 1);
  while (p < s.size()) {
    if (s[p] == '}') {
      r.complete = true;
      r.end = p + 1;
      return r;
    }
    if (s[p] == ',') {
      p = SkipSpace(s, p + 1);
      continue;
    }
    if (s[p] != '"') {
      r.malformed = true;
      return r;
    }
    std::string key;
    const size_t key_end = ScanString(s, p, &key);
    if (key_end == std::string::npos) return r;
    p = SkipSpace(s, key_end);
    if (p >= s.size()) return r;
    if (s[p] != ':') {
      r.malformed = true;
      return r;
    }
    p = SkipSpace(s, p + 1);
    if (p >= s.size()) return r;
    const bool is_args = key == "arguments" || key == "parameters";
    if (is_args && !r.has_args) {
      r.has_args = true;
      r.args_begin = p;
      r.args_is_string = s[p] == '"';
    }
    const size_t value_end = SkipValue(s, p);
    if (value_end == std::string::npos) {
      if (is_args && r.args_begin == p) r.args_end = s.size();
      return r;
    }
    if (key == "name" && s[p] == '"' && !r.name) {
      std::string name;
      ScanString(s, p, &name);
      r.name = std::move(name);
    }
    if (is_args && r.args_begin == p) {
      r.args_end = value_end;
      r.args_complete = true;
    }
    p = SkipSpace(s, value_end);
  }
  return r;
}

// The longest suffix of `s` that is a proper prefix of `marker`: text that may yet become it.
size_t PartialMarker(std::string_view s, std::string_view marker) {
  for (size_t n = std::min(s.size(), marker.size() - 1); n > 0; --n) {
    if (s.substr(s.size() - n) == marker.substr(0, n)) return n;
  }
  return 0;
}

std::string NewCallId(bool short_alnum) {
  thread_local std::mt19937_64 rng(std::random_device{}());
  static const char kAlnum[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  std::string id = short_alnum ? "" : "call_";
  for (int i = 0; i < (short_alnum ? 9 : 24); ++i) id += kAlnum[rng() % 62];
  return id;
}

// Shared by the formats: content with trailing whitespace held back (whitespace around calls
// is not content), and one call object being parsed at a time.
class StreamBase : public ToolCallStream {
 protected:
  explicit StreamBase(bool short_ids) : short_ids_(short_ids) {}

  void EmitContent(std::string_view text, ToolParseDelta& d) {
    held_space_ += text;
    size_t last = held_space_.size();
    while (last > 0 && IsSpace(held_space_[last - 1])) --last;
    if (last == 0) return;
    d.content += held_space_.substr(0, last);
    held_space_.erase(0, last);
  }
  // At the end: trailing whitespace is content only when there were no calls.
  void FlushContent(ToolParseDelta& d) {
    if (calls_.empty()) d.content += held_space_;
    held_space_.clear();
  }

  // Re-reads the call text and releases its name, then its new argument characters.
  void Progress(ToolParseDelta& d) {
    const CallScan scan = ScanCall(call_text_);
    if (scan.name && !announced_) {
      announced_ = true;
      call_id_ = NewCallId(short_ids_);
      ToolParseDelta::Call c;
      c.index = static_cast<int>(calls_.size());
      c.first = true;
      c.id = call_id_;
      c.name = *scan.name;
      d.calls.push_back(std::move(c));
    }
    if (!announced_ || !scan.has_args || scan.args_is_string) return;
    const size_t upto = scan.args_complete ? scan.args_end : call_text_.size();
    if (upto > scan.args_begin + args_sent_) {
      const std::string more = call_text_.substr(scan.args_begin + args_sent_, upto - scan.args_begin - args_sent_);
      args_sent_ += more.size();
      AppendArgs(more, d);
    }
  }

  // The call text is complete (or cut off): records the call, or gives the text back as
  // content when it has no name. Returns false when it was not a call.
  bool Close(ToolParseDelta& d, std::string_view prefix_marker) {
    Progress(d);
    const CallScan scan = ScanCall(call_text_);
    if (!announced_) {
      EmitContent(std::string(prefix_marker) + call_text_, d);
      call_text_.clear();
      return false;
    }
    ToolCall call;
    call.id = call_id_;
    call.name = scan.name.value_or("");
    if (scan.has_args && scan.args_is_string && scan.args_complete) {
      ScanString(call_text_, scan.args_begin, &call.arguments);
      AppendArgs(call.arguments, d);
    } else if (scan.has_args) {
      call.arguments = call_text_.substr(scan.args_begin, args_sent_);
    }
    if (!scan.has_args) {
      call.arguments = "{}";
      AppendArgs("{}", d);
    }
    calls_.push_back(std::move(call));
    call_text_.clear();
    announced_ = false;
    args_sent_ = 0;
    return true;
  }

  void AppendArgs(const std::string& more, ToolParseDelta& d) {
    if (more.empty()) return;
    const int index = static_cast<int>(calls_.size());
    if (!d.calls.empty() && d.calls.back().index == index) {
      d.calls.back().arguments += more;
      return;
    }
    ToolParseDelta::Call c;
    c.index = index;
    c.arguments = more;
    d.calls.push_back(std::move(c));
  }

  std::string buffer_;     // text not yet decided
  std::string call_text_;  // the call object being read
  std::string held_space_;

 private:
  const bool short_ids_;
  bool announced_ = false;
  std::string call_id_;
  size_t args_sent_ = 0;
};

// Everything is content.
class PassThrough : public ToolCallStream {
 public:
  ToolParseDelta Feed(std::string_view text) override { return ToolParseDelta{std::string(text), {}}; }
  ToolParseDelta Finish() override { return {}; }
};

// <tool_call>{...}</tool_call>, repeated, with content around.
class HermesStream : public StreamBase {
 public:
  HermesStream() : StreamBase(false) {}
  static constexpr std::string_view kOpen = "<tool_call>";
  static constexpr std::string_view kClose = "</tool_call>";

  ToolParseDelta Feed(std::string_view text) override {
    ToolParseDelta d;
    buffer_ += text;
    while (true) {
      if (!in_call_) {
        const size_t at = buffer_.find(kOpen);
        if (at == std::string::npos) {
          const size_t keep = PartialMarker(buffer_, kOpen);
          EmitContent(std::string_view(buffer_).substr(0, buffer_.size() - keep), d);
          buffer_.erase(0, buffer_.size() - keep);
          return d;
        }
        EmitContent(std::string_view(buffer_).substr(0, at), d);
        buffer_.erase(0, at + kOpen.size());
        in_call_ = true;
      } else {
        const size_t at = buffer_.find(kClose);
        if (at == std::string::npos) {
          const size_t keep = PartialMarker(buffer_, kClose);
          call_text_ += buffer_.substr(0, buffer_.size() - keep);
          buffer_.erase(0, buffer_.size() - keep);
          Progress(d);
          return d;
        }
        call_text_ += buffer_.substr(0, at);
        buffer_.erase(0, at + kClose.size());
        if (!Close(d, kOpen)) EmitContent(kClose, d);
        in_call_ = false;
      }
    }
  }

  ToolParseDelta Finish() override {
    ToolParseDelta d;
    if (in_call_) {
      call_text_ += buffer_;
      Close(d, kOpen);
    } else {
      EmitContent(buffer_, d);
    }
    buffer_.clear();
    FlushContent(d);
    return d;
  }

 private:
  bool in_call_ = false;
};

// A list of call objects after a marker: Mistral's [TOOL_CALLS][{...}, {...}] and Llama 3's
// {...}; {...} (after <|python_tag|>, or as the whole output).
class ListStream : public StreamBase {
 public:
  // `marker`: what starts the calls anywhere in the output (Mistral); `leading`: calls only
  // when the output starts with them (Llama 3: "<|python_tag|>" or "{").
  ListStream(std::string_view marker, bool leading, char separator)
      : StreamBase(!leading), marker_(marker), leading_(leading), separator_(separator) {}

  ToolParseDelta Feed(std::string_view text) override {
    ToolParseDelta d;
    buffer_ += text;
    Run(d, false);
    return d;
  }

  ToolParseDelta Finish() override {
    ToolParseDelta d;
    Run(d, true);
    if (state_ == State::kObject) {
      call_text_ += buffer_;
      buffer_.clear();
      Close(d, "");
    }
    EmitContent(buffer_, d);
    buffer_.clear();
    FlushContent(d);
    return d;
  }

 private:
  enum class State { kStart, kContent, kList, kObject, kRest };

  void Run(ToolParseDelta& d, bool final) {
    while (true) {
      switch (state_) {
        case State::kStart: {  // Llama 3: only an output that starts with a call has calls
          const size_t p = SkipSpace(buffer_, 0);
          if (p >= buffer_.size()) {
            if (final) state_ = State::kContent;
            if (!final) return;
            break;
          }
          if (buffer_.compare(p, marker_.size(), marker_) == 0) {
            buffer_.erase(0, p + marker_.size());
            state_ = State::kList;
          } else if (buffer_[p] == '{') {
            buffer_.erase(0, p);
            state_ = State::kList;
          } else if (!final && std::string_view(marker_).substr(0, buffer_.size() - p) == std::string_view(buffer_).substr(p)) {
            return;  // may still be the marker
          } else {
            state_ = State::kRest;
          }
          break;
        }
        case State::kContent: {  // Mistral: content until the marker
          const size_t at = buffer_.find(marker_);
          if (at == std::string::npos) {
            const size_t keep = final ? 0 : PartialMarker(buffer_, marker_);
            EmitContent(std::string_view(buffer_).substr(0, buffer_.size() - keep), d);
            buffer_.erase(0, buffer_.size() - keep);
            return;
          }
          EmitContent(std::string_view(buffer_).substr(0, at), d);
          buffer_.erase(0, at + marker_.size());
          state_ = State::kList;
          break;
        }
        case State::kList: {  // between calls: whitespace, separators, brackets
          size_t p = 0;
          while (p < buffer_.size() && (IsSpace(buffer_[p]) || buffer_[p] == separator_ || buffer_[p] == '[' ||
                                        buffer_[p] == ']' || buffer_[p] == ',')) {
            ++p;
          }
          buffer_.erase(0, p);
          if (buffer_.empty()) return;
          if (buffer_[0] == '{') {
            state_ = State::kObject;
          } else {
            state_ = State::kRest;
          }
          break;
        }
        case State::kObject: {
          call_text_ += buffer_;
          buffer_.clear();
          const CallScan scan = ScanCall(call_text_);
          if (!scan.complete && !scan.malformed) {
            Progress(d);
            return;
          }
          if (scan.malformed) {
            EmitContent(call_text_, d);
            call_text_.clear();
            state_ = State::kRest;
            break;
          }
          buffer_ = call_text_.substr(scan.end);
          call_text_.resize(scan.end);
          state_ = Close(d, "") ? State::kList : State::kRest;
          break;
        }
        case State::kRest:  // text after the calls (or no calls at all): content
          EmitContent(buffer_, d);
          buffer_.clear();
          return;
      }
    }
  }

  const std::string marker_;
  const bool leading_;
  const char separator_;
  State state_ = leading_ ? State::kStart : State::kContent;
};

}  // namespace

std::unique_ptr<ToolCallStream> MakeToolCallStream(ToolCallParser kind) {
  switch (kind) {
    case ToolCallParser::kHermes: return std::make_unique<HermesStream>();
    case ToolCallParser::kMistral: return std::make_unique<ListStream>("[TOOL_CALLS]", false, ',');
    case ToolCallParser::kLlama3Json: return std::make_unique<ListStream>("<|python_tag|>", true, ';');
    case ToolCallParser::kAuto:
    case ToolCallParser::kNone: break;
  }
  return std::make_unique<PassThrough>();
}

ToolCallParser DetectToolCallParser(std::string_view t) {
  if (t.find("<tool_call>") != std::string_view::npos) return ToolCallParser::kHermes;
  if (t.find("[TOOL_CALLS]") != std::string_view::npos) return ToolCallParser::kMistral;
  if (t.find("<|python_tag|>") != std::string_view::npos || t.find("ipython") != std::string_view::npos) {
    return ToolCallParser::kLlama3Json;
  }
  return ToolCallParser::kNone;
}

std::string_view ToolCallParserName(ToolCallParser kind) {
  switch (kind) {
    case ToolCallParser::kAuto: return "auto";
    case ToolCallParser::kNone: return "none";
    case ToolCallParser::kLlama3Json: return "llama3_json";
    case ToolCallParser::kHermes: return "hermes";
    case ToolCallParser::kMistral: return "mistral";
  }
  return "none";
}

}  // namespace ferry::serve
