// Where a model's files and weights come from, behind one interface: a Hugging Face
// checkpoint directory (config.json, tokenizer files, *.safetensors), or a GGUF file whose
// metadata stands for those files (io/gguf_model.h). Loaders and the engine builder read
// through it, so both kinds take the same path.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "core/status.h"
#include "core/tensor.h"
#include "io/int8_blocks.h"
#include "io/model_config.h"

namespace ferry::io {

// Tensors by Hugging Face name. The functions keep what they read from alive.
struct TensorReader {
  std::function<Result<Tensor>(const std::string& name)> get;
  std::function<bool(const std::string& name)> has;
  std::shared_ptr<const void> keepalive;
  // A matrix the file stores as int8 blocks (GGUF Q8_0), as those blocks; nullopt for one
  // stored otherwise. Empty for sources that have none (checkpoint directories).
  std::function<Result<std::optional<Int8Blocks>>(const std::string& name)> int8_blocks;
};

// Thread-safe after Open (read-only).
class ModelSource {
 public:
  virtual ~ModelSource() = default;

  // A checkpoint directory or a .gguf file (recognised by its magic); anything else is
  // InvalidArgument.
  static Result<std::shared_ptr<ModelSource>> Open(const std::string& path);
  // True when `path` is a GGUF file.
  static bool IsGguf(const std::string& path);

  const std::string& path() const { return path_; }
  virtual bool is_gguf() const = 0;
  // A settings file by its name in a checkpoint directory ("config.json", "tokenizer.model",
  // "modules.json", ...): its contents, or nullopt when the model has none.
  virtual Result<std::optional<std::string>> File(const std::string& name) const = 0;
  // config.json parsed, with generation_config.json's eos ids (io::LoadModelConfig).
  virtual Result<ModelConfig> Config() const = 0;
  // The weights (for a directory, the safetensors files are opened here).
  virtual Result<TensorReader> Weights() const = 0;
  // Bytes of weights on disk (progress and memory estimates).
  virtual uint64_t WeightBytes() const = 0;
  // True when the model has a tokenizer (tokenizer.json, tokenizer.model or vocab.txt).
  virtual bool HasTokenizer() const = 0;

 protected:
  explicit ModelSource(std::string path) : path_(std::move(path)) {}

 private:
  std::string path_;
};

}  // namespace ferry::io
