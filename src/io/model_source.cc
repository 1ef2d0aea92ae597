#include "io/model_source.h"

#include <filesystem>

#include "core/mapped_file.h"
#include "io/gguf.h"
#include "io/gguf_model.h"
#include "io/safetensors.h"

namespace ferry::io {

namespace {

namespace fs = std::filesystem;

class DirectorySource : public ModelSource {
 public:
  explicit DirectorySource(std::string dir) : ModelSource(std::move(dir)) {}

  bool is_gguf() const override { return false; }

  Result<std::optional<std::string>> File(const std::string& name) const override {
    std::error_code ec;
    const fs::path p = fs::path(path()) / name;
    if (!fs::is_regular_file(p, ec)) return std::optional<std::string>();
    FERRY_ASSIGN_OR_RETURN(std::string text, ReadFileToString(p.string()));
    return std::optional<std::string>(std::move(text));
  }

  Result<ModelConfig> Config() const override { return LoadModelConfig(path()); }

  Result<TensorReader> Weights() const override {
    FERRY_ASSIGN_OR_RETURN(std::shared_ptr<Checkpoint> ckpt, Checkpoint::Open(path()));
    return TensorReader{[ckpt](const std::string& n) { return ckpt->Get(n); },
                        [ckpt](const std::string& n) { return ckpt->Has(n); }, ckpt, nullptr};
  }

  bool HasTokenizer() const override {
    std::error_code ec;
    const fs::path dir(path());
    return fs::exists(dir / "tokenizer.json", ec) || fs::exists(dir / "tokenizer.model", ec) ||
           fs::exists(dir / "vocab.txt", ec);
  }

  uint64_t WeightBytes() const override {
    uint64_t bytes = 0;
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(path(), ec)) {
      if (entry.path().extension() == ".safetensors") bytes += entry.file_size(ec);
    }
    return bytes;
  }
};

class GgufSource : public ModelSource {
 public:
  GgufSource(std::string path, std::shared_ptr<GgufModel> model) : ModelSource(std::move(path)), model_(model) {}

  bool is_gguf() const override { return true; }

  Result<std::optional<std::string>> File(const std::string& name) const override {
    const auto it = model_->files().find(name);
    if (it == model_->files().end()) return std::optional<std::string>();
    return std::optional<std::string>(it->second);
  }

  Result<ModelConfig> Config() const override {
    // The synthesized config.json already carries generation_config.json's ids.
    Result<ModelConfig> c = ParseModelConfig(model_->files().at("config.json"));
    if (!c.ok()) return c.status().WithContext("config.json synthesized from GGUF '" + path() + "'");
    return c;
  }

  Result<TensorReader> Weights() const override {
    std::shared_ptr<GgufModel> m = model_;
    return TensorReader{[m](const std::string& n) { return m->Get(n); },
                        [m](const std::string& n) { return m->Has(n); }, m,
                        [m](const std::string& n) { return m->GetInt8Blocks(n); }};
  }

  bool HasTokenizer() const override {
    return model_->files().count("tokenizer.json") > 0 || model_->files().count("tokenizer.model") > 0;
  }

  uint64_t WeightBytes() const override { return model_->file().size(); }

 private:
  std::shared_ptr<GgufModel> model_;
};

}  // namespace

bool ModelSource::IsGguf(const std::string& path) {
  std::error_code ec;
  return fs::is_regular_file(path, ec) && GgufFile::LooksLikeGguf(path);
}

Result<std::shared_ptr<ModelSource>> ModelSource::Open(const std::string& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) return std::shared_ptr<ModelSource>(std::make_shared<DirectorySource>(path));
  if (IsGguf(path)) {
    Result<std::shared_ptr<GgufModel>> m = GgufModel::Open(path);
    if (!m.ok()) return m.status().WithContext("loading '" + path + "'");
    return std::shared_ptr<ModelSource>(std::make_shared<GgufSource>(path, std::move(m).value()));
  }
  if (!fs::exists(path, ec)) return NotFound("model path '" + path + "' does not exist");
  return InvalidArgument("'" + path + "' is neither a checkpoint directory (config.json and *.safetensors) nor a "
                         "GGUF file");
}

}  // namespace ferry::io
