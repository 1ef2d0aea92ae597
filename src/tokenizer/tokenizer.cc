#include "tokenizer/tokenizer.h"

#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>

#include "tokenizer/hf_tokenizer.h"
#include "tokenizer/sentencepiece_tokenizer.h"
#include "tokenizer/tokenizer_config.h"

namespace ferry::tokenizer {
namespace {

constexpr const char* kTokenizerFiles[] = {
    "tokenizer.json",          "tokenizer.model",         "tokenizer_config.json",
    "special_tokens_map.json", "generation_config.json",
};

Result<std::string> ReadFile(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound("cannot open " + path.string());
  std::ostringstream contents;
  contents << in.rdbuf();
  if (in.bad()) return DataLoss("error reading " + path.string());
  return contents.str();
}

}  // namespace

Result<std::unique_ptr<Tokenizer>> LoadTokenizer(const std::string& dir) {
  std::error_code error;
  if (!std::filesystem::is_directory(dir, error)) {
    return NotFound("tokenizer directory '" + dir + "' does not exist");
  }
  std::map<std::string, std::string> files;
  for (const char* name : kTokenizerFiles) {
    const std::filesystem::path path = std::filesystem::path(dir) / name;
    if (!std::filesystem::is_regular_file(path, error)) continue;
    FERRY_ASSIGN_OR_RETURN(files[name], ReadFile(path));
  }
  auto tokenizer = LoadTokenizerFromFiles(files);
  if (!tokenizer.ok()) return tokenizer.status().WithContext("loading tokenizer from " + dir);
  return tokenizer;
}

Result<std::unique_ptr<Tokenizer>> LoadTokenizerFromFiles(const std::map<std::string, std::string>& files) {
  const auto model = files.find("tokenizer.model");
  const auto json = files.find("tokenizer.json");
  if (model == files.end() && json == files.end()) {
    return NotFound("no tokenizer.json or tokenizer.model among the tokenizer files");
  }
  FERRY_ASSIGN_OR_RETURN(TokenizerConfig config, ParseTokenizerConfig(files));
  // SentencePiece's own model is the canonical behaviour of LLaMA-2-style vocabularies;
  // converted tokenizer.json files differ from it on leading whitespace.
  if (model != files.end()) {
    FERRY_ASSIGN_OR_RETURN(auto tokenizer, SentencePieceTokenizer::Create(model->second, config));
    return std::unique_ptr<Tokenizer>(std::move(tokenizer));
  }
  FERRY_ASSIGN_OR_RETURN(auto tokenizer, HfTokenizer::Create(json->second, config));
  return std::unique_ptr<Tokenizer>(std::move(tokenizer));
}

}  // namespace ferry::tokenizer
