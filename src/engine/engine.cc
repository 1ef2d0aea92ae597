#include "engine/engine.h"

#include <filesystem>

#include "core/thread_pool.h"
#include "io/safetensors.h"

namespace ferry::engine {

namespace fs = std::filesystem;

Result<std::shared_ptr<Engine>> Engine::Load(const std::string& path, const EngineOptions& options) {
  std::error_code ec;
  if (!fs::exists(path, ec)) return NotFound("model path '" + path + "' does not exist");
  if (!fs::is_directory(path, ec)) {
    return InvalidArgument("'" + path + "' is not a model directory (expected config.json and *.safetensors)");
  }
  SetComputeThreads(options.threads);
  std::shared_ptr<Engine> e(new Engine());
  e->path_ = path;
  FERRY_ASSIGN_OR_RETURN(e->config_, io::LoadModelConfig(path));
  const bool has_tokenizer = fs::exists(fs::path(path) / "tokenizer.json", ec) ||
                             fs::exists(fs::path(path) / "tokenizer.model", ec) ||
                             fs::exists(fs::path(path) / "vocab.txt", ec);
  if (has_tokenizer) {
    auto tok = tokenizer::LoadTokenizer(path);
    if (!tok.ok()) return tok.status().WithContext("loading the tokenizer of '" + path + "'");
    e->tokenizer_ = std::move(tok).value();
  }
  auto ckpt_or = io::Checkpoint::Open(path);
  if (!ckpt_or.ok()) return ckpt_or.status().WithContext("loading '" + path + "'");
  std::shared_ptr<io::Checkpoint> ckpt = std::move(ckpt_or).value();
  e->weights_keepalive_ = ckpt;
  model::WeightSource src{[ckpt](const std::string& name) { return ckpt->Get(name); },
                          [ckpt](const std::string& name) { return ckpt->Has(name); }};
  e->backend_ = backend::MakeCpuBackend();
  if (e->config_.family == io::ModelFamily::kDecoder) {
    auto m = model::DecoderModel::Load(e->config_, src, *e->backend_);
    if (!m.ok()) return m.status().WithContext("loading '" + path + "'");
    e->decoder_ = std::move(m).value();
  } else {
    auto m = model::EncoderModel::Load(e->config_, src, *e->backend_);
    if (!m.ok()) return m.status().WithContext("loading '" + path + "'");
    e->encoder_ = std::move(m).value();
  }
  return e;
}

std::vector<int32_t> Engine::StopIds() const {
  std::vector<int32_t> ids(config_.eos_token_ids.begin(), config_.eos_token_ids.end());
  if (ids.empty() && tokenizer_ != nullptr) ids = tokenizer_->eos_ids();
  return ids;
}

Result<std::vector<int32_t>> Engine::EncodePrompt(std::string_view text) const {
  if (tokenizer_ == nullptr) {
    return FailedPrecondition("model '" + path_ + "' has no tokenizer: pass token ids instead of text");
  }
  FERRY_ASSIGN_OR_RETURN(tokenizer::Encoding enc, tokenizer_->EncodeWithSpecial(text));
  return enc.ids;
}

}  // namespace ferry::engine
