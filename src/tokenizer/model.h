// The tokenization model: turns one pre-tokenized word into ids (BPE, WordPiece, WordLevel).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "tokenizer/aligned_text.h"
#include "tokenizer/json_util.h"

namespace ferry::tokenizer {

// Hashes std::string and std::string_view alike so lookups need no temporary string.
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using Vocab = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

// Thread-safe: immutable after construction; scratch space is per thread.
class Model {
 public:
  virtual ~Model() = default;
  // Appends the ids of `word` (valid UTF-8, never empty) and, when `spans` is given, the
  // bytes of `word` each token stands for.
  virtual Status Tokenize(std::string_view word, std::vector<int32_t>* ids,
                          std::vector<ByteRange>* spans = nullptr) const = 0;
  // The prefix that marks a token continuing a word ("##"), empty when the model has none.
  virtual std::string continuing_subword_prefix() const { return std::string(); }
  virtual std::optional<int32_t> unk_id() const { return std::nullopt; }
  virtual std::optional<int32_t> TokenToId(std::string_view token) const = 0;
  // nullptr when the id has no token.
  virtual const std::string* IdToToken(int32_t id) const = 0;
  // One past the largest id.
  virtual int32_t vocab_size() const = 0;
};

// Builds from a tokenizer.json "model" object.
Result<std::unique_ptr<Model>> MakeModel(const Json& config);

// Reads a {"token": id} object into `vocab` and the reverse table `tokens`.
Status ReadVocab(const Json& config, Vocab* vocab, std::vector<std::string>* tokens);

}  // namespace ferry::tokenizer
