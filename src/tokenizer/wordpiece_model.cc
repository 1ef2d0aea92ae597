#include "tokenizer/wordpiece_model.h"

#include "tokenizer/utf8.h"

namespace ferry::tokenizer {
namespace {

const std::string* LookupToken(const std::vector<std::string>& tokens, int32_t id) {
  if (id < 0 || static_cast<size_t>(id) >= tokens.size()) return nullptr;
  const std::string& token = tokens[static_cast<size_t>(id)];
  return token.empty() ? nullptr : &token;
}

}  // namespace

Result<std::unique_ptr<WordPieceModel>> WordPieceModel::Create(const Json& config) {
  auto model = std::unique_ptr<WordPieceModel>(new WordPieceModel());
  FERRY_RETURN_IF_ERROR(ReadVocab(config, &model->vocab_, &model->tokens_));
  model->prefix_ = JsonString(config, "continuing_subword_prefix", "##");
  const int64_t max_chars = JsonInt(config, "max_input_chars_per_word", 100);
  model->max_input_chars_per_word_ = max_chars > 0 ? static_cast<size_t>(max_chars) : 100;
  model->unk_token_ = JsonString(config, "unk_token", "[UNK]");
  auto it = model->vocab_.find(model->unk_token_);
  if (it == model->vocab_.end()) {
    return InvalidArgument("WordPiece unk_token '" + model->unk_token_ + "' is not in the vocab");
  }
  model->unk_id_ = it->second;
  return model;
}

Status WordPieceModel::Tokenize(std::string_view word, std::vector<int32_t>* ids,
                                std::vector<ByteRange>* spans) const {
  const ByteRange whole{0, static_cast<uint32_t>(word.size())};
  size_t chars = 0;
  for (char c : word) chars += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  if (chars > max_input_chars_per_word_) {
    ids->push_back(unk_id_);
    if (spans != nullptr) spans->push_back(whole);
    return Status::Ok();
  }
  const size_t mark = ids->size();
  const size_t span_mark = spans != nullptr ? spans->size() : 0;
  thread_local std::string candidate;
  size_t start = 0;
  while (start < word.size()) {
    size_t end = word.size();
    int32_t found = -1;
    while (start < end) {
      std::string_view piece = word.substr(start, end - start);
      if (start > 0) {
        candidate.assign(prefix_);
        candidate.append(piece);
        piece = candidate;
      }
      if (auto it = vocab_.find(piece); it != vocab_.end()) {
        found = it->second;
        break;
      }
      // Shrink by one whole character from the right.
      size_t char_start = 0;
      PrevCodePoint(word, end, &char_start);
      end = char_start;
    }
    if (found < 0) {
      // Any unmatched remainder makes the whole word unknown.
      ids->resize(mark);
      ids->push_back(unk_id_);
      if (spans != nullptr) {
        spans->resize(span_mark);
        spans->push_back(whole);
      }
      return Status::Ok();
    }
    ids->push_back(found);
    if (spans != nullptr) spans->push_back({static_cast<uint32_t>(start), static_cast<uint32_t>(end)});
    start = end;
  }
  return Status::Ok();
}

std::optional<int32_t> WordPieceModel::TokenToId(std::string_view token) const {
  auto it = vocab_.find(token);
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

const std::string* WordPieceModel::IdToToken(int32_t id) const { return LookupToken(tokens_, id); }

Result<std::unique_ptr<WordLevelModel>> WordLevelModel::Create(const Json& config) {
  auto model = std::unique_ptr<WordLevelModel>(new WordLevelModel());
  FERRY_RETURN_IF_ERROR(ReadVocab(config, &model->vocab_, &model->tokens_));
  model->unk_token_ = JsonString(config, "unk_token", "<unk>");
  auto it = model->vocab_.find(model->unk_token_);
  if (it != model->vocab_.end()) model->unk_id_ = it->second;
  return model;
}

Status WordLevelModel::Tokenize(std::string_view word, std::vector<int32_t>* ids,
                                std::vector<ByteRange>* spans) const {
  if (spans != nullptr) spans->push_back({0, static_cast<uint32_t>(word.size())});
  if (auto it = vocab_.find(word); it != vocab_.end()) {
    ids->push_back(it->second);
    return Status::Ok();
  }
  if (unk_id_ < 0) {
    return InvalidArgument("WordLevel model has no entry for a word and no unk token");
  }
  ids->push_back(unk_id_);
  return Status::Ok();
}

std::optional<int32_t> WordLevelModel::TokenToId(std::string_view token) const {
  auto it = vocab_.find(token);
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

const std::string* WordLevelModel::IdToToken(int32_t id) const { return LookupToken(tokens_, id); }

}  // namespace ferry::tokenizer
