#include "tokenizer/decoders.h"

#include <optional>
#include <utility>

#include "tokenizer/byte_level.h"
#include "tokenizer/regex.h"
#include "tokenizer/utf8.h"

namespace ferry::tokenizer {
namespace {

void ReplaceAll(std::string* text, std::string_view from, std::string_view to) {
  if (from.empty()) return;
  size_t pos = text->find(from);
  if (pos == std::string::npos) return;
  std::string out;
  out.reserve(text->size());
  size_t last = 0;
  while (pos != std::string::npos) {
    out.append(*text, last, pos - last);
    out.append(to);
    last = pos + from.size();
    pos = text->find(from, last);
  }
  out.append(*text, last, std::string::npos);
  *text = std::move(out);
}

void FuseAll(std::vector<std::string>* tokens, DecodeContext* context) {
  context->fused = true;
  if (tokens->size() <= 1) return;
  std::string joined;
  for (const std::string& t : *tokens) joined += t;
  tokens->assign(1, std::move(joined));
}

class ByteLevelDecoder : public Decoder {
 public:
  void DecodeChain(std::vector<std::string>* tokens, DecodeContext* context) const override {
    const ByteLevelAlphabet& alphabet = ByteLevelAlphabet::Get();
    std::string bytes;
    for (const std::string& token : *tokens) {
      // Tokens outside the alphabet (added tokens with spaces, say) pass through as they are.
      if (!alphabet.Decode(token, &bytes)) bytes += token;
    }
    tokens->assign(1, std::move(bytes));
    context->fused = true;
  }
};

class MetaspaceDecoder : public Decoder {
 public:
  MetaspaceDecoder(std::string replacement, bool drop_first) : replacement_(std::move(replacement)), drop_first_(drop_first) {}
  void DecodeChain(std::vector<std::string>* tokens, DecodeContext* context) const override {
    for (size_t i = 0; i < tokens->size(); ++i) {
      // HF drops every replacement character of the very first token, not just a leading one.
      const bool drop = i == 0 && context->starts_sequence && drop_first_;
      ReplaceAll(&(*tokens)[i], replacement_, drop ? "" : " ");
    }
  }

 private:
  std::string replacement_;
  bool drop_first_;
};

class WordPieceDecoder : public Decoder {
 public:
  WordPieceDecoder(std::string prefix, bool cleanup) : prefix_(std::move(prefix)), cleanup_(cleanup) {}
  void DecodeChain(std::vector<std::string>* tokens, DecodeContext* context) const override {
    for (size_t i = 0; i < tokens->size(); ++i) {
      std::string& token = (*tokens)[i];
      if (i > 0 || !context->starts_sequence) {
        if (!prefix_.empty() && token.compare(0, prefix_.size(), prefix_) == 0) {
          token.erase(0, prefix_.size());
        } else {
          token.insert(token.begin(), ' ');
        }
      }
      if (cleanup_) Cleanup(&token);
    }
  }

 private:
  // The clean-up of the original BERT detokenizer, applied to each token on its own.
  static void Cleanup(std::string* token) {
    static constexpr std::pair<std::string_view, std::string_view> kRules[] = {
        {" .", "."},       {" ?", "?"},   {" !", "!"},   {" ,", ","},
        {" ' ", "'"},      {" n't", "n't"}, {" 'm", "'m"}, {" do not", " don't"},
        {" 's", "'s"},     {" 've", "'ve"}, {" 're", "'re"},
    };
    for (const auto& [from, to] : kRules) ReplaceAll(token, from, to);
  }

  std::string prefix_;
  bool cleanup_;
};

class ReplaceDecoder : public Decoder {
 public:
  ReplaceDecoder(std::optional<std::string> literal, std::optional<Regex> regex, std::string content)
      : literal_(std::move(literal)), regex_(std::move(regex)), content_(std::move(content)) {}
  void DecodeChain(std::vector<std::string>* tokens, DecodeContext*) const override {
    for (std::string& token : *tokens) {
      if (literal_) {
        ReplaceAll(&token, *literal_, content_);
        continue;
      }
      if (!IsValidUtf8(token)) continue;
      std::vector<Regex::Match> matches;
      if (!regex_->FindAll(token, &matches).ok() || matches.empty()) continue;
      std::string out;
      size_t last = 0;
      for (const Regex::Match& m : matches) {
        out.append(token, last, m.begin - last);
        out += content_;
        last = m.end;
      }
      out.append(token, last, std::string::npos);
      token = std::move(out);
    }
  }

 private:
  std::optional<std::string> literal_;
  std::optional<Regex> regex_;
  std::string content_;
};

// "<0xAB>" tokens become the byte 0xAB. HF turns each run of such tokens into a string, or
// into one U+FFFD per token when the run is not valid UTF-8.
class ByteFallbackDecoder : public Decoder {
 public:
  void DecodeChain(std::vector<std::string>* tokens, DecodeContext* context) const override {
    std::vector<std::string> out;
    out.reserve(tokens->size());
    std::string run;
    size_t run_tokens = 0;
    auto flush = [&]() {
      if (run_tokens == 0) return;
      if (context->streaming || IsValidUtf8(run)) {
        out.push_back(run);
      } else {
        for (size_t i = 0; i < run_tokens; ++i) out.emplace_back("\xEF\xBF\xBD");
      }
      run.clear();
      run_tokens = 0;
    };
    for (std::string& token : *tokens) {
      if (int byte = ParseByteToken(token); byte >= 0) {
        run.push_back(static_cast<char>(byte));
        ++run_tokens;
        continue;
      }
      flush();
      out.push_back(std::move(token));
    }
    flush();
    tokens->swap(out);
  }

 private:
  static int HexDigit(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  }
  static int ParseByteToken(const std::string& token) {
    if (token.size() != 6 || token.compare(0, 3, "<0x") != 0 || token[5] != '>') return -1;
    const int hi = HexDigit(token[3]);
    const int lo = HexDigit(token[4]);
    return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
  }
};

class FuseDecoder : public Decoder {
 public:
  void DecodeChain(std::vector<std::string>* tokens, DecodeContext* context) const override {
    FuseAll(tokens, context);
  }
};

class StripDecoder : public Decoder {
 public:
  StripDecoder(char32_t content, size_t start, size_t stop) : start_(start), stop_(stop) {
    AppendUtf8(content, &content_);
  }
  void DecodeChain(std::vector<std::string>* tokens, DecodeContext* context) const override {
    // Per token, as HF does; after a Fuse the single token spans the whole sequence, so
    // its ends are the sequence's ends (only known when decoding all of it).
    for (size_t i = 0; i < tokens->size(); ++i) {
      std::string& token = (*tokens)[i];
      const bool strip_start = !context->fused || (i == 0 && context->starts_sequence);
      const bool strip_stop = !context->fused || (i + 1 == tokens->size() && context->ends_sequence);
      if (strip_start) {
        for (size_t n = 0; n < start_ && token.compare(0, content_.size(), content_) == 0; ++n) {
          token.erase(0, content_.size());
        }
      }
      if (strip_stop) {
        for (size_t n = 0; n < stop_ && token.size() >= content_.size() &&
                           token.compare(token.size() - content_.size(), content_.size(), content_) == 0;
             ++n) {
          token.resize(token.size() - content_.size());
        }
      }
    }
  }

 private:
  std::string content_;
  size_t start_;
  size_t stop_;
};

class BpeSuffixDecoder : public Decoder {
 public:
  explicit BpeSuffixDecoder(std::string suffix) : suffix_(std::move(suffix)) {}
  void DecodeChain(std::vector<std::string>* tokens, DecodeContext* context) const override {
    for (size_t i = 0; i < tokens->size(); ++i) {
      const bool last = i + 1 == tokens->size() && context->ends_sequence;
      ReplaceAll(&(*tokens)[i], suffix_, last ? "" : " ");
    }
  }

 private:
  std::string suffix_;
};

class SequenceDecoder : public Decoder {
 public:
  explicit SequenceDecoder(std::vector<std::unique_ptr<Decoder>> steps) : steps_(std::move(steps)) {}
  void DecodeChain(std::vector<std::string>* tokens, DecodeContext* context) const override {
    for (const auto& step : steps_) step->DecodeChain(tokens, context);
  }

 private:
  std::vector<std::unique_ptr<Decoder>> steps_;
};

Result<char32_t> ReadSingleChar(const std::string& text, const char* what) {
  size_t pos = 0;
  if (text.empty() || !IsValidUtf8(text)) return InvalidArgument(std::string(what) + " must be one character");
  const char32_t cp = NextCodePoint(text, &pos);
  if (pos != text.size()) return InvalidArgument(std::string(what) + " must be one character");
  return cp;
}

}  // namespace

Result<std::unique_ptr<Decoder>> MakeDecoder(const Json& config) {
  if (config.is_null()) return std::unique_ptr<Decoder>();
  const std::string type = JsonString(config, "type", "");
  if (type == "ByteLevel") return std::unique_ptr<Decoder>(new ByteLevelDecoder());
  if (type == "Metaspace") {
    const std::string replacement = JsonString(config, "replacement", "\xE2\x96\x81");
    FERRY_RETURN_IF_ERROR(ReadSingleChar(replacement, "Metaspace replacement").status());
    bool drop_first = true;
    if (auto scheme = JsonOptString(config, "prepend_scheme")) {
      drop_first = *scheme != "never";
    } else if (auto add_prefix_space = JsonOptBool(config, "add_prefix_space")) {
      drop_first = *add_prefix_space;
    }
    return std::unique_ptr<Decoder>(new MetaspaceDecoder(replacement, drop_first));
  }
  if (type == "WordPiece") {
    return std::unique_ptr<Decoder>(
        new WordPieceDecoder(JsonString(config, "prefix", "##"), JsonBool(config, "cleanup", true)));
  }
  if (type == "Replace") {
    const Json* pattern = JsonField(config, "pattern");
    if (pattern == nullptr) return InvalidArgument("Replace decoder without a pattern");
    const std::string content = JsonString(config, "content", "");
    if (auto literal = JsonOptString(*pattern, "String")) {
      return std::unique_ptr<Decoder>(new ReplaceDecoder(*literal, std::nullopt, content));
    }
    FERRY_ASSIGN_OR_RETURN(Regex regex, MakePattern(*pattern));
    return std::unique_ptr<Decoder>(new ReplaceDecoder(std::nullopt, std::move(regex), content));
  }
  if (type == "ByteFallback") return std::unique_ptr<Decoder>(new ByteFallbackDecoder());
  if (type == "Fuse") return std::unique_ptr<Decoder>(new FuseDecoder());
  if (type == "Strip") {
    FERRY_ASSIGN_OR_RETURN(char32_t content,
                           ReadSingleChar(JsonString(config, "content", " "), "Strip content"));
    const int64_t start = JsonInt(config, "start", 0);
    const int64_t stop = JsonInt(config, "stop", 0);
    if (start < 0 || stop < 0) return InvalidArgument("Strip decoder counts must be >= 0");
    return std::unique_ptr<Decoder>(
        new StripDecoder(content, static_cast<size_t>(start), static_cast<size_t>(stop)));
  }
  if (type == "BPEDecoder") {
    return std::unique_ptr<Decoder>(new BpeSuffixDecoder(JsonString(config, "suffix", "</w>")));
  }
  if (type == "Sequence") {
    const Json* list = JsonField(config, "decoders");
    if (list == nullptr || !list->is_array()) {
      return InvalidArgument("Sequence decoder without a 'decoders' list");
    }
    std::vector<std::unique_ptr<Decoder>> steps;
    for (const Json& item : *list) {
      FERRY_ASSIGN_OR_RETURN(std::unique_ptr<Decoder> step, MakeDecoder(item));
      if (step) steps.push_back(std::move(step));
    }
    return std::unique_ptr<Decoder>(new SequenceDecoder(std::move(steps)));
  }
  return Unimplemented("decoder type '" + type + "' is not supported");
}

std::unique_ptr<Decoder> MakeSentencePieceDecoder(bool strip_leading_space) {
  std::vector<std::unique_ptr<Decoder>> steps;
  steps.push_back(std::make_unique<ReplaceDecoder>("\xE2\x96\x81", std::nullopt, " "));
  steps.push_back(std::make_unique<ByteFallbackDecoder>());
  steps.push_back(std::make_unique<FuseDecoder>());
  if (strip_leading_space) steps.push_back(std::make_unique<StripDecoder>(U' ', 1, 0));
  return std::make_unique<SequenceDecoder>(std::move(steps));
}

std::string DecodeTokens(std::vector<std::string> tokens, const Decoder* decoder) {
  std::string joined;
  if (decoder != nullptr) {
    DecodeContext context;
    decoder->DecodeChain(&tokens, &context);
    for (const std::string& t : tokens) joined += t;
  } else {
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (i > 0) joined.push_back(' ');
      joined += tokens[i];
    }
  }
  std::string out;
  out.reserve(joined.size());
  AppendValidUtf8(joined, /*keep_truncated_tail=*/false, &out);
  return out;
}

}  // namespace ferry::tokenizer
