// A Hugging Face tokenizer.json pipeline: added tokens, normalizer, pre-tokenizer, model,
// post-processor and decoder.
#pragma once

#include <memory>
#include <string_view>

#include "tokenizer/normalizers.h"
#include "tokenizer/pipeline_tokenizer.h"
#include "tokenizer/pre_tokenizers.h"

namespace ferry::tokenizer {

// Thread-safe after Create().
class HfTokenizer : public PipelineTokenizer {
 public:
  // `json` is the content of tokenizer.json.
  static Result<std::unique_ptr<HfTokenizer>> Create(std::string_view json, const TokenizerConfig& config);

  std::string continuing_subword_prefix() const override { return model_->continuing_subword_prefix(); }
  std::optional<int32_t> unk_id() const override { return model_->unk_id(); }

 protected:
  Status EncodeText(std::string_view text, bool at_start, std::vector<int32_t>* ids) const override;
  Status EncodeTextWithOffsets(std::string_view text, bool at_start, uint32_t base, std::vector<int32_t>* ids,
                               std::vector<TokenOffset>* offsets) const override;
  std::optional<int32_t> ModelTokenToId(std::string_view token) const override {
    return model_->TokenToId(token);
  }
  const std::string* ModelIdToToken(int32_t id) const override { return model_->IdToToken(id); }
  int32_t model_vocab_size() const override { return model_->vocab_size(); }

 private:
  Status Build(const Json& root, const TokenizerConfig& config);

  std::unique_ptr<Normalizer> normalizer_;
  std::unique_ptr<PreTokenizer> pre_tokenizer_;
  std::unique_ptr<Model> model_;
  // Added tokens with "normalized": true, searched in the normalized text.
  AddedTokenMatcher normalized_matcher_;
};

}  // namespace ferry::tokenizer
