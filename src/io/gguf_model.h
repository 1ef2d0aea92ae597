// A llama-architecture GGUF file seen as a Hugging Face checkpoint directory: the files
// (config.json from the llama.* metadata, the tokenizer files of io/gguf_tokenizer.h) and the
// tensors under Hugging Face names.
//
// llama.cpp's converter interleaves the rotary halves of every q_proj and k_proj head (rows
// [n_head, 2, head_dim/2] stored as [n_head, head_dim/2, 2]); Get undoes that, so the weights
// are exactly the checkpoint's. Llama 3 RoPE scaling travels in GGUF as rope_freqs.weight,
// the per-pair divisors of the frequencies; config.json carries them as a "longrope" scaling
// with those divisors and no attention factor, which computes the same frequencies.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "core/status.h"
#include "core/tensor.h"
#include "io/gguf.h"

namespace ferry::io {

// Thread-safe after Open (read-only).
class GgufModel {
 public:
  static Result<std::shared_ptr<GgufModel>> Open(const std::string& path);
  // The same over a file already open.
  static Result<std::shared_ptr<GgufModel>> FromFile(std::shared_ptr<GgufFile> file);

  // config.json, generation_config.json, tokenizer_config.json, tokenizer.model or
  // tokenizer.json: file name -> contents.
  const std::map<std::string, std::string>& files() const { return files_; }
  const GgufFile& file() const { return *file_; }

  // A tensor by its Hugging Face name (q/k rows restored to Hugging Face's order).
  Result<Tensor> Get(const std::string& hf_name) const;
  // A Q8_0 matrix as its int8 blocks (rows restored as Get restores them); nullopt for a
  // tensor stored in another type.
  Result<std::optional<Int8Blocks>> GetInt8Blocks(const std::string& hf_name) const;
  bool Has(const std::string& hf_name) const;

 private:
  struct Mapped {
    std::string gguf_name;
    int permute_heads = 0;  // q/k: the heads whose rows llama.cpp interleaved; 0: none
  };
  GgufModel() = default;
  std::optional<Mapped> Map(const std::string& hf_name) const;

  std::shared_ptr<GgufFile> file_;
  std::map<std::string, std::string> files_;
  int num_heads_ = 0;
  int num_kv_heads_ = 0;
};

}  // namespace ferry::io
