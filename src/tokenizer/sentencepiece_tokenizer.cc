#include "tokenizer/sentencepiece_tokenizer.h"

#include <sentencepiece_processor.h>

#include <algorithm>
#include <utility>
#include <vector>

namespace ferry::tokenizer {

SentencePieceTokenizer::SentencePieceTokenizer()
    : processor_(std::make_unique<sentencepiece::SentencePieceProcessor>()) {}

SentencePieceTokenizer::~SentencePieceTokenizer() = default;

Result<std::unique_ptr<SentencePieceTokenizer>> SentencePieceTokenizer::Create(
    std::string_view model, const TokenizerConfig& config) {
  auto tokenizer = std::unique_ptr<SentencePieceTokenizer>(new SentencePieceTokenizer());
  sentencepiece::SentencePieceProcessor& sp = *tokenizer->processor_;
  if (const auto status = sp.LoadFromSerializedProto(model); !status.ok()) {
    return InvalidArgument("tokenizer.model is not a valid SentencePiece model: " +
                           std::string(status.ToString()));
  }
  if (sp.GetPieceSize() <= 0) return InvalidArgument("tokenizer.model has an empty vocabulary");

  Parts parts;
  // Control symbols (<s>, </s>) and the unknown piece are what HF marks special.
  for (int id = 0; id < sp.GetPieceSize(); ++id) {
    if (!sp.IsControl(id) && !sp.IsUnknown(id)) continue;
    AddedToken token;
    token.id = id;
    token.content = sp.IdToPiece(id);
    token.special = true;
    parts.added_tokens.push_back(std::move(token));
  }
  // The dummy prefix shows in how a bare word encodes ("a" -> "▁a"); decoding strips the
  // space it stands for at the start of a sequence.
  std::vector<std::string> pieces;
  bool dummy_prefix = false;
  if (sp.Encode("a", &pieces).ok() && !pieces.empty()) {
    dummy_prefix = pieces[0].rfind("\xE2\x96\x81", 0) == 0;
  }
  parts.decoder = MakeSentencePieceDecoder(dummy_prefix);
  // LlamaTokenizer adds BOS unless tokenizer_config.json says otherwise.
  parts.default_add_bos = true;
  parts.match_all_tokens_raw = true;
  if (sp.bos_id() >= 0) parts.default_bos_id = sp.bos_id();
  if (sp.eos_id() >= 0) parts.default_eos_id = sp.eos_id();
  if (sp.pad_id() >= 0) parts.default_pad_id = sp.pad_id();
  FERRY_RETURN_IF_ERROR(tokenizer->Finish(config, std::move(parts)));
  return tokenizer;
}

Status SentencePieceTokenizer::EncodeText(std::string_view text, bool, std::vector<int32_t>* ids) const {
  std::vector<int> pieces;
  if (const auto status = processor_->Encode(text, &pieces); !status.ok()) {
    return InvalidArgument("SentencePiece could not encode the text: " + std::string(status.ToString()));
  }
  ids->insert(ids->end(), pieces.begin(), pieces.end());
  return Status::Ok();
}

// SentencePiece reports each piece's bytes in the input it was given.
Status SentencePieceTokenizer::EncodeTextWithOffsets(std::string_view text, bool, uint32_t base,
                                                     std::vector<int32_t>* ids,
                                                     std::vector<TokenOffset>* offsets) const {
  sentencepiece::ImmutableSentencePieceText spt;
  if (const auto status = processor_->Encode(text, spt.mutable_proto()); !status.ok()) {
    return InvalidArgument("SentencePiece could not encode the text: " + std::string(status.ToString()));
  }
  for (const auto& piece : spt.pieces()) {
    ids->push_back(static_cast<int32_t>(piece.id()));
    const uint32_t begin = std::min<uint32_t>(piece.begin(), static_cast<uint32_t>(text.size()));
    const uint32_t end = std::min<uint32_t>(std::max(piece.end(), begin), static_cast<uint32_t>(text.size()));
    offsets->push_back({base + begin, base + end});
  }
  return Status::Ok();
}

std::optional<int32_t> SentencePieceTokenizer::unk_id() const {
  const int id = processor_->unk_id();
  return id >= 0 ? std::optional<int32_t>(id) : std::nullopt;
}

std::optional<int32_t> SentencePieceTokenizer::ModelTokenToId(std::string_view token) const {
  const int id = processor_->PieceToId(token);
  // PieceToId answers unk_id for unknown pieces; only the unk piece itself maps there.
  if (processor_->IsUnknown(id) && processor_->IdToPiece(id) != token) return std::nullopt;
  return id;
}

const std::string* SentencePieceTokenizer::ModelIdToToken(int32_t id) const {
  if (id < 0 || id >= processor_->GetPieceSize()) return nullptr;
  return &processor_->IdToPiece(id);
}

int32_t SentencePieceTokenizer::model_vocab_size() const { return processor_->GetPieceSize(); }

}  // namespace ferry::tokenizer
