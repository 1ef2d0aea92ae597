#include "io/gguf_tokenizer.h"

#include <cstring>
#include <nlohmann/json.hpp>
#include <optional>
#include <vector>

namespace ferry::io {

namespace {

// Sorted objects: an insertion-ordered one costs a linear search per key, quadratic over a vocabulary.
using json = nlohmann::json;

// Llama 3's pre-tokenizer regex (its tokenizer.json's Split pattern).
constexpr const char* kLlama3Regex =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

struct Vocab {
  std::vector<std::string> tokens;
  std::vector<float> scores;     // empty when the file has none
  std::vector<int32_t> types;    // kNormal when the file has none
  std::optional<int32_t> bos, eos, unk, pad, eot;
};

Result<std::vector<std::string>> StringArray(const GgufFile& f, const std::string& key, bool required) {
  const GgufValue* v = f.Find(key);
  if (v == nullptr) {
    if (required) return InvalidArgument("GGUF '" + f.name() + "' has no '" + key + "'");
    return std::vector<std::string>();
  }
  if (v->type != GgufType::kArray || v->element_type != GgufType::kString) {
    return InvalidArgument("GGUF key '" + key + "' is not an array of strings");
  }
  return v->strings;
}

Result<std::optional<int32_t>> TokenId(const GgufFile& f, const std::string& key, size_t vocab) {
  FERRY_ASSIGN_OR_RETURN(std::optional<int64_t> id, f.OptionalInt(key));
  if (!id) return std::optional<int32_t>();
  // llama.cpp writes -1 (as uint32 0xffffffff, too) for "none".
  if (*id < 0 || *id == 0xffffffffll) return std::optional<int32_t>();
  if (static_cast<uint64_t>(*id) >= vocab) {
    return InvalidArgument("GGUF key '" + key + "' is token " + std::to_string(*id) + ", outside the vocabulary of " +
                           std::to_string(vocab));
  }
  return std::optional<int32_t>(static_cast<int32_t>(*id));
}

Result<Vocab> ReadVocab(const GgufFile& f) {
  Vocab v;
  FERRY_ASSIGN_OR_RETURN(v.tokens, StringArray(f, "tokenizer.ggml.tokens", true));
  const size_t n = v.tokens.size();
  if (n == 0) return InvalidArgument("GGUF '" + f.name() + "' has an empty tokenizer.ggml.tokens");
  if (const GgufValue* s = f.Find("tokenizer.ggml.scores")) {
    if (s->type != GgufType::kArray || s->element_type != GgufType::kFloat32 || s->floats.size() != n) {
      return InvalidArgument("GGUF key 'tokenizer.ggml.scores' must be float32s, one per token");
    }
    for (double x : s->floats) v.scores.push_back(static_cast<float>(x));
  }
  v.types.assign(n, static_cast<int32_t>(GgufTokenType::kNormal));
  if (const GgufValue* t = f.Find("tokenizer.ggml.token_type")) {
    if (t->type != GgufType::kArray || t->ints.size() != n) {
      return InvalidArgument("GGUF key 'tokenizer.ggml.token_type' must be integers, one per token");
    }
    for (size_t i = 0; i < n; ++i) v.types[i] = static_cast<int32_t>(t->ints[i]);
  }
  FERRY_ASSIGN_OR_RETURN(v.bos, TokenId(f, "tokenizer.ggml.bos_token_id", n));
  FERRY_ASSIGN_OR_RETURN(v.eos, TokenId(f, "tokenizer.ggml.eos_token_id", n));
  FERRY_ASSIGN_OR_RETURN(v.unk, TokenId(f, "tokenizer.ggml.unknown_token_id", n));
  FERRY_ASSIGN_OR_RETURN(v.pad, TokenId(f, "tokenizer.ggml.padding_token_id", n));
  FERRY_ASSIGN_OR_RETURN(v.eot, TokenId(f, "tokenizer.ggml.eot_token_id", n));
  return v;
}

// Protocol buffer wire format, enough for SentencePiece's ModelProto.
void PutVarint(std::string* out, uint64_t v) {
  while (v >= 0x80) {
    out->push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}
void PutVarintField(std::string* out, int field, uint64_t v) {
  PutVarint(out, static_cast<uint64_t>(field) << 3);
  PutVarint(out, v);
}
void PutBytesField(std::string* out, int field, const std::string& bytes) {
  PutVarint(out, (static_cast<uint64_t>(field) << 3) | 2);
  PutVarint(out, bytes.size());
  out->append(bytes);
}
void PutFloatField(std::string* out, int field, float f) {
  PutVarint(out, (static_cast<uint64_t>(field) << 3) | 5);
  char b[4];
  std::memcpy(b, &f, 4);
  out->append(b, 4);
}
// An int32 field: negative values are ten-byte varints, as protobuf encodes them.
void PutInt32Field(std::string* out, int field, int32_t v) {
  PutVarintField(out, field, static_cast<uint64_t>(static_cast<int64_t>(v)));
}

Result<std::string> SentencePieceModel(const GgufFile& f, const Vocab& v) {
  if (!v.unk) return InvalidArgument("GGUF '" + f.name() + "': a SentencePiece vocabulary needs an unknown token");
  std::string model;
  bool byte_tokens = false;
  for (size_t i = 0; i < v.tokens.size(); ++i) {
    int32_t type = v.types[i];
    if (type < 1 || type > 6) type = static_cast<int32_t>(GgufTokenType::kNormal);
    if (static_cast<int32_t>(i) == *v.unk) type = static_cast<int32_t>(GgufTokenType::kUnknown);
    if (type == static_cast<int32_t>(GgufTokenType::kUnknown) && static_cast<int32_t>(i) != *v.unk) {
      type = static_cast<int32_t>(GgufTokenType::kControl);
    }
    byte_tokens |= type == static_cast<int32_t>(GgufTokenType::kByte);
    std::string piece;
    PutBytesField(&piece, 1, v.tokens[i]);
    PutFloatField(&piece, 2, v.scores.empty() ? 0.0f : v.scores[i]);
    PutVarintField(&piece, 3, static_cast<uint64_t>(type));
    PutBytesField(&model, 1, piece);
  }
  std::string trainer;
  PutVarintField(&trainer, 3, 2);  // model_type: BPE
  PutInt32Field(&trainer, 4, static_cast<int32_t>(v.tokens.size()));
  PutVarintField(&trainer, 26, 1);  // allow_whitespace_only_pieces
  PutVarintField(&trainer, 35, byte_tokens ? 1 : 0);  // byte_fallback
  PutInt32Field(&trainer, 40, *v.unk);
  PutInt32Field(&trainer, 41, v.bos.value_or(-1));
  PutInt32Field(&trainer, 42, v.eos.value_or(-1));
  PutInt32Field(&trainer, 43, v.pad.value_or(-1));
  PutBytesField(&trainer, 45, v.tokens[static_cast<size_t>(*v.unk)]);
  if (v.bos) PutBytesField(&trainer, 46, v.tokens[static_cast<size_t>(*v.bos)]);
  if (v.eos) PutBytesField(&trainer, 47, v.tokens[static_cast<size_t>(*v.eos)]);
  if (v.pad) PutBytesField(&trainer, 48, v.tokens[static_cast<size_t>(*v.pad)]);
  PutBytesField(&model, 2, trainer);
  FERRY_ASSIGN_OR_RETURN(std::optional<bool> space_prefix, f.OptionalBool("tokenizer.ggml.add_space_prefix"));
  std::string normalizer;
  PutBytesField(&normalizer, 1, "identity");
  PutVarintField(&normalizer, 3, space_prefix.value_or(true) ? 1 : 0);  // add_dummy_prefix
  PutVarintField(&normalizer, 4, 0);                                    // remove_extra_whitespaces
  PutVarintField(&normalizer, 5, 1);                                    // escape_whitespaces
  PutBytesField(&model, 3, normalizer);
  return model;
}

Result<std::string> ByteLevelBpeJson(const GgufFile& f, const Vocab& v, const std::string& pre) {
  FERRY_ASSIGN_OR_RETURN(std::vector<std::string> merges, StringArray(f, "tokenizer.ggml.merges", true));
  json vocab = json::object();
  json added = json::array();
  for (size_t i = 0; i < v.tokens.size(); ++i) {
    vocab[v.tokens[i]] = i;
    const auto type = static_cast<GgufTokenType>(v.types[i]);
    if (type == GgufTokenType::kControl || type == GgufTokenType::kUserDefined) {
      added.push_back({{"id", i},
                       {"content", v.tokens[i]},
                       {"single_word", false},
                       {"lstrip", false},
                       {"rstrip", false},
                       {"normalized", false},
                       {"special", type == GgufTokenType::kControl}});
    }
  }
  json pre_tokenizer;
  if (pre == "default" || pre == "gpt2") {
    pre_tokenizer = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}};
  } else if (pre == "llama-bpe" || pre == "llama3") {
    pre_tokenizer = {
        {"type", "Sequence"},
        {"pretokenizers",
         json::array({json{{"type", "Split"},
                           {"pattern", {{"Regex", kLlama3Regex}}},
                           {"behavior", "Isolated"},
                           {"invert", false}},
                      json{{"type", "ByteLevel"},
                           {"add_prefix_space", false},
                           {"trim_offsets", true},
                           {"use_regex", false}}})}};
  } else {
    return Unimplemented("GGUF '" + f.name() + "': tokenizer.ggml.pre '" + pre +
                         "' is not supported (supported: default, gpt2, llama-bpe, llama3)");
  }
  json model = {{"type", "BPE"},          {"dropout", nullptr},           {"unk_token", nullptr},
                {"continuing_subword_prefix", nullptr}, {"end_of_word_suffix", nullptr}, {"fuse_unk", false},
                {"byte_fallback", false}, {"ignore_merges", pre != "default" && pre != "gpt2"},
                {"vocab", std::move(vocab)}, {"merges", merges}};
  json tok = {{"version", "1.0"},
              {"truncation", nullptr},
              {"padding", nullptr},
              {"added_tokens", std::move(added)},
              {"normalizer", nullptr},
              {"pre_tokenizer", std::move(pre_tokenizer)},
              {"post_processor",
               {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", false}, {"use_regex", true}}},
              {"decoder",
               {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}}},
              {"model", std::move(model)}};
  return tok.dump();
}

}  // namespace

Result<std::map<std::string, std::string>> GgufTokenizerFiles(const GgufFile& f) {
  std::map<std::string, std::string> files;
  FERRY_ASSIGN_OR_RETURN(std::optional<std::string> kind, f.OptionalString("tokenizer.ggml.model"));
  if (!kind || *kind == "none") return files;
  FERRY_ASSIGN_OR_RETURN(Vocab v, ReadVocab(f));
  FERRY_ASSIGN_OR_RETURN(std::optional<std::string> pre, f.OptionalString("tokenizer.ggml.pre"));
  const std::string pre_name = pre.value_or("default");
  bool default_add_bos = true;
  std::string tokenizer_class;
  if (*kind == "llama") {
    FERRY_ASSIGN_OR_RETURN(files["tokenizer.model"], SentencePieceModel(f, v));
    tokenizer_class = "LlamaTokenizer";
  } else if (*kind == "gpt2") {
    FERRY_ASSIGN_OR_RETURN(files["tokenizer.json"], ByteLevelBpeJson(f, v, pre_name));
    default_add_bos = pre_name == "llama-bpe" || pre_name == "llama3";
    tokenizer_class = "PreTrainedTokenizerFast";
  } else {
    return Unimplemented("GGUF '" + f.name() + "': tokenizer.ggml.model '" + *kind +
                         "' is not supported (supported: llama, gpt2)");
  }
  FERRY_ASSIGN_OR_RETURN(std::optional<bool> add_bos, f.OptionalBool("tokenizer.ggml.add_bos_token"));
  FERRY_ASSIGN_OR_RETURN(std::optional<bool> add_eos, f.OptionalBool("tokenizer.ggml.add_eos_token"));
  FERRY_ASSIGN_OR_RETURN(std::optional<std::string> chat_template, f.OptionalString("tokenizer.chat_template"));

  json config = {{"tokenizer_class", tokenizer_class}, {"clean_up_tokenization_spaces", false}};
  auto token = [&v](const std::optional<int32_t>& id) { return v.tokens[static_cast<size_t>(*id)]; };
  if (v.bos) config["bos_token"] = token(v.bos);
  if (v.eos) config["eos_token"] = token(v.eos);
  if (v.unk) config["unk_token"] = token(v.unk);
  if (v.pad) config["pad_token"] = token(v.pad);
  config["add_bos_token"] = add_bos.value_or(default_add_bos);
  config["add_eos_token"] = add_eos.value_or(false);
  if (chat_template) config["chat_template"] = *chat_template;
  if (*kind == "llama") {
    // SentencePiece knows its control pieces; transformers also matches them in text.
    json decoder = json::object();
    for (size_t i = 0; i < v.tokens.size(); ++i) {
      const auto type = static_cast<GgufTokenType>(v.types[i]);
      if (type != GgufTokenType::kControl && type != GgufTokenType::kUnknown && type != GgufTokenType::kUserDefined) {
        continue;
      }
      const bool special = type != GgufTokenType::kUserDefined;
      decoder[std::to_string(i)] = {{"content", v.tokens[i]}, {"lstrip", false}, {"normalized", !special},
                                    {"rstrip", false},        {"single_word", false}, {"special", special}};
    }
    config["added_tokens_decoder"] = std::move(decoder);
  }
  files["tokenizer_config.json"] = config.dump(1);

  json generation = json::object();
  if (v.bos) generation["bos_token_id"] = *v.bos;
  if (v.eos && v.eot && *v.eot != *v.eos) {
    generation["eos_token_id"] = json::array({*v.eos, *v.eot});
  } else if (v.eos) {
    generation["eos_token_id"] = *v.eos;
  }
  if (v.pad) generation["pad_token_id"] = *v.pad;
  files["generation_config.json"] = generation.dump(1);
  return files;
}

}  // namespace ferry::io
