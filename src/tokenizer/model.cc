#include "tokenizer/model.h"

#include <algorithm>

#include "tokenizer/bpe_model.h"
#include "tokenizer/unigram_model.h"
#include "tokenizer/wordpiece_model.h"

namespace ferry::tokenizer {

Status ReadVocab(const Json& config, Vocab* vocab, std::vector<std::string>* tokens) {
  const Json* v = JsonField(config, "vocab");
  if (v == nullptr || !v->is_object()) return InvalidArgument("model has no 'vocab' object");
  vocab->reserve(v->size());
  int64_t max_id = -1;
  for (auto it = v->begin(); it != v->end(); ++it) {
    if (!it.value().is_number_integer()) {
      return InvalidArgument("vocab entry '" + it.key() + "' has a non-integer id");
    }
    const int64_t id = it.value().get<int64_t>();
    if (id < 0 || id >= (int64_t{1} << 30)) {
      return InvalidArgument("vocab entry '" + it.key() + "' has id out of range");
    }
    max_id = std::max(max_id, id);
    (*vocab)[it.key()] = static_cast<int32_t>(id);
  }
  // The reverse table is sized by the largest id; refuse ids far beyond the entry count.
  if (max_id >= static_cast<int64_t>(v->size()) * 4 + 1024) {
    return InvalidArgument("vocab ids are far sparser than the " + std::to_string(v->size()) +
                           " entries (largest id " + std::to_string(max_id) + ")");
  }
  tokens->assign(static_cast<size_t>(max_id + 1), std::string());
  for (const auto& [token, id] : *vocab) (*tokens)[static_cast<size_t>(id)] = token;
  return Status::Ok();
}

Result<std::unique_ptr<Model>> MakeModel(const Json& config) {
  if (!config.is_object()) return InvalidArgument("tokenizer.json has no 'model' object");
  std::string type = JsonString(config, "type", "");
  if (type.empty()) {
    // Old files omit the type; the fields tell the models apart.
    if (JsonField(config, "merges") != nullptr) {
      type = "BPE";
    } else if (const Json* v = JsonField(config, "vocab"); v != nullptr && v->is_array()) {
      type = "Unigram";
    } else if (JsonField(config, "max_input_chars_per_word") != nullptr) {
      type = "WordPiece";
    } else {
      type = "WordLevel";
    }
  }
  if (type == "BPE") {
    FERRY_ASSIGN_OR_RETURN(std::unique_ptr<BpeModel> model, BpeModel::Create(config));
    return std::unique_ptr<Model>(std::move(model));
  }
  if (type == "WordPiece") {
    FERRY_ASSIGN_OR_RETURN(std::unique_ptr<WordPieceModel> model, WordPieceModel::Create(config));
    return std::unique_ptr<Model>(std::move(model));
  }
  if (type == "WordLevel") {
    FERRY_ASSIGN_OR_RETURN(std::unique_ptr<WordLevelModel> model, WordLevelModel::Create(config));
    return std::unique_ptr<Model>(std::move(model));
  }
  if (type == "Unigram") {
    FERRY_ASSIGN_OR_RETURN(std::unique_ptr<UnigramModel> model, UnigramModel::Create(config));
    return std::unique_ptr<Model>(std::move(model));
  }
  return Unimplemented("model type '" + type + "' is not supported (BPE, WordPiece, WordLevel, Unigram)");
}

}  // namespace ferry::tokenizer
