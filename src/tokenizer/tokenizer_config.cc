#include "tokenizer/tokenizer_config.h"

#include <cstdlib>
#include <string_view>

#include "tokenizer/json_util.h"

namespace ferry::tokenizer {
namespace {

// Special tokens are written either as a string or as an AddedToken object.
std::optional<std::string> TokenContent(const Json* value) {
  if (value == nullptr) return std::nullopt;
  if (value->is_string()) return value->get<std::string>();
  if (auto content = JsonOptString(*value, "content")) return content;
  return std::nullopt;
}

void ReadSpecialTokens(const Json& root, TokenizerConfig* config) {
  const std::pair<const char*, std::optional<std::string>*> named[] = {
      {"bos_token", &config->bos_token},   {"eos_token", &config->eos_token},
      {"unk_token", &config->unk_token},   {"pad_token", &config->pad_token},
      {"sep_token", &config->sep_token},   {"cls_token", &config->cls_token},
      {"mask_token", &config->mask_token},
  };
  for (const auto& [key, target] : named) {
    if (auto content = TokenContent(JsonField(root, key))) *target = std::move(content);
  }
  for (const char* key : {"additional_special_tokens", "extra_special_tokens"}) {
    const Json* list = JsonField(root, key);
    if (list == nullptr) continue;
    // A list of tokens, or (newer files) a map from names to tokens.
    if (list->is_array() || list->is_object()) {
      for (const Json& item : *list) {
        if (auto content = TokenContent(&item)) config->additional_special_tokens.push_back(*content);
      }
    }
  }
}

Status ParseMainConfig(const std::string& text, TokenizerConfig* config) {
  std::optional<Json> root = ParseJson(text);
  if (!root || !root->is_object()) {
    return InvalidArgument("tokenizer_config.json is not a valid JSON object");
  }
  config->tokenizer_class = JsonString(*root, "tokenizer_class", "");
  ReadSpecialTokens(*root, config);
  config->add_bos_token = JsonOptBool(*root, "add_bos_token");
  config->add_eos_token = JsonOptBool(*root, "add_eos_token");
  config->clean_up_tokenization_spaces = JsonBool(*root, "clean_up_tokenization_spaces", false);
  if (const Json* chat = JsonField(*root, "chat_template"); chat != nullptr && !chat->is_null()) {
    if (chat->is_string()) {
      config->chat_templates["default"] = chat->get<std::string>();
    } else if (chat->is_array()) {
      for (const Json& item : *chat) {
        auto name = item.is_object() ? JsonOptString(item, "name") : std::nullopt;
        auto text = item.is_object() ? JsonOptString(item, "template") : std::nullopt;
        if (!name || !text) {
          return InvalidArgument("tokenizer_config.json: chat_template entries must have a name and a template");
        }
        config->chat_templates[*name] = *text;
      }
    } else {
      return InvalidArgument("tokenizer_config.json: chat_template must be a string or a list of named templates");
    }
  }
  if (const Json* decoder = JsonField(*root, "added_tokens_decoder"); decoder != nullptr && decoder->is_object()) {
    for (auto it = decoder->begin(); it != decoder->end(); ++it) {
      char* end = nullptr;
      const long id = std::strtol(it.key().c_str(), &end, 10);
      const Json& entry = it.value();
      auto content = JsonOptString(entry, "content");
      if (end == it.key().c_str() || *end != '\0' || id < 0 || !content) {
        return InvalidArgument("tokenizer_config.json: malformed added_tokens_decoder entry '" +
                               it.key() + "'");
      }
      AddedToken token;
      token.content = *content;
      token.id = static_cast<int32_t>(id);
      token.single_word = JsonBool(entry, "single_word", false);
      token.lstrip = JsonBool(entry, "lstrip", false);
      token.rstrip = JsonBool(entry, "rstrip", false);
      token.special = JsonBool(entry, "special", false);
      token.normalized = JsonBool(entry, "normalized", !token.special);
      config->added_tokens.push_back(std::move(token));
    }
  }
  return Status::Ok();
}

Status ParseGenerationConfig(const std::string& text, TokenizerConfig* config) {
  std::optional<Json> root = ParseJson(text);
  if (!root || !root->is_object()) {
    return InvalidArgument("generation_config.json is not a valid JSON object");
  }
  if (auto bos = JsonOptInt(*root, "bos_token_id")) config->generation_bos_id = static_cast<int32_t>(*bos);
  if (auto pad = JsonOptInt(*root, "pad_token_id")) config->generation_pad_id = static_cast<int32_t>(*pad);
  if (const Json* eos = JsonField(*root, "eos_token_id")) {
    if (eos->is_number_integer()) {
      config->generation_eos_ids.push_back(eos->get<int32_t>());
    } else if (eos->is_array()) {
      for (const Json& id : *eos) {
        if (id.is_number_integer()) config->generation_eos_ids.push_back(id.get<int32_t>());
      }
    }
  }
  return Status::Ok();
}

}  // namespace

std::vector<std::string> TokenizerConfig::NamedSpecialTokens() const {
  std::vector<std::string> out;
  for (const auto* token : {&bos_token, &eos_token, &unk_token, &pad_token, &sep_token,
                            &cls_token, &mask_token}) {
    if (*token) out.push_back(**token);
  }
  out.insert(out.end(), additional_special_tokens.begin(), additional_special_tokens.end());
  return out;
}

Result<TokenizerConfig> ParseTokenizerConfig(const std::map<std::string, std::string>& files) {
  TokenizerConfig config;
  if (auto it = files.find("tokenizer_config.json"); it != files.end()) {
    FERRY_RETURN_IF_ERROR(ParseMainConfig(it->second, &config));
  }
  // transformers lets special_tokens_map.json override the values of tokenizer_config.json.
  if (auto it = files.find("special_tokens_map.json"); it != files.end()) {
    std::optional<Json> root = ParseJson(it->second);
    if (!root || !root->is_object()) {
      return InvalidArgument("special_tokens_map.json is not a valid JSON object");
    }
    ReadSpecialTokens(*root, &config);
  }
  if (auto it = files.find("generation_config.json"); it != files.end()) {
    FERRY_RETURN_IF_ERROR(ParseGenerationConfig(it->second, &config));
  }
  if (auto it = files.find("chat_template.jinja"); it != files.end()) config.chat_templates["default"] = it->second;
  return config;
}

}  // namespace ferry::tokenizer
