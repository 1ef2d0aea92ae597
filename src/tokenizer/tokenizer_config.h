// The transformers-side settings around a tokenizer: tokenizer_config.json,
// special_tokens_map.json and generation_config.json.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "tokenizer/added_vocabulary.h"

namespace ferry::tokenizer {

struct TokenizerConfig {
  std::string tokenizer_class;
  std::optional<std::string> bos_token;
  std::optional<std::string> eos_token;
  std::optional<std::string> unk_token;
  std::optional<std::string> pad_token;
  std::optional<std::string> sep_token;
  std::optional<std::string> cls_token;
  std::optional<std::string> mask_token;
  std::vector<std::string> additional_special_tokens;
  // Unset when the files do not say; the defaults depend on the tokenizer kind.
  std::optional<bool> add_bos_token;
  std::optional<bool> add_eos_token;
  bool clean_up_tokenization_spaces = false;
  // tokenizer_config.json "added_tokens_decoder".
  std::vector<AddedToken> added_tokens;
  // generation_config.json.
  std::optional<int32_t> generation_bos_id;
  std::vector<int32_t> generation_eos_ids;
  std::optional<int32_t> generation_pad_id;
  // Chat templates by name: tokenizer_config.json's "chat_template" (a string: "default"; or
  // a list of {"name", "template"}, as models with a "tool_use" template ship them), then
  // chat_template.jinja, which newer transformers save beside it, as "default".
  std::map<std::string, std::string> chat_templates;

  // The named special tokens (bos, eos, unk, ...) and the additional ones.
  std::vector<std::string> NamedSpecialTokens() const;
};

// Reads whichever of the three files `files` holds; malformed JSON is an error.
Result<TokenizerConfig> ParseTokenizerConfig(const std::map<std::string, std::string>& files);

}  // namespace ferry::tokenizer
