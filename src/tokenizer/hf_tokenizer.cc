#include "tokenizer/hf_tokenizer.h"

#include <utility>

namespace ferry::tokenizer {
namespace {

Result<std::vector<AddedToken>> ReadAddedTokens(const Json& root) {
  std::vector<AddedToken> tokens;
  const Json* list = JsonField(root, "added_tokens");
  if (list == nullptr) return tokens;
  if (!list->is_array()) return InvalidArgument("tokenizer.json: 'added_tokens' is not a list");
  for (const Json& entry : *list) {
    auto id = JsonOptInt(entry, "id");
    auto content = JsonOptString(entry, "content");
    if (!id || !content || *id < 0) {
      return InvalidArgument("tokenizer.json: added token without a valid id and content");
    }
    AddedToken token;
    token.id = static_cast<int32_t>(*id);
    token.content = *content;
    token.single_word = JsonBool(entry, "single_word", false);
    token.lstrip = JsonBool(entry, "lstrip", false);
    token.rstrip = JsonBool(entry, "rstrip", false);
    token.special = JsonBool(entry, "special", false);
    token.normalized = JsonBool(entry, "normalized", !token.special);
    tokens.push_back(std::move(token));
  }
  return tokens;
}

}  // namespace

Result<std::unique_ptr<HfTokenizer>> HfTokenizer::Create(std::string_view json,
                                                         const TokenizerConfig& config) {
  std::optional<Json> root = ParseJson(json);
  if (!root || !root->is_object()) return InvalidArgument("tokenizer.json is not a valid JSON object");
  auto tokenizer = std::unique_ptr<HfTokenizer>(new HfTokenizer());
  // Accessors are non-throwing, but guard the edge anyway: a library exception must not
  // escape the module.
  try {
    FERRY_RETURN_IF_ERROR(tokenizer->Build(*root, config));
  } catch (const nlohmann::json::exception& e) {
    return InvalidArgument(std::string("tokenizer.json: ") + e.what());
  }
  return tokenizer;
}

Status HfTokenizer::Build(const Json& root, const TokenizerConfig& config) {
  const Json* model = JsonField(root, "model");
  if (model == nullptr) return InvalidArgument("tokenizer.json has no 'model'");
  FERRY_ASSIGN_OR_RETURN(model_, MakeModel(*model));
  const Json null_json;
  auto field = [&](const char* key) -> const Json& {
    const Json* v = JsonField(root, key);
    return v == nullptr ? null_json : *v;
  };
  auto in = [](const char* what) { return std::string("tokenizer.json ") + what; };
  {
    auto normalizer = MakeNormalizer(field("normalizer"));
    if (!normalizer.ok()) return normalizer.status().WithContext(in("normalizer"));
    normalizer_ = std::move(normalizer).value();
  }
  {
    auto pre_tokenizer = MakePreTokenizer(field("pre_tokenizer"));
    if (!pre_tokenizer.ok()) return pre_tokenizer.status().WithContext(in("pre_tokenizer"));
    pre_tokenizer_ = std::move(pre_tokenizer).value();
  }
  Parts parts;
  {
    auto post_processor = MakePostProcessor(field("post_processor"));
    if (!post_processor.ok()) return post_processor.status().WithContext(in("post_processor"));
    parts.post_processor = std::move(post_processor).value();
  }
  {
    auto decoder = MakeDecoder(field("decoder"));
    if (!decoder.ok()) return decoder.status().WithContext(in("decoder"));
    parts.decoder = std::move(decoder).value();
  }
  FERRY_ASSIGN_OR_RETURN(parts.added_tokens, ReadAddedTokens(root));
  FERRY_RETURN_IF_ERROR(Finish(config, std::move(parts)));

  // Normalized added tokens are searched for in their normalized spelling.
  std::vector<AddedToken> normalized = normalized_added_tokens();
  for (AddedToken& token : normalized) {
    if (normalizer_) FERRY_RETURN_IF_ERROR(normalizer_->Normalize(&token.content));
  }
  normalized_matcher_ = AddedTokenMatcher(normalized);
  return Status::Ok();
}

Status HfTokenizer::EncodeText(std::string_view text, bool at_start, std::vector<int32_t>* ids) const {
  std::string normalized(text);
  if (normalizer_) FERRY_RETURN_IF_ERROR(normalizer_->Normalize(&normalized));
  if (normalized.empty()) return Status::Ok();

  std::vector<TextSegment> segments;
  if (normalized_matcher_.empty()) {
    segments.push_back({0, normalized.size(), -1});
  } else {
    normalized_matcher_.Split(normalized, &segments);
  }
  std::vector<PreToken> words;
  for (const TextSegment& s : segments) {
    if (s.id >= 0) {
      ids->push_back(s.id);
      continue;
    }
    if (s.end == s.begin) continue;
    words.clear();
    words.push_back({normalized.substr(s.begin, s.end - s.begin), at_start && s.begin == 0, {}});
    if (pre_tokenizer_) FERRY_RETURN_IF_ERROR(pre_tokenizer_->PreTokenize(&words));
    for (const PreToken& word : words) {
      if (!word.text.empty()) FERRY_RETURN_IF_ERROR(model_->Tokenize(word.text, ids));
    }
  }
  return Status::Ok();
}

// The same steps as EncodeText on text that carries its alignment with the input, so that
// every token's span in its word maps back to input bytes.
Status HfTokenizer::EncodeTextWithOffsets(std::string_view text, bool at_start, uint32_t base,
                                          std::vector<int32_t>* ids, std::vector<TokenOffset>* offsets) const {
  AlignedText normalized = AlignedText::Identity(text, base);
  if (normalizer_) FERRY_RETURN_IF_ERROR(normalizer_->NormalizeAligned(&normalized));
  if (normalized.text.empty()) return Status::Ok();

  std::vector<TextSegment> segments;
  if (normalized_matcher_.empty()) {
    segments.push_back({0, normalized.text.size(), -1});
  } else {
    normalized_matcher_.Split(normalized.text, &segments);
  }
  std::vector<PreToken> words;
  std::vector<ByteRange> spans;
  for (const TextSegment& s : segments) {
    if (s.id >= 0) {
      ids->push_back(s.id);
      const ByteRange r = normalized.Original(s.begin, s.end);
      offsets->push_back({r.first, r.second});
      continue;
    }
    if (s.end == s.begin) continue;
    words.clear();
    PreToken whole{normalized.text.substr(s.begin, s.end - s.begin), at_start && s.begin == 0, {}};
    whole.align.assign(normalized.align.begin() + static_cast<std::ptrdiff_t>(s.begin),
                       normalized.align.begin() + static_cast<std::ptrdiff_t>(s.end));
    words.push_back(std::move(whole));
    if (pre_tokenizer_) FERRY_RETURN_IF_ERROR(pre_tokenizer_->PreTokenize(&words));
    for (const PreToken& word : words) {
      if (word.text.empty()) continue;
      spans.clear();
      FERRY_RETURN_IF_ERROR(model_->Tokenize(word.text, ids, &spans));
      for (const ByteRange& span : spans) {
        if (span.second > span.first) {
          offsets->push_back({word.align[span.first].first, word.align[span.second - 1].second});
        } else {
          const uint32_t at = span.first < word.align.size() ? word.align[span.first].first : word.align.back().second;
          offsets->push_back({at, at});
        }
      }
    }
  }
  return Status::Ok();
}

}  // namespace ferry::tokenizer
