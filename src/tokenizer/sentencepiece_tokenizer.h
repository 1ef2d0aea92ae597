// A SentencePiece tokenizer.model through libsentencepiece, with the special-token,
// BOS/EOS and decoding behaviour transformers gives LLaMA-style tokenizers.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "tokenizer/pipeline_tokenizer.h"

namespace sentencepiece {
class SentencePieceProcessor;
}

namespace ferry::tokenizer {

// Thread-safe after Create() (SentencePieceProcessor's encode/decode are const).
class SentencePieceTokenizer : public PipelineTokenizer {
 public:
  // `model` is the serialized ModelProto (the bytes of tokenizer.model).
  static Result<std::unique_ptr<SentencePieceTokenizer>> Create(std::string_view model,
                                                                const TokenizerConfig& config);
  ~SentencePieceTokenizer() override;

  std::optional<int32_t> unk_id() const override;

 protected:
  Status EncodeText(std::string_view text, bool at_start, std::vector<int32_t>* ids) const override;
  Status EncodeTextWithOffsets(std::string_view text, bool at_start, uint32_t base, std::vector<int32_t>* ids,
                               std::vector<TokenOffset>* offsets) const override;
  std::optional<int32_t> ModelTokenToId(std::string_view token) const override;
  const std::string* ModelIdToToken(int32_t id) const override;
  int32_t model_vocab_size() const override;

 private:
  SentencePieceTokenizer();

  std::unique_ptr<sentencepiece::SentencePieceProcessor> processor_;
};

}  // namespace ferry::tokenizer
