#include "tokenizer/pipeline_tokenizer.h"

#include <algorithm>
#include <utility>

#include "tokenizer/unicode.h"
#include "tokenizer/utf8.h"

namespace ferry::tokenizer {
namespace {

// transformers' clean_up_tokenization, applied when tokenizer_config.json asks for it.
void CleanUpTokenizationSpaces(std::string* text) {
  static constexpr std::pair<std::string_view, std::string_view> kRules[] = {
      {" .", "."}, {" ?", "?"}, {" !", "!"}, {" ,", ","}, {" ' ", "'"},
      {" n't", "n't"}, {" 'm", "'m"}, {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"},
  };
  for (const auto& [from, to] : kRules) {
    size_t pos = 0;
    while ((pos = text->find(from, pos)) != std::string::npos) {
      text->replace(pos, from.size(), to);
      pos += to.size();
    }
  }
}

}  // namespace

Status PipelineTokenizer::Finish(const TokenizerConfig& config, Parts parts) {
  std::vector<AddedToken> added = std::move(parts.added_tokens);
  auto known = [&added](std::string_view content) {
    return std::any_of(added.begin(), added.end(),
                       [&](const AddedToken& t) { return t.content == content; });
  };
  for (const AddedToken& token : config.added_tokens) {
    if (!known(token.content)) added.push_back(token);
  }
  // transformers registers the named special tokens as added tokens, so they are split out
  // of the text and skipped when decoding even if tokenizer.json does not list them.
  for (const std::string& content : config.NamedSpecialTokens()) {
    if (content.empty()) continue;
    auto it = std::find_if(added.begin(), added.end(),
                           [&](const AddedToken& t) { return t.content == content; });
    if (it != added.end()) {
      it->special = true;
      continue;
    }
    std::optional<int32_t> id = ModelTokenToId(content);
    if (!id) continue;
    AddedToken token;
    token.content = content;
    token.id = *id;
    token.special = true;
    added.push_back(std::move(token));
  }

  int32_t vocab_size = model_vocab_size();
  for (const AddedToken& t : added) {
    // Ids size per-id tables, so an absurd one must not turn into a huge allocation.
    if (t.id < 0 || t.id >= model_vocab_size() + (1 << 20)) {
      return InvalidArgument("added token '" + t.content + "' has id " + std::to_string(t.id) +
                             " outside the vocabulary");
    }
    vocab_size = std::max(vocab_size, t.id + 1);
  }
  vocab_size_ = vocab_size;
  added_by_id_.assign(static_cast<size_t>(vocab_size), std::string());
  special_.assign(static_cast<size_t>(vocab_size), false);
  std::vector<AddedToken> raw;
  for (const AddedToken& t : added) {
    added_by_content_[t.content] = t.id;
    added_by_id_[static_cast<size_t>(t.id)] = t.content;
    if (t.special) special_[static_cast<size_t>(t.id)] = true;
    if (t.normalized && !parts.match_all_tokens_raw) {
      normalized_added_.push_back(t);
    } else {
      raw.push_back(t);
    }
  }
  raw_matcher_ = AddedTokenMatcher(raw);

  auto resolve = [this](const std::optional<std::string>& token) -> std::optional<int32_t> {
    if (!token) return std::nullopt;
    return TokenToId(*token);
  };
  bos_id_ = resolve(config.bos_token);
  if (!bos_id_) bos_id_ = config.generation_bos_id ? config.generation_bos_id : parts.default_bos_id;
  if (auto eos = resolve(config.eos_token)) {
    eos_ids_.push_back(*eos);
  } else if (parts.default_eos_id) {
    eos_ids_.push_back(*parts.default_eos_id);
  }
  for (int32_t id : config.generation_eos_ids) {
    if (std::find(eos_ids_.begin(), eos_ids_.end(), id) == eos_ids_.end()) eos_ids_.push_back(id);
  }
  pad_id_ = resolve(config.pad_token);
  if (!pad_id_) pad_id_ = config.generation_pad_id ? config.generation_pad_id : parts.default_pad_id;

  post_processor_ = std::move(parts.post_processor);
  if (config.add_bos_token || config.add_eos_token || !post_processor_) {
    // transformers rebuilds the template from add_bos_token / add_eos_token when a config
    // sets them. A flag left unset keeps what the existing post-processor does.
    bool adds_bos = parts.default_add_bos;
    bool adds_eos = false;
    if (post_processor_) {
      std::vector<EncodedSegment> probe(1);
      post_processor_->Process(&probe);
      const std::vector<int32_t>& ids = probe[0].ids;
      adds_bos = bos_id_ && !ids.empty() && ids.front() == *bos_id_;
      adds_eos = !eos_ids_.empty() && !ids.empty() && ids.back() == eos_ids_.front();
    }
    const bool add_bos = config.add_bos_token.value_or(adds_bos) && bos_id_;
    const bool add_eos = config.add_eos_token.value_or(adds_eos) && !eos_ids_.empty();
    if (config.add_bos_token || config.add_eos_token || add_bos || add_eos) {
      post_processor_ = MakeBosEosProcessor(add_bos ? bos_id_ : std::nullopt,
                                            add_eos ? std::optional<int32_t>(eos_ids_.front()) : std::nullopt);
    }
  }
  decoder_ = std::move(parts.decoder);
  clean_up_spaces_ = config.clean_up_tokenization_spaces;

  stream_offsets_.reserve(static_cast<size_t>(vocab_size) + 1);
  stream_offsets_.push_back(0);
  for (int32_t id = 0; id < vocab_size; ++id) {
    stream_bytes_ += StreamBytes(id, /*first=*/false);
    stream_offsets_.push_back(static_cast<uint32_t>(stream_bytes_.size()));
  }
  return Status::Ok();
}

const std::string* PipelineTokenizer::TokenString(int32_t id) const {
  if (id < 0 || id >= vocab_size_) return nullptr;
  const std::string& added = added_by_id_[static_cast<size_t>(id)];
  if (!added.empty()) return &added;
  return ModelIdToToken(id);
}

std::string PipelineTokenizer::StreamBytes(int32_t id, bool first) const {
  const std::string* token = TokenString(id);
  if (token == nullptr) return std::string();
  std::vector<std::string> tokens(1, *token);
  if (decoder_ == nullptr) {
    // HF joins tokens with spaces when there is no decoder.
    if (!first) tokens[0].insert(tokens[0].begin(), ' ');
    return tokens[0];
  }
  DecodeContext context;
  context.starts_sequence = first;
  context.ends_sequence = false;
  context.streaming = true;
  decoder_->DecodeChain(&tokens, &context);
  std::string out;
  for (const std::string& t : tokens) out += t;
  return out;
}

void PipelineTokenizer::AppendTokenBytes(int32_t id, bool first, std::string* out) const {
  if (id < 0 || id >= vocab_size_) return;
  if (first) {
    out->append(StreamBytes(id, true));
    return;
  }
  const uint32_t begin = stream_offsets_[static_cast<size_t>(id)];
  const uint32_t end = stream_offsets_[static_cast<size_t>(id) + 1];
  out->append(stream_bytes_, begin, end - begin);
}

bool PipelineTokenizer::IsSpecial(int32_t id) const {
  return id >= 0 && id < vocab_size_ && special_[static_cast<size_t>(id)];
}

std::optional<int32_t> PipelineTokenizer::TokenToId(std::string_view token) const {
  if (auto it = added_by_content_.find(token); it != added_by_content_.end()) return it->second;
  return ModelTokenToId(token);
}

std::string PipelineTokenizer::IdToToken(int32_t id) const {
  const std::string* token = TokenString(id);
  return token == nullptr ? std::string() : *token;
}

Status PipelineTokenizer::EncodeInto(std::string_view text, std::vector<int32_t>* ids,
                                     std::span<const std::pair<size_t, size_t>> literal) const {
  if (const size_t bad = FindInvalidUtf8(text); bad != std::string_view::npos) {
    return InvalidArgument("text is not valid UTF-8: ill-formed sequence at byte " +
                           std::to_string(bad));
  }
  if (text.empty()) return Status::Ok();
  if (raw_matcher_.empty()) return EncodeText(text, /*at_start=*/true, ids);
  std::vector<TextSegment> segments;
  raw_matcher_.Split(text, &segments);
  if (!literal.empty()) {
    // A special token that starts inside a literal range becomes text, joined with the text
    // around it into one stretch (as if the matcher had never seen it).
    std::vector<TextSegment> merged;
    size_t r = 0;
    for (const TextSegment& s : segments) {
      while (r < literal.size() && literal[r].second <= s.begin) ++r;
      const bool in_literal = r < literal.size() && literal[r].first <= s.begin && s.begin < literal[r].second;
      TextSegment t = s;
      if (t.id >= 0 && in_literal && IsSpecial(t.id)) t.id = -1;
      if (t.id < 0 && !merged.empty() && merged.back().id < 0 && merged.back().end == t.begin) {
        merged.back().end = t.end;
      } else {
        merged.push_back(t);
      }
    }
    segments.swap(merged);
  }
  for (const TextSegment& s : segments) {
    if (s.id >= 0) {
      ids->push_back(s.id);
    } else if (s.end > s.begin) {
      FERRY_RETURN_IF_ERROR(EncodeText(text.substr(s.begin, s.end - s.begin), s.begin == 0, ids));
    }
  }
  return Status::Ok();
}

Result<std::vector<int32_t>> PipelineTokenizer::Encode(std::string_view text) const {
  std::vector<int32_t> ids;
  FERRY_RETURN_IF_ERROR(EncodeInto(text, &ids));
  return ids;
}

Result<std::vector<int32_t>> PipelineTokenizer::EncodeWithLiteralRanges(
    std::string_view text, std::span<const std::pair<size_t, size_t>> literal) const {
  std::vector<int32_t> ids;
  FERRY_RETURN_IF_ERROR(EncodeInto(text, &ids, literal));
  return ids;
}

std::vector<std::pair<size_t, size_t>> PipelineTokenizer::FindSpecialTokenText(std::string_view text) const {
  std::vector<std::pair<size_t, size_t>> out;
  if (raw_matcher_.empty() || text.empty()) return out;
  std::vector<TextSegment> segments;
  raw_matcher_.Split(text, &segments);
  for (const TextSegment& s : segments) {
    if (s.id >= 0 && IsSpecial(s.id)) out.emplace_back(s.begin, s.end);
  }
  return out;
}

Result<Encoding> PipelineTokenizer::EncodeWithSpecial(std::string_view text,
                                                      std::optional<std::string_view> pair) const {
  std::vector<EncodedSegment> segments(pair ? 2 : 1);
  FERRY_RETURN_IF_ERROR(EncodeInto(text, &segments[0].ids));
  segments[0].type_ids.assign(segments[0].ids.size(), 0);
  if (pair) {
    FERRY_RETURN_IF_ERROR(EncodeInto(*pair, &segments[1].ids).WithContext("pair text"));
    segments[1].type_ids.assign(segments[1].ids.size(), 1);
  }
  if (post_processor_) post_processor_->Process(&segments);
  Encoding out;
  for (EncodedSegment& s : segments) {
    out.ids.insert(out.ids.end(), s.ids.begin(), s.ids.end());
    out.type_ids.insert(out.type_ids.end(), s.type_ids.begin(), s.type_ids.end());
  }
  return out;
}

Result<std::vector<int32_t>> PipelineTokenizer::EncodeWithOffsets(std::string_view text,
                                                                  std::vector<TokenOffset>* offsets) const {
  if (const size_t bad = FindInvalidUtf8(text); bad != std::string_view::npos) {
    return InvalidArgument("text is not valid UTF-8: ill-formed sequence at byte " + std::to_string(bad));
  }
  if (text.size() >= (size_t{1} << 31)) return InvalidArgument("text too long for offsets");
  std::vector<int32_t> ids;
  offsets->clear();
  if (text.empty()) return ids;
  if (raw_matcher_.empty()) {
    FERRY_RETURN_IF_ERROR(EncodeTextWithOffsets(text, /*at_start=*/true, 0, &ids, offsets));
  } else {
    std::vector<TextSegment> segments;
    raw_matcher_.Split(text, &segments);
    for (const TextSegment& s : segments) {
      if (s.id >= 0) {
        ids.push_back(s.id);
        offsets->push_back({static_cast<uint32_t>(s.begin), static_cast<uint32_t>(s.end)});
      } else if (s.end > s.begin) {
        FERRY_RETURN_IF_ERROR(EncodeTextWithOffsets(text.substr(s.begin, s.end - s.begin), s.begin == 0,
                                                    static_cast<uint32_t>(s.begin), &ids, offsets));
      }
    }
  }
  TrimOffsets(ids, offsets);
  return ids;
}

void PipelineTokenizer::TrimOffsets(const std::vector<int32_t>& ids, std::vector<TokenOffset>* offsets) const {
  if (!post_processor_) return;
  const std::optional<bool> add_prefix_space = post_processor_->TrimsOffsets();
  if (!add_prefix_space) return;
  // Spaces are U+0120 in byte-level alphabets, or plain whitespace.
  auto is_space = [](char32_t cp) { return cp == 0x120 || unicode::IsWhitespace(cp); };
  for (size_t i = 0; i < ids.size(); ++i) {
    const std::string* token = TokenString(ids[i]);
    if (token == nullptr || token->empty()) continue;
    std::u32string cps;
    size_t pos = 0;
    while (pos < token->size()) cps.push_back(NextCodePoint(*token, &pos));
    size_t leading = 0;
    while (leading < cps.size() && is_space(cps[leading])) ++leading;
    size_t trailing = 0;
    while (trailing < cps.size() && is_space(cps[cps.size() - 1 - trailing])) ++trailing;
    TokenOffset& o = (*offsets)[i];
    if (leading > 0) {
      const bool is_first = i == 0 || o.begin == 0;
      if (!(is_first && *add_prefix_space && leading == 1)) {
        o.begin = std::min<uint32_t>(o.begin + static_cast<uint32_t>(leading), o.end);
      }
    }
    if (trailing > 0 && o.end >= trailing) o.end = std::max<uint32_t>(o.end - static_cast<uint32_t>(trailing), o.begin);
  }
}

Result<TemplatedEncoding> PipelineTokenizer::ApplyTemplate(std::span<const int32_t> first,
                                                           std::optional<std::span<const int32_t>> second) const {
  // The processors only move ids around and add their own (non-negative) ones, so the
  // sequences travel through them as negative markers that say where each token came from.
  constexpr int32_t kSecondBase = -(1 << 30);
  if (first.size() >= (size_t{1} << 29) || (second && second->size() >= (size_t{1} << 29))) {
    return InvalidArgument("sequence too long for the template");
  }
  std::vector<EncodedSegment> segments(second ? 2 : 1);
  for (size_t i = 0; i < first.size(); ++i) segments[0].ids.push_back(-1 - static_cast<int32_t>(i));
  segments[0].type_ids.assign(first.size(), 0);
  if (second) {
    for (size_t i = 0; i < second->size(); ++i) segments[1].ids.push_back(kSecondBase - static_cast<int32_t>(i));
    segments[1].type_ids.assign(second->size(), 1);
  }
  if (post_processor_) post_processor_->Process(&segments);
  TemplatedEncoding out;
  for (const EncodedSegment& s : segments) {
    for (size_t i = 0; i < s.ids.size(); ++i) {
      const int32_t marker = s.ids[i];
      out.type_ids.push_back(s.type_ids[i]);
      if (marker >= 0) {
        out.ids.push_back(marker);
        out.sequence.push_back(-1);
        out.position.push_back(-1);
      } else if (marker > kSecondBase) {
        const int32_t pos = -1 - marker;
        out.ids.push_back(first[static_cast<size_t>(pos)]);
        out.sequence.push_back(0);
        out.position.push_back(pos);
      } else {
        const int32_t pos = kSecondBase - marker;
        out.ids.push_back((*second)[static_cast<size_t>(pos)]);
        out.sequence.push_back(1);
        out.position.push_back(pos);
      }
    }
  }
  return out;
}

std::string PipelineTokenizer::TokensToString(const std::vector<std::string>& tokens) const {
  return DecodeTokens(tokens, decoder_.get());
}

Result<std::string> PipelineTokenizer::Decode(std::span<const int32_t> ids, bool skip_special) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int32_t id : ids) {
    if (id < 0 || id >= vocab_size_) {
      return OutOfRange("token id " + std::to_string(id) + " is outside the vocabulary (size " +
                        std::to_string(vocab_size_) + ")");
    }
    if (skip_special && special_[static_cast<size_t>(id)]) continue;
    if (const std::string* token = TokenString(id)) tokens.push_back(*token);
  }
  std::string text = DecodeTokens(std::move(tokens), decoder_.get());
  if (clean_up_spaces_) CleanUpTokenizationSpaces(&text);
  return text;
}

}  // namespace ferry::tokenizer
