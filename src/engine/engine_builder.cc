#include "engine/engine_builder.h"


#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <map>
#include <mutex>
#include <set>
#include <string_view>

#include "core/logging.h"
#include "core/mapped_file.h"
#include "core/progress.h"
#include "core/thread_pool.h"
#include "core/version.h"
#include "engine/default_calibration.h"
#include "engine/engine.h"
#include "engine/encoder_runner.h"
#include "engine/engine_fingerprint.h"
#include "engine/kv_cache.h"
#include "engine/step_executor.h"
#include "io/engine_file.h"
#include "io/hf_cache.h"
#include "io/model_config.h"
#include "io/model_source.h"
#include "io/safetensors.h"
#include "tokenizer/tokenizer.h"

namespace ferry::engine {

namespace fs = std::filesystem;

namespace {

// Text tokenizer/config files embedded verbatim in the manifest; binary ones as blobs.
const char* const kTextFiles[] = {"tokenizer.json",         "tokenizer_config.json", "special_tokens_map.json",
                                  "generation_config.json", "vocab.txt",             "config.json",
                                  "chat_template.jinja"};
const char* const kBinaryFiles[] = {"tokenizer.model"};

// What a precision means for the weights: how linears are stored, the dtype of the other
// tables, and whether int8 calibration runs first.
struct PrecisionPlan {
  backend::WeightFormat format;
  std::optional<DType> table_dtype;
  bool calibrate;
};

Result<PrecisionPlan> PlanPrecision(Precision p, const DeviceSpec& device) {
  switch (p) {
    case Precision::kFp32: return PrecisionPlan{backend::WeightFormat::kF32, DType::kF32, false};
    case Precision::kBf16: return PrecisionPlan{backend::WeightFormat::kBF16, DType::kBF16, false};
    case Precision::kFp16: return PrecisionPlan{backend::WeightFormat::kF16, DType::kF16, false};
    case Precision::kInt8WeightOnly: return PrecisionPlan{backend::WeightFormat::kInt8, DType::kBF16, false};
    case Precision::kInt8: return PrecisionPlan{backend::WeightFormat::kInt8W8A8, DType::kBF16, true};
    case Precision::kFp8:
      // e4m3 weights with per-channel scales; activations are scaled per token at run time,
      // so fp8 needs no calibration pass.
      if (device.is_cuda()) return PrecisionPlan{backend::WeightFormat::kFp8, DType::kBF16, false};
      return InvalidArgument("precision fp8 runs on GPUs only (sm_89+): build it with --device cuda");
    case Precision::kInt4WeightOnly: return PrecisionPlan{backend::WeightFormat::kInt4, DType::kBF16, false};
  }
  return InvalidArgument("unknown precision");
}

// The activation (and KV cache) dtype a GPU engine of this precision runs with.
DType CudaActivations(Precision precision) {
  if (precision == Precision::kFp32) return DType::kF32;
  if (precision == Precision::kFp16) return DType::kF16;
  return DType::kBF16;
}

// Calibration documents: JSONL with "text" fields, or plain text (one document a line).
// `name` (a path, or the built-in text's name) is for messages.
Result<std::vector<std::string>> ParseCalibration(std::string_view text, const std::string& name) {
  std::vector<std::string> docs;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    std::string line(text.substr(start, end - start));
    start = end + 1;
    if (line.empty()) continue;
    if (line[0] == '{') {
      nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
      if (j.is_discarded() || !j.contains("text") || !j["text"].is_string()) {
        return InvalidArgument("calibration file '" + name + "': a JSON line without a \"text\" string");
      }
      docs.push_back(j["text"].get<std::string>());
    } else {
      docs.push_back(std::move(line));
    }
  }
  if (docs.empty()) return InvalidArgument("calibration file '" + name + "' is empty");
  return docs;
}

// The documents of `path`, or of the built-in default text when `path` is empty.
Result<std::vector<std::string>> ReadCalibration(const std::string& path) {
  if (path.empty()) return ParseCalibration(DefaultCalibrationText(), std::string(kDefaultCalibrationName));
  FERRY_ASSIGN_OR_RETURN(std::string text, ReadFileToString(path));
  return ParseCalibration(text, path);
}

// Per-input-channel max |x| of every linear layer's input over the calibration text.
struct ActivationStats {
  std::mutex mu;
  std::map<std::string, std::vector<float>> absmax;  // GUARDED_BY(mu)
  void Observe(const std::string& key, const Tensor& x) {
    const int64_t rows = x.dim(0), cols = x.dim(1);
    std::lock_guard<std::mutex> lock(mu);
    std::vector<float>& m = absmax[key];
    if (m.empty()) m.assign(cols, 0.0f);
    const float* p = x.data<float>();
    // Columns split across the cores; each thread walks every row of its own columns.
    ParallelFor(cols, 64, [&](int64_t c0, int64_t c1) {
      for (int64_t r = 0; r < rows; ++r) {
        const float* row = p + r * cols;
        for (int64_t c = c0; c < c1; ++c) m[c] = std::max(m[c], std::fabs(row[c]));
      }
    });
  }
};

// Per-column max |w| of a [n, k] weight in any float dtype, without a float copy of it:
// rows split across the cores, each converting one row at a time into its own buffer.
std::vector<float> ColumnAbsMax(const Tensor& weight) {
  const Tensor w = weight.is_contiguous() ? weight : weight.Clone();
  const int64_t n = w.dim(0), k = w.dim(1);
  const size_t row_bytes = static_cast<size_t>(k) * DTypeSize(w.dtype());
  const auto* base = static_cast<const uint8_t*>(w.raw());
  std::mutex mu;
  std::vector<float> out(k, 0.0f);
  ParallelFor(n, 16, [&](int64_t r0, int64_t r1) {
    std::vector<float> row(k), local(k, 0.0f);
    for (int64_t r = r0; r < r1; ++r) {
      ConvertToF32(w.dtype(), base + r * row_bytes, row.data(), k);
      for (int64_t c = 0; c < k; ++c) local[c] = std::max(local[c], std::fabs(row[c]));
    }
    std::lock_guard<std::mutex> lock(mu);
    for (int64_t c = 0; c < k; ++c) out[c] = std::max(out[c], local[c]);
  });
  return out;
}

Result<io::CalibrationInfo> Calibrate(const std::string& model_dir, const BuildOptions& o, int max_seq_len,
                                      std::map<std::string, Tensor>& smooth) {
  const std::string path = o.calibration_path.empty() ? std::string(kDefaultCalibrationName) : o.calibration_path;
  FERRY_ASSIGN_OR_RETURN(std::vector<std::string> docs, ReadCalibration(o.calibration_path));
  FERRY_ASSIGN_OR_RETURN(std::shared_ptr<Engine> fp32, Engine::Load(model_dir, {.threads = o.threads}));
  // A checkpoint without a tokenizer (e.g. random weights for benchmarks) is calibrated on
  // deterministic pseudo-random token ids, one document per calibration text.
  const bool synthetic = fp32->tokenizer() == nullptr;
  auto encode = [&](const std::string& d, bool special) -> Result<tokenizer::Encoding> {
    if (!synthetic) {
      if (special) return fp32->tokenizer()->EncodeWithSpecial(d);
      FERRY_ASSIGN_OR_RETURN(std::vector<int32_t> ids, fp32->EncodePrompt(d));
      return tokenizer::Encoding{ids, {}};
    }
    tokenizer::Encoding e;
    const int vocab = fp32->config().vocab_size;
    uint64_t h = std::hash<std::string>{}(d);
    for (size_t i = 0; i < std::max<size_t>(d.size() / 4, 1); ++i) {
      h = h * 6364136223846793005ull + 1442695040888963407ull;
      e.ids.push_back(static_cast<int32_t>((h >> 33) % static_cast<uint64_t>(vocab)));
    }
    e.type_ids.assign(e.ids.size(), 0);
    return e;
  };
  ActivationStats stats;
  auto observer = [&stats](const std::string& key, const Tensor& x) { stats.Observe(key, x); };
  int64_t tokens = 0;
  int used_docs = 0;
  if (fp32->decoder() != nullptr) {
    fp32->decoder()->SetLinearInputObserver(observer);
    KvCacheConfig kc;
    const io::ModelConfig& c = fp32->config();
    kc.num_layers = c.num_layers;
    kc.num_kv_heads = c.num_kv_heads;
    kc.head_dim = c.head_dim;
    kc.num_blocks = (max_seq_len + kc.block_tokens - 1) / kc.block_tokens;
    FERRY_ASSIGN_OR_RETURN(auto cache, KvCache::Create(kc, fp32->backend()));
    StepExecutor ex(*fp32->decoder(), *cache);
    for (const std::string& d : docs) {
      if (tokens >= o.calibration_tokens) break;
      FERRY_ASSIGN_OR_RETURN(tokenizer::Encoding enc, encode(d, false));
      std::vector<int32_t>& ids = enc.ids;
      // The budget is exact: the last document is cut where the budget ends.
      const int64_t room = std::min<int64_t>(max_seq_len, o.calibration_tokens - tokens);
      if (static_cast<int64_t>(ids.size()) > room) ids.resize(room);
      if (ids.empty()) continue;
      FERRY_RETURN_IF_ERROR(cache->Reserve(1, static_cast<int32_t>(ids.size())));
      SeqStep step;
      step.seq_id = 1;
      step.tokens = ids;
      FERRY_ASSIGN_OR_RETURN(Tensor logits, ex.Logits({step}));
      cache->Free(1);
      tokens += static_cast<int64_t>(ids.size());
      ++used_docs;
    }
    fp32->decoder()->SetLinearInputObserver(nullptr);
  } else {
    fp32->encoder()->SetLinearInputObserver(observer);
    for (const std::string& d : docs) {
      if (tokens >= o.calibration_tokens) break;
      FERRY_ASSIGN_OR_RETURN(tokenizer::Encoding enc, encode(d, true));
      const int64_t limit =
          std::min<int64_t>(fp32->config().max_position_embeddings, o.calibration_tokens - tokens);
      if (static_cast<int64_t>(enc.ids.size()) > limit) {
        enc.ids.resize(limit);
        enc.type_ids.resize(limit);
      }
      if (enc.type_ids.empty()) enc.type_ids.assign(enc.ids.size(), 0);
      FERRY_ASSIGN_OR_RETURN(Tensor emb, Embed(*fp32, {EncodedInput{enc.ids, enc.type_ids}}, Pooling::kCls, false));
      tokens += static_cast<int64_t>(enc.ids.size());
      ++used_docs;
    }
    fp32->encoder()->SetLinearInputObserver(nullptr);
  }
  // SmoothQuant: s_j = max|X_j|^alpha / max|W_:,j|^(1-alpha) moves activation outliers into
  // the weights, where per-channel scales absorb them.
  Status visit_status = Status::Ok();
  model::WeightVisitor visitor{
      [](const std::string&, const Tensor&) { return Status::Ok(); },
      [&](const std::string& key, const backend::LinearWeight& w) -> Status {
        auto it = stats.absmax.find(key);
        if (it == stats.absmax.end()) return Status::Ok();
        if (!w.weight.defined()) return Internal("calibration model dropped the weight of '" + key + "'");
        const int64_t k = w.weight.dim(1);
        const std::vector<float> wmax = ColumnAbsMax(w.weight);
        Tensor s = Tensor::Empty({k}, DType::kF32);
        for (int64_t c = 0; c < k; ++c) {
          const float a = std::max(it->second[c], 1e-5f), b = std::max(wmax[c], 1e-5f);
          s.data<float>()[c] = std::clamp(std::pow(a, o.smooth_alpha) / std::pow(b, 1.0f - o.smooth_alpha), 1e-2f,
                                          1e2f);
        }
        smooth[key] = s;
        return Status::Ok();
      }};
  if (fp32->decoder() != nullptr) {
    visit_status = fp32->decoder()->Visit(visitor);
  } else {
    visit_status = fp32->encoder()->Visit(visitor);
  }
  FERRY_RETURN_IF_ERROR(visit_status);
  return io::CalibrationInfo{path,  used_docs, tokens, o.smooth_alpha, static_cast<int>(smooth.size()),
                             synthetic};
}

// Times each linear's kernel choices on the backend (weights of one shape once) and
// returns the manifest's "tuned" section: the backend's description of its choice and one
// report per distinct shape; null when the backend tunes nothing.
Result<nlohmann::json> TuneLinears(backend::Backend& be, const std::map<std::string, backend::LinearWeight*>& linears) {
  nlohmann::json shapes = nlohmann::json::array();
  for (const auto& [key, w] : linears) {
    FERRY_ASSIGN_OR_RETURN(const std::string report, be.TuneLinear(*w));
    if (report.empty()) continue;
    nlohmann::json parsed = nlohmann::json::parse(report, nullptr, false);
    if (parsed.is_discarded()) return Internal(be.Name() + " reported its tuning of '" + key + "' in invalid JSON");
    shapes.push_back(std::move(parsed));
  }
  const std::string description = be.DescribeTuning();
  if (description.empty() && shapes.empty()) return nlohmann::json();
  nlohmann::json tuned =
      description.empty() ? nlohmann::json::object() : nlohmann::json::parse(description, nullptr, false);
  if (!tuned.is_object()) return Internal(be.Name() + " described its tuning in invalid JSON");
  tuned["linear_shapes"] = std::move(shapes);
  return tuned;
}

}  // namespace


Result<BuildReport> BuildEngine(const std::string& model_spec, const std::string& output_path, const BuildOptions& o) {
  const auto t0 = std::chrono::steady_clock::now();
  // A Hub id builds from its snapshot in the Hugging Face cache.
  FERRY_ASSIGN_OR_RETURN(const std::string model_dir, io::ResolveModelPath(model_spec));
  FERRY_ASSIGN_OR_RETURN(const PrecisionPlan plan, PlanPrecision(o.precision, o.device));
  // The backend and its fingerprint first: a GPU build fails here, before any work, when
  // there is no GPU. A GPU engine's weights are laid out (and tuned) by the CUDA backend
  // itself.
  EngineOptions eo;
  eo.device = o.device;
  eo.cuda_activations = CudaActivations(o.precision);
  FERRY_ASSIGN_OR_RETURN(std::unique_ptr<backend::Backend> be, MakeBackend(eo));
  FERRY_ASSIGN_OR_RETURN(const io::EngineFingerprint fingerprint, CurrentFingerprint(*be));
  std::error_code ec;
  if (!fs::is_directory(model_dir, ec) && !io::ModelSource::IsGguf(model_dir)) {
    return InvalidArgument("'" + model_dir + "' is neither a checkpoint directory nor a GGUF file");
  }
  FERRY_ASSIGN_OR_RETURN(std::shared_ptr<io::ModelSource> source, io::ModelSource::Open(model_dir));
  FERRY_ASSIGN_OR_RETURN(io::ModelConfig config, source->Config());
  const int model_ctx = config.max_position_embeddings;
  const int max_seq_len = o.max_seq_len > 0 ? std::min(o.max_seq_len, model_ctx) : std::min(model_ctx, 4096);
  const int max_batch_tokens = o.max_batch_tokens > 0 ? o.max_batch_tokens : max_seq_len;
  SetComputeThreads(o.threads);

  BuildReport report;
  std::map<std::string, Tensor> smooth;
  Progress* progress = o.progress;
  if (plan.calibrate) {
    if (o.calibration_tokens < 1) {
      return InvalidArgument("calibration tokens must be at least 1 (got " + std::to_string(o.calibration_tokens) + ")");
    }
    if (progress) progress->Phase("calibrate", 0);
    FERRY_ASSIGN_OR_RETURN(report.calibration, Calibrate(model_dir, o, max_seq_len, smooth));
  }
  FERRY_ASSIGN_OR_RETURN(const io::TensorReader weights, source->Weights());
  if (progress) {
    const uint64_t bytes = source->WeightBytes();
    const bool quantize = plan.format == backend::WeightFormat::kInt8 ||
                          plan.format == backend::WeightFormat::kInt8W8A8 || plan.format == backend::WeightFormat::kFp8 ||
                          plan.format == backend::WeightFormat::kInt4;
    progress->Phase(quantize ? "read and quantize" : "read", bytes);
  }
  std::set<std::string> counted;  // a tied head reads the embedding table again
  model::WeightSource src{[weights, progress, &counted](const std::string& n) -> Result<Tensor> {
                            Result<Tensor> t = weights.get(n);
                            if (t.ok() && progress && counted.insert(n).second) progress->Add(t->nbytes());
                            return t;
                          },
                          weights.has};
  if (weights.int8_blocks) {
    src.int8_blocks = [weights, progress, &counted](const std::string& n) -> Result<std::optional<io::Int8Blocks>> {
      Result<std::optional<io::Int8Blocks>> b = weights.int8_blocks(n);
      if (b.ok() && b->has_value() && progress && counted.insert(n).second) {
        progress->Add(static_cast<uint64_t>((*b)->stored_bytes));
      }
      return b;
    };
  }
  if (!config.quantization.method.empty()) {
    src = model::DequantizingSource(std::move(src), config.quantization, model::DequantizedDType(config));
  }
  model::LoadOptions lo;
  lo.linear_format = plan.format;
  lo.table_dtype = plan.table_dtype;
  lo.smooth = &smooth;
  lo.fp8_fast_accumulation = o.fp8_fast_accumulation;
  std::unique_ptr<model::DecoderModel> decoder;
  std::unique_ptr<model::EncoderModel> encoder;
  if (config.family == io::ModelFamily::kDecoder) {
    FERRY_ASSIGN_OR_RETURN(decoder, model::DecoderModel::Load(config, src, *be, lo));
  } else {
    FERRY_ASSIGN_OR_RETURN(encoder, model::EncoderModel::Load(config, src, *be, lo));
  }

  io::EngineManifest manifest;
  // Tuned kernel choices per weight shape.
  if (o.tune) {
    std::map<std::string, backend::LinearWeight*> all_linears;
    model::WeightVisitor collect{[](const std::string&, const Tensor&) { return Status::Ok(); },
                                 [&](const std::string& key, const backend::LinearWeight& w) {
                                   all_linears[key] = const_cast<backend::LinearWeight*>(&w);
                                   return Status::Ok();
                                 }};
    FERRY_RETURN_IF_ERROR(decoder ? decoder->Visit(collect) : encoder->Visit(collect));
    if (progress) progress->Phase("tune", 0);
    FERRY_ASSIGN_OR_RETURN(manifest.tuned, TuneLinears(*be, all_linears));
  }
  if (progress) progress->Phase("write", 0);

  FERRY_ASSIGN_OR_RETURN(auto writer, io::EngineWriter::Create(output_path, fingerprint));
  auto add_blob = [&](const std::string& name, const void* data, size_t bytes) -> Result<io::BlobRef> {
    FERRY_ASSIGN_OR_RETURN(io::BlobRef ref, writer->AddBlob(data, bytes));
    manifest.blobs_index.push_back({name, ref});
    report.weight_bytes += bytes;
    if (progress) progress->Add(bytes);
    return ref;
  };
  model::WeightVisitor visitor{
      [&](const std::string& key, const Tensor& t) -> Status {
        Tensor c = t.is_contiguous() ? t : t.Clone();
        FERRY_ASSIGN_OR_RETURN(io::BlobRef ref, add_blob(key, c.raw(), c.nbytes()));
        manifest.tensors[key] = io::StoredTensor{c.dtype(), c.shape(), ref};
        return Status::Ok();
      },
      [&](const std::string& key, const backend::LinearWeight& w) -> Status {
        FERRY_ASSIGN_OR_RETURN(backend::SerializedLinear s, be->SerializeLinear(w));
        io::StoredLinear stored;
        stored.layout = nlohmann::json::parse(s.layout_json, nullptr, false);
        if (!stored.layout.is_object()) return Internal("backend wrote an invalid layout for '" + key + "'");
        for (size_t i = 0; i < s.blobs.size(); ++i) {
          const Tensor& b = s.blobs[i];
          FERRY_ASSIGN_OR_RETURN(io::BlobRef ref, add_blob(key + "#" + std::to_string(i), b.raw(), b.nbytes()));
          stored.blobs.push_back(io::StoredTensor{b.dtype(), b.shape(), ref});
        }
        stored.small_m_max = w.small_m_max;
        manifest.linears[key] = std::move(stored);
        return Status::Ok();
      }};
  FERRY_RETURN_IF_ERROR(decoder ? decoder->Visit(visitor) : encoder->Visit(visitor));

  // The files travel with the engine: a GGUF file's are the ones its metadata stands for.
  for (const char* name : kTextFiles) {
    FERRY_ASSIGN_OR_RETURN(std::optional<std::string> text, source->File(name));
    if (text) manifest.files[name] = std::move(*text);
  }
  // sentence-transformers' pooling settings travel with the engine.
  FERRY_ASSIGN_OR_RETURN(const std::optional<std::string> modules, source->File(io::kModulesFile));
  if (modules) {
    manifest.files[io::kModulesFile] = *modules;
    for (const std::string& name : io::SentencePoolingFiles(*modules)) {
      FERRY_ASSIGN_OR_RETURN(std::optional<std::string> text, source->File(name));
      if (text) manifest.files[name] = std::move(*text);
    }
  }
  for (const char* name : kBinaryFiles) {
    FERRY_ASSIGN_OR_RETURN(const std::optional<std::string> file, source->File(name));
    if (!file) continue;
    const std::string& bytes = *file;
    FERRY_ASSIGN_OR_RETURN(manifest.binary_files[name],
                           add_blob(std::string("file:") + name, bytes.data(), bytes.size()));
  }
  manifest.fingerprint = fingerprint;
  manifest.model = {config.family, config.model_type, config.eos_token_ids, config.bos_token_ids};
  manifest.build.precision = o.precision;
  manifest.build.device = o.device;
  manifest.build.weight_format = backend::WeightFormatName(plan.format);
  manifest.build.max_seq_len = max_seq_len;
  manifest.build.max_batch_tokens = max_batch_tokens;
  manifest.build.source = fs::absolute(model_dir, ec).string();
  if (o.device.is_cuda()) manifest.build.activations = eo.cuda_activations;
  manifest.build.calibration = report.calibration;
  if (plan.format == backend::WeightFormat::kFp8) {
    manifest.build.fp8_accumulation = o.fp8_fast_accumulation ? "fast" : "exact";
  }
  report.blobs = static_cast<int>(manifest.blobs_index.size());
  FERRY_RETURN_IF_ERROR(writer->Finish(manifest));
  if (progress) progress->EndPhase();
  report.file_bytes = static_cast<size_t>(fs::file_size(output_path, ec));
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return report;
}

}  // namespace ferry::engine
