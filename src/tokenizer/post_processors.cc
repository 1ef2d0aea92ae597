#include "tokenizer/post_processors.h"

#include <map>
#include <string>
#include <utility>

namespace ferry::tokenizer {
namespace {

void AppendSpecial(const std::vector<int32_t>& ids, int32_t type_id, EncodedSegment* out) {
  for (int32_t id : ids) {
    out->ids.push_back(id);
    out->type_ids.push_back(type_id);
  }
}

void AppendSequence(const EncodedSegment& segment, int32_t type_id, EncodedSegment* out) {
  out->ids.insert(out->ids.end(), segment.ids.begin(), segment.ids.end());
  out->type_ids.insert(out->type_ids.end(), segment.ids.size(), type_id);
}

class TemplateProcessor : public PostProcessor {
 public:
  struct Piece {
    bool is_sequence;
    int sequence;                  // 0 for $A, 1 for $B
    std::vector<int32_t> special;  // ids of a special token piece
    int32_t type_id;
  };

  TemplateProcessor(std::vector<Piece> single, std::vector<Piece> pair)
      : single_(std::move(single)), pair_(std::move(pair)) {}

  void Process(std::vector<EncodedSegment>* segments) const override {
    const bool is_pair = segments->size() > 1;
    const std::vector<Piece>& pieces = is_pair ? pair_ : single_;
    EncodedSegment out;
    for (const Piece& piece : pieces) {
      if (!piece.is_sequence) {
        AppendSpecial(piece.special, piece.type_id, &out);
      } else if (static_cast<size_t>(piece.sequence) < segments->size()) {
        AppendSequence((*segments)[static_cast<size_t>(piece.sequence)], piece.type_id, &out);
      }
    }
    segments->assign(1, std::move(out));
  }

 private:
  std::vector<Piece> single_;
  std::vector<Piece> pair_;
};

// [CLS] A [SEP] (B [SEP]) for BERT; <s> A </s> (</s> B </s>) with all-zero types for RoBERTa.
class ClsSepProcessor : public PostProcessor {
 public:
  ClsSepProcessor(int32_t cls, int32_t sep, bool roberta, std::optional<bool> trims = std::nullopt)
      : cls_(cls), sep_(sep), roberta_(roberta), trims_(trims) {}
  std::optional<bool> TrimsOffsets() const override { return trims_; }

  void Process(std::vector<EncodedSegment>* segments) const override {
    EncodedSegment out;
    AppendSpecial({cls_}, 0, &out);
    AppendSequence((*segments)[0], 0, &out);
    AppendSpecial({sep_}, 0, &out);
    if (segments->size() > 1) {
      const int32_t type_id = roberta_ ? 0 : 1;
      if (roberta_) AppendSpecial({sep_}, type_id, &out);
      AppendSequence((*segments)[1], type_id, &out);
      AppendSpecial({sep_}, type_id, &out);
    }
    segments->assign(1, std::move(out));
  }

 private:
  int32_t cls_;
  int32_t sep_;
  bool roberta_;
  std::optional<bool> trims_;
};

// Byte-level post-processing only trims offsets, which ferry does not report.
class IdentityProcessor : public PostProcessor {
 public:
  explicit IdentityProcessor(std::optional<bool> trims = std::nullopt) : trims_(trims) {}
  void Process(std::vector<EncodedSegment>*) const override {}
  std::optional<bool> TrimsOffsets() const override { return trims_; }

 private:
  std::optional<bool> trims_;
};

class SequenceProcessor : public PostProcessor {
 public:
  explicit SequenceProcessor(std::vector<std::unique_ptr<PostProcessor>> steps)
      : steps_(std::move(steps)) {}
  void Process(std::vector<EncodedSegment>* segments) const override {
    for (const auto& step : steps_) step->Process(segments);
  }
  std::optional<bool> TrimsOffsets() const override {
    for (const auto& step : steps_) {
      if (auto trims = step->TrimsOffsets()) return trims;
    }
    return std::nullopt;
  }

 private:
  std::vector<std::unique_ptr<PostProcessor>> steps_;
};

Result<std::vector<TemplateProcessor::Piece>> ParseTemplate(
    const Json* pieces, const std::map<std::string, std::vector<int32_t>>& specials) {
  std::vector<TemplateProcessor::Piece> out;
  if (pieces == nullptr) return out;
  if (!pieces->is_array()) return InvalidArgument("TemplateProcessing template must be a list");
  for (const Json& item : *pieces) {
    if (const Json* special = JsonField(item, "SpecialToken")) {
      const std::string name = JsonString(*special, "id", "");
      auto it = specials.find(name);
      if (it == specials.end()) {
        return InvalidArgument("TemplateProcessing uses undeclared special token '" + name + "'");
      }
      out.push_back({false, 0, it->second, static_cast<int32_t>(JsonInt(*special, "type_id", 0))});
    } else if (const Json* sequence = JsonField(item, "Sequence")) {
      const std::string name = JsonString(*sequence, "id", "A");
      if (name != "A" && name != "B") {
        return InvalidArgument("TemplateProcessing sequence must be A or B, got '" + name + "'");
      }
      out.push_back({true, name == "A" ? 0 : 1, {}, static_cast<int32_t>(JsonInt(*sequence, "type_id", 0))});
    } else {
      return InvalidArgument("TemplateProcessing piece is neither SpecialToken nor Sequence");
    }
  }
  return out;
}

Result<int32_t> ReadTokenPairId(const Json& config, const char* key) {
  const Json* pair = JsonField(config, key);
  if (pair == nullptr || !pair->is_array() || pair->size() != 2 || !(*pair)[1].is_number_integer()) {
    return InvalidArgument(std::string("post-processor field '") + key + "' must be [token, id]");
  }
  return (*pair)[1].get<int32_t>();
}

}  // namespace

Result<std::unique_ptr<PostProcessor>> MakePostProcessor(const Json& config) {
  if (config.is_null()) return std::unique_ptr<PostProcessor>();
  const std::string type = JsonString(config, "type", "");
  if (type == "TemplateProcessing") {
    std::map<std::string, std::vector<int32_t>> specials;
    if (const Json* map = JsonField(config, "special_tokens"); map != nullptr && map->is_object()) {
      for (auto it = map->begin(); it != map->end(); ++it) {
        const Json* ids = JsonField(it.value(), "ids");
        if (ids == nullptr || !ids->is_array()) {
          return InvalidArgument("TemplateProcessing special token '" + it.key() + "' has no ids");
        }
        std::vector<int32_t> values;
        for (const Json& id : *ids) {
          if (!id.is_number_integer()) return InvalidArgument("non-integer special token id");
          values.push_back(id.get<int32_t>());
        }
        specials[it.key()] = std::move(values);
      }
    }
    FERRY_ASSIGN_OR_RETURN(auto single, ParseTemplate(JsonField(config, "single"), specials));
    FERRY_ASSIGN_OR_RETURN(auto pair, ParseTemplate(JsonField(config, "pair"), specials));
    return std::unique_ptr<PostProcessor>(new TemplateProcessor(std::move(single), std::move(pair)));
  }
  if (type == "BertProcessing" || type == "RobertaProcessing") {
    FERRY_ASSIGN_OR_RETURN(int32_t cls, ReadTokenPairId(config, "cls"));
    FERRY_ASSIGN_OR_RETURN(int32_t sep, ReadTokenPairId(config, "sep"));
    const bool roberta = type == "RobertaProcessing";
    std::optional<bool> trims;
    if (roberta && JsonBool(config, "trim_offsets", true)) trims = JsonBool(config, "add_prefix_space", true);
    return std::unique_ptr<PostProcessor>(new ClsSepProcessor(cls, sep, roberta, trims));
  }
  if (type == "ByteLevel") {
    std::optional<bool> trims;
    if (JsonBool(config, "trim_offsets", true)) trims = JsonBool(config, "add_prefix_space", true);
    return std::unique_ptr<PostProcessor>(new IdentityProcessor(trims));
  }
  if (type == "Sequence") {
    const Json* list = JsonField(config, "processors");
    if (list == nullptr || !list->is_array()) {
      return InvalidArgument("Sequence post-processor without a 'processors' list");
    }
    std::vector<std::unique_ptr<PostProcessor>> steps;
    for (const Json& item : *list) {
      FERRY_ASSIGN_OR_RETURN(std::unique_ptr<PostProcessor> step, MakePostProcessor(item));
      if (step) steps.push_back(std::move(step));
    }
    return std::unique_ptr<PostProcessor>(new SequenceProcessor(std::move(steps)));
  }
  return Unimplemented("post-processor type '" + type + "' is not supported");
}

std::unique_ptr<PostProcessor> MakeBosEosProcessor(std::optional<int32_t> bos,
                                                   std::optional<int32_t> eos) {
  using Piece = TemplateProcessor::Piece;
  std::vector<Piece> single;
  std::vector<Piece> pair;
  for (int sequence = 0; sequence < 2; ++sequence) {
    const int32_t type_id = sequence;
    std::vector<Piece> part;
    if (bos) part.push_back({false, 0, {*bos}, type_id});
    part.push_back({true, sequence, {}, type_id});
    if (eos) part.push_back({false, 0, {*eos}, type_id});
    if (sequence == 0) single = part;
    pair.insert(pair.end(), part.begin(), part.end());
  }
  return std::make_unique<TemplateProcessor>(std::move(single), std::move(pair));
}

}  // namespace ferry::tokenizer
