#include "engine/engine.h"

#include <chrono>
#include <filesystem>
#include <set>

#include "backend/cpu_backend.h"
#include "backend/cuda_backend.h"
#include "core/mapped_file.h"
#include "core/progress.h"
#include "core/thread_pool.h"
#include "engine/engine_fingerprint.h"
#include "io/engine_file.h"
#include "io/hf_cache.h"
#include "io/model_source.h"
#include "io/safetensors.h"

namespace ferry::engine {

namespace fs = std::filesystem;

namespace {

using SteadyClock = std::chrono::steady_clock;
double MsSince(SteadyClock::time_point t0) {
  return std::chrono::duration<double, std::milli>(SteadyClock::now() - t0).count();
}

// Loads of at least this many bytes show progress (a bar on a terminal, a log line per
// phase elsewhere); smaller ones are over before anyone would look.
constexpr uint64_t kProgressMinBytes = 256ull << 20;

std::unique_ptr<Progress> MaybeProgress(const std::string& path, uint64_t bytes) {
  if (bytes < kProgressMinBytes) return nullptr;
  return std::make_unique<Progress>("loading " + path, Progress::StderrIsTerminal());
}

// A directory's tokenizer loads from the directory; a GGUF file's from the files its metadata
// stands for (`settings`: the model's tokenizer_config.json and the like).
Result<std::unique_ptr<tokenizer::Tokenizer>> LoadTokenizerFrom(const io::ModelSource& source,
                                                                 std::map<std::string, std::string> settings) {
  if (!source.is_gguf()) return tokenizer::LoadTokenizer(source.path());
  for (const char* name : {"tokenizer.json", "tokenizer.model"}) {
    FERRY_ASSIGN_OR_RETURN(std::optional<std::string> text, source.File(name));
    if (text) settings[name] = std::move(*text);
  }
  return tokenizer::LoadTokenizerFromFiles(settings);
}

}  // namespace

Result<std::unique_ptr<backend::Backend>> MakeBackend(const EngineOptions& options) {
  if (options.device.is_cpu()) {
    backend::CpuBackendOptions co;
    co.threads = options.threads;
    if (options.cpu_activations != DType::kF32 && options.cpu_activations != DType::kBF16) {
      return InvalidArgument("the CPU activation dtype must be f32 or bf16, got " +
                             std::string(DTypeName(options.cpu_activations)));
    }
    co.linear.bf16_activations = options.cpu_activations == DType::kBF16;
    return backend::MakeCpuBackend(co);
  }
  backend::CudaBackendOptions co;
  co.device = options.device.index;
  co.activations = options.cuda_activations;
  co.kv_cache = options.cuda_kv_cache.value_or(options.cuda_activations);
  if (co.kv_cache != DType::kBF16 && co.kv_cache != DType::kF16 && co.kv_cache != DType::kF32 &&
      co.kv_cache != DType::kF8E4M3) {
    return InvalidArgument("the KV cache dtype must be bf16, f16, f32 or fp8, got " +
                           std::string(DTypeName(co.kv_cache)));
  }
  return backend::MakeCudaBackend(co);
}

Result<std::shared_ptr<Engine>> Engine::Load(const std::string& spec, const EngineOptions& options) {
  // A Hub id (ORG/REPO[@REVISION]) that is not a local path loads from the Hugging Face cache.
  FERRY_ASSIGN_OR_RETURN(const std::string path, io::ResolveModelPath(spec));
  std::error_code ec;
  if (!fs::exists(path, ec)) return NotFound("model path '" + path + "' does not exist");
  if (fs::is_regular_file(path, ec) && io::EngineFile::LooksLikeEngine(path)) return LoadEngineFile(path, options);
  if (!fs::is_directory(path, ec) && !io::ModelSource::IsGguf(path)) {
    return InvalidArgument("'" + path + "' is neither a model directory (config.json and *.safetensors), a GGUF " +
                           "file nor a ferry engine file");
  }
  SetComputeThreads(options.threads);
  FERRY_ASSIGN_OR_RETURN(std::shared_ptr<io::ModelSource> source, io::ModelSource::Open(path));
  std::shared_ptr<Engine> e(new Engine());
  e->path_ = path;
  FERRY_ASSIGN_OR_RETURN(e->config_, source->Config());
  std::map<std::string, std::string> settings;
  for (const char* name : {"tokenizer_config.json", "special_tokens_map.json", "generation_config.json",
                           "chat_template.jinja"}) {
    FERRY_ASSIGN_OR_RETURN(std::optional<std::string> text, source->File(name));
    if (text) settings[name] = std::move(*text);
  }
  if (source->HasTokenizer()) {
    auto tok = LoadTokenizerFrom(*source, settings);
    if (!tok.ok()) return tok.status().WithContext("loading the tokenizer of '" + path + "'");
    e->SetTokenizer(std::move(tok).value());
  }
  auto tc = tokenizer::ParseTokenizerConfig(settings);
  if (!tc.ok()) return tc.status().WithContext("loading '" + path + "'");
  e->tokenizer_config_ = std::move(tc).value();
  {
    auto read = [&source](const std::string& name) -> std::optional<std::string> {
      auto text = source->File(name);
      return text.ok() ? std::move(text).value() : std::nullopt;
    };
    auto pooling = io::ParseSentencePooling(read(io::kModulesFile), read);
    if (!pooling.ok()) return pooling.status().WithContext("'" + path + "'");
    e->sentence_pooling_ = std::move(pooling).value();
  }
  auto weights_or = source->Weights();
  if (!weights_or.ok()) return weights_or.status().WithContext("loading '" + path + "'");
  io::TensorReader weights = std::move(weights_or).value();
  e->weights_keepalive_ = weights.keepalive;
  const uint64_t weight_bytes = source->WeightBytes();
  std::unique_ptr<Progress> progress = MaybeProgress(path, weight_bytes);
  LoadStats& stats = e->load_stats_;
  // Every weight the model reads counts once (a tied head reads the embedding table again).
  std::set<std::string> counted;
  model::WeightSource src{[weights, &stats, &progress, &counted](const std::string& name) -> Result<Tensor> {
                            Result<Tensor> t = weights.get(name);
                            if (t.ok() && counted.insert(name).second) {
                              stats.weight_bytes += t->nbytes();
                              if (progress) progress->Add(t->nbytes());
                            }
                            return t;
                          },
                          weights.has};
  if (weights.int8_blocks) {
    src.int8_blocks = [weights, &stats, &progress,
                       &counted](const std::string& name) -> Result<std::optional<io::Int8Blocks>> {
      Result<std::optional<io::Int8Blocks>> b = weights.int8_blocks(name);
      if (b.ok() && b->has_value() && counted.insert(name).second) {
        stats.weight_bytes += static_cast<uint64_t>((*b)->stored_bytes);
        if (progress) progress->Add(static_cast<uint64_t>((*b)->stored_bytes));
      }
      return b;
    };
  }
  if (!e->config_.quantization.method.empty()) {
    src = model::DequantizingSource(std::move(src), e->config_.quantization, model::DequantizedDType(e->config_));
  }
  FERRY_ASSIGN_OR_RETURN(e->backend_, MakeBackend(options));
  if (progress) progress->Phase("weights", weight_bytes);
  auto t0 = SteadyClock::now();
  // A pre-quantized checkpoint keeps its precision on a GPU that has the kernels: 4-bit GPTQ /
  // AWQ on their own grid (int4 weight-only), float8 as e4m3 weights with per-channel scales
  // (fp8 GEMMs, compute capability 8.9+). The layers it holds unquantized keep their floats.
  // Elsewhere, and for 8-bit GPTQ, the dequantized weights run as they are.
  model::LoadOptions load_options;
  const io::QuantizationConfig& quant = e->config_.quantization;
  if (options.device.is_cuda() && quant.packed_int() && quant.bits == 4) {
    load_options.linear_format = backend::WeightFormat::kInt4;
    load_options.keep_unquantized_layers = true;
  } else if (options.device.is_cuda() && !quant.method.empty() && !quant.packed_int()) {
    const Result<backend::CudaDeviceInfo> gpu = backend::QueryCudaDevice(options.device.index);
    if (gpu.ok() && gpu->cc_major * 10 + gpu->cc_minor >= 89) {
      load_options.linear_format = backend::WeightFormat::kFp8;
      load_options.keep_unquantized_layers = true;
    }
  }
  if (e->config_.family == io::ModelFamily::kDecoder) {
    auto m = model::DecoderModel::Load(e->config_, src, *e->backend_, load_options);
    if (!m.ok()) return m.status().WithContext("loading '" + path + "'");
    e->decoder_ = std::move(m).value();
  } else {
    auto m = model::EncoderModel::Load(e->config_, src, *e->backend_, load_options);
    if (!m.ok()) return m.status().WithContext("loading '" + path + "'");
    e->encoder_ = std::move(m).value();
  }
  stats.weights_ms = MsSince(t0);
  if (progress) options.device.is_cpu() ? progress->EndPhase() : progress->Phase("last copies", 0);
  t0 = SteadyClock::now();
  FERRY_RETURN_IF_ERROR(e->backend_->FinishLoading().WithContext("loading '" + path + "'"));
  stats.finish_ms = MsSince(t0);
  return e;
}

namespace {

// The embedded tokenizer/config files of an engine file, by name.
Result<std::map<std::string, std::string>> EmbeddedFiles(const io::EngineFile& file, bool verify) {
  const io::EngineManifest& m = file.manifest();
  std::map<std::string, std::string> files = m.files;
  for (const auto& [name, ref] : m.binary_files) {
    FERRY_ASSIGN_OR_RETURN(std::string_view bytes, file.BlobBytes(ref, name, verify));
    files[name] = std::string(bytes);
  }
  return files;
}

}  // namespace

Result<std::unique_ptr<tokenizer::Tokenizer>> LoadTokenizerFor(const std::string& spec) {
  FERRY_ASSIGN_OR_RETURN(const std::string path, io::ResolveModelPath(spec));
  std::error_code ec;
  if (fs::is_regular_file(path, ec) && io::EngineFile::LooksLikeEngine(path)) {
    FERRY_ASSIGN_OR_RETURN(std::shared_ptr<io::EngineFile> file, io::EngineFile::Open(path));
    FERRY_ASSIGN_OR_RETURN(auto files, EmbeddedFiles(*file, true));
    return tokenizer::LoadTokenizerFromFiles(files);
  }
  if (io::ModelSource::IsGguf(path)) {
    FERRY_ASSIGN_OR_RETURN(std::shared_ptr<io::ModelSource> source, io::ModelSource::Open(path));
    std::map<std::string, std::string> settings;
    for (const char* name : {"tokenizer_config.json", "generation_config.json"}) {
      FERRY_ASSIGN_OR_RETURN(std::optional<std::string> text, source->File(name));
      if (text) settings[name] = std::move(*text);
    }
    return LoadTokenizerFrom(*source, std::move(settings));
  }
  return tokenizer::LoadTokenizer(path);
}

Result<std::shared_ptr<Engine>> Engine::LoadEngineFile(const std::string& path, const EngineOptions& options) {
  SetComputeThreads(options.threads);
  // Open validates the manifest and every blob's place in the file; blobs' checksums are
  // checked below as each is adopted (options.verify).
  const FileLoad how = options.device.is_cpu() && !options.map_weights ? FileLoad::kHugePageCopy : FileLoad::kMap;
  FERRY_ASSIGN_OR_RETURN(std::shared_ptr<io::EngineFile> file, io::EngineFile::Open(path, how));
  const std::string where = "engine file '" + path + "'";
  const io::EngineFingerprint& fingerprint = file->fingerprint();
  FERRY_RETURN_IF_ERROR(CheckEngineDevice(fingerprint, options.device).WithContext(where));
  const io::EngineManifest& m = file->manifest();
  std::shared_ptr<Engine> e(new Engine());
  e->path_ = path;
  e->build_info_ = m.build;
  e->weights_keepalive_ = file;
  auto config = io::ParseModelConfig(m.files.at("config.json"));
  if (!config.ok()) return config.status().WithContext(where);
  e->config_ = std::move(config).value();
  // The manifest's stop ids include generation_config.json's, which config.json alone lacks.
  e->config_.eos_token_ids = m.model.eos_token_ids;

  // Tokenizer from the embedded files.
  FERRY_ASSIGN_OR_RETURN(auto files, EmbeddedFiles(*file, options.verify));
  if (files.count("tokenizer.json") || files.count("tokenizer.model")) {
    auto tok = tokenizer::LoadTokenizerFromFiles(files);
    if (!tok.ok()) return tok.status().WithContext(where + ": embedded tokenizer");
    e->SetTokenizer(std::move(tok).value());
  }
  auto tc = tokenizer::ParseTokenizerConfig(files);
  if (!tc.ok()) return tc.status().WithContext(where);
  e->tokenizer_config_ = std::move(tc).value();

  {
    auto read = [&files](const std::string& name) -> std::optional<std::string> {
      auto it = files.find(name);
      return it == files.end() ? std::nullopt : std::optional<std::string>(it->second);
    };
    auto pooling = io::ParseSentencePooling(read(io::kModulesFile), read);
    if (!pooling.ok()) return pooling.status().WithContext(where);
    e->sentence_pooling_ = std::move(pooling).value();
  }

  // A GPU engine's weights are stored in the activation dtype it was built for.
  EngineOptions backend_options = options;
  if (m.build.activations) backend_options.cuda_activations = *m.build.activations;
  auto backend = MakeBackend(backend_options);
  if (!backend.ok()) {
    if (backend.status().code() != StatusCode::kUnavailable) return backend.status().WithContext(where);
    return backend.status().WithContext(where + ": engine was built for a GPU (" + fingerprint.arch + ")");
  }
  e->backend_ = std::move(backend).value();
  backend::Backend& be = *e->backend_;
  FERRY_RETURN_IF_ERROR(be.CheckFingerprint(fingerprint).WithContext(where));
  bool verify = options.verify;
  std::unique_ptr<Progress> progress = MaybeProgress(path, file->size());
  LoadStats& stats = e->load_stats_;
  auto t0 = SteadyClock::now();
  if (verify && !options.device.is_cpu()) {
    // On a GPU every blob is copied anyway: check all the checksums first, on every core,
    // instead of one blob at a time on the loading thread. (The CPU keeps checking each blob
    // as it adopts it, in place.)
    if (progress) progress->Phase("verify", file->size());
    FERRY_RETURN_IF_ERROR(file->VerifyAll());
    if (progress) progress->Add(file->size());
    verify = false;
    stats.verify_ms = MsSince(t0);
  }
  model::PreparedSource src;
  src.tensor = [file, &m, verify, &stats, &progress](const std::string& key) -> Result<Tensor> {
    const auto it = m.tensors.find(key);
    if (it == m.tensors.end()) return DataLoss("engine has no tensor '" + key + "'");
    Result<Tensor> t = file->Blob(it->second, key, verify);
    if (t.ok()) {
      stats.weight_bytes += t->nbytes();
      if (progress) progress->Add(t->nbytes());
    }
    return t;
  };
  src.linear = [file, &m, &be, verify, &stats, &progress](const std::string& key) -> Result<backend::LinearWeight> {
    const auto it = m.linears.find(key);
    if (it == m.linears.end()) return NotFound("engine has no linear weight '" + key + "'");
    const io::StoredLinear& l = it->second;
    backend::SerializedLinear s;
    s.layout_json = l.layout.dump();
    for (const io::StoredTensor& b : l.blobs) {
      FERRY_ASSIGN_OR_RETURN(Tensor t, file->Blob(b, key, verify));
      stats.weight_bytes += t.nbytes();
      if (progress) progress->Add(t.nbytes());
      s.blobs.push_back(std::move(t));
    }
    auto w = be.DeserializeLinear(s);
    if (!w.ok()) return w.status().WithContext("engine linear weight '" + key + "'");
    if (l.small_m_max) w->small_m_max = *l.small_m_max;
    return w;
  };
  if (progress) progress->Phase("weights", file->size());
  t0 = SteadyClock::now();
  // The backends read their layout JSON with checked accessors; this only keeps a missed
  // case from escaping as an exception.
  try {
    if (e->config_.family == io::ModelFamily::kDecoder) {
      auto d = model::DecoderModel::LoadPrepared(e->config_, src, be);
      if (!d.ok()) return d.status().WithContext(where);
      e->decoder_ = std::move(d).value();
    } else {
      auto enc = model::EncoderModel::LoadPrepared(e->config_, src, be);
      if (!enc.ok()) return enc.status().WithContext(where);
      e->encoder_ = std::move(enc).value();
    }
  } catch (const nlohmann::json::exception& ex) {
    return DataLoss(where + " is corrupt: " + ex.what());
  }
  stats.weights_ms = MsSince(t0);
  if (progress) options.device.is_cpu() ? progress->EndPhase() : progress->Phase("last copies", 0);
  t0 = SteadyClock::now();
  FERRY_RETURN_IF_ERROR(be.FinishLoading().WithContext(where));
  stats.finish_ms = MsSince(t0);
  return e;
}

std::vector<int32_t> Engine::StopIds() const {
  std::vector<int32_t> ids(config_.eos_token_ids.begin(), config_.eos_token_ids.end());
  if (ids.empty() && tokenizer_ != nullptr) ids = tokenizer_->eos_ids();
  return ids;
}

void Engine::SetTokenizer(std::unique_ptr<tokenizer::Tokenizer> tok) {
  tokenizer_ = std::move(tok);
  max_token_bytes_ = 1;
  std::string bytes;
  for (int32_t id = 0; id < tokenizer_->vocab_size(); ++id) {
    bytes.clear();
    tokenizer_->AppendTokenBytes(id, /*first=*/false, &bytes);
    // Special tokens count by their text: "<|endoftext|>" in a prompt is one token.
    const size_t n = std::max(bytes.size(), tokenizer_->IdToToken(id).size());
    max_token_bytes_ = std::max(max_token_bytes_, n);
  }
}

bool Engine::TextSurelyLongerThan(std::string_view text, int64_t tokens) const {
  if (tokenizer_ == nullptr) return false;
  // Each token stands for at most max_token_bytes_ bytes of text. Normalizers can shrink
  // text (NFKC, accent stripping, whitespace cleanup), so allow 4x before being sure.
  return static_cast<double>(text.size()) > 4.0 * static_cast<double>(max_token_bytes_) * static_cast<double>(tokens);
}

Result<std::vector<int32_t>> Engine::EncodePrompt(std::string_view text) const {
  if (tokenizer_ == nullptr) {
    return FailedPrecondition("model '" + path_ + "' has no tokenizer: pass token ids instead of text");
  }
  FERRY_ASSIGN_OR_RETURN(tokenizer::Encoding enc, tokenizer_->EncodeWithSpecial(text));
  return enc.ids;
}

}  // namespace ferry::engine
