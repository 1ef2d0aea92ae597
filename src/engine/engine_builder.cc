#include "engine/engine_builder.h"

#include <algorithm>
#include <chrono>
#include <tuple>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <string_view>

#include <oneapi/dnnl/dnnl.hpp>

#include "backend/cuda_backend.h"
#include "core/logging.h"
#include "core/mapped_file.h"
#include "core/thread_pool.h"
#include "core/version.h"
#include "engine/default_calibration.h"
#include "engine/engine.h"
#include "engine/generator.h"
#include "engine/kv_cache.h"
#include "engine/step_executor.h"
#include "io/engine_file.h"
#include "io/model_config.h"
#include "io/safetensors.h"
#include "tokenizer/tokenizer.h"

namespace ferry::engine {

namespace fs = std::filesystem;

namespace {

// Text tokenizer/config files embedded verbatim in the manifest; binary ones as blobs.
const char* const kTextFiles[] = {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                                  "generation_config.json", "vocab.txt", "config.json"};
const char* const kBinaryFiles[] = {"tokenizer.model"};

struct Precision {
  backend::WeightFormat format;
  std::optional<DType> table_dtype;
  bool calibrate;
};

Result<Precision> ParsePrecision(const std::string& p, bool cuda) {
  if (p == "fp32") return Precision{backend::WeightFormat::kF32, DType::kF32, false};
  if (p == "bf16") return Precision{backend::WeightFormat::kBF16, DType::kBF16, false};
  if (p == "fp16") return Precision{backend::WeightFormat::kF16, DType::kF16, false};
  if (p == "int8-wo") return Precision{backend::WeightFormat::kInt8, DType::kBF16, false};
  if (p == "int8") return Precision{backend::WeightFormat::kInt8W8A8, DType::kBF16, true};
  if (p == "fp8") {
    // e4m3 weights with per-channel scales; activations are scaled per token at run time,
    // so fp8 needs no calibration pass.
    if (cuda) return Precision{backend::WeightFormat::kFp8, DType::kBF16, false};
    return InvalidArgument("precision fp8 runs on GPUs only (sm_89+): build it with --device cuda");
  }
  return InvalidArgument("unknown precision '" + p + "' (fp32, bf16, fp16, int8-wo, int8, fp8)");
}

// The activation (and KV cache) dtype a GPU engine of this precision runs with.
DType CudaActivations(const std::string& precision) {
  if (precision == "fp32") return DType::kF32;
  if (precision == "fp16") return DType::kF16;
  return DType::kBF16;
}

std::string CpuIsa() {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) return "avx512";
  if (__builtin_cpu_supports("avx2")) return "avx2";
  return "baseline";
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
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) m[c] = std::max(m[c], std::fabs(p[r * cols + c]));
  }
};

Result<nlohmann::json> Calibrate(const std::string& model_dir, const BuildOptions& o, int max_seq_len,
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
      if (static_cast<int>(ids.size()) > max_seq_len) ids.resize(max_seq_len);
      FERRY_ASSIGN_OR_RETURN(Tensor logits, ex.Step({SeqStep{1, ids, 0, false}}));
      cache->Free(1);
      tokens += static_cast<int64_t>(ids.size());
      ++used_docs;
    }
    fp32->decoder()->SetLinearInputObserver(nullptr);
  } else {
    fp32->encoder()->SetLinearInputObserver(observer);
    const int limit = fp32->config().max_position_embeddings;
    for (const std::string& d : docs) {
      if (tokens >= o.calibration_tokens) break;
      FERRY_ASSIGN_OR_RETURN(tokenizer::Encoding enc, encode(d, true));
      if (static_cast<int>(enc.ids.size()) > limit) {
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
        Tensor wf = w.weight.ToF32();
        const int64_t n = wf.dim(0), k = wf.dim(1);
        std::vector<float> wmax(k, 0.0f);
        for (int64_t r = 0; r < n; ++r)
          for (int64_t c = 0; c < k; ++c) wmax[c] = std::max(wmax[c], std::fabs(wf.data<float>()[r * k + c]));
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
  return nlohmann::json{{"path", path},     {"documents", used_docs},
                        {"tokens", tokens}, {"alpha", o.smooth_alpha},
                        {"layers", smooth.size()}, {"synthetic_token_ids", synthetic}};
}

// Times the backend's small-M (one-pass decode) kernel against its blocked GEMM for every
// distinct weight shape and row-count bucket, and records per weight the largest bucket
// where the small-M kernel is at least as fast: a kernel choice that depends on shape,
// made on the machine the engine is built for, as TensorRT's builder does.
Result<nlohmann::json> TuneLinears(backend::Backend& be, std::map<std::string, backend::LinearWeight*>& linears) {
  const std::vector<int> buckets = {1, 2, 4, 8, 16, 32, 64};
  struct ShapeKey {
    int format;
    int64_t n, k;
    bool operator<(const ShapeKey& o) const { return std::tie(format, n, k) < std::tie(o.format, o.n, o.k); }
  };
  std::map<ShapeKey, int> chosen;
  nlohmann::json table = nlohmann::json::array();
  // Best of three batches, each long enough (>= 1 ms) for the clock to resolve it.
  auto time_us = [&](const backend::LinearWeight& w, const Tensor& x, Tensor& y) -> Result<double> {
    FERRY_RETURN_IF_ERROR(be.Linear(x, w, y));  // warm
    double best = 1e30;
    for (int batch = 0; batch < 3; ++batch) {
      const auto t0 = std::chrono::steady_clock::now();
      int calls = 0;
      double elapsed = 0;
      do {
        FERRY_RETURN_IF_ERROR(be.Linear(x, w, y));
        ++calls;
        elapsed = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
      } while (elapsed < 1000.0);
      best = std::min(best, elapsed / calls);
    }
    return best;
  };
  for (auto& [key, wp] : linears) {
    backend::LinearWeight& w = *wp;
    const ShapeKey sk{static_cast<int>(w.format), w.out_features(), w.in_features()};
    auto it = chosen.find(sk);
    if (it != chosen.end()) {
      w.small_m_max = it->second;
      continue;
    }
    nlohmann::json row = {{"format", backend::WeightFormatName(w.format)}, {"n", sk.n}, {"k", sk.k}};
    int best = -1;
    for (int m : buckets) {
      Tensor x = Tensor::Empty({m, sk.k}, DType::kF32);
      for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = static_cast<float>((i * 7919 % 2001) - 1000) * 1e-3f;
      Tensor y = Tensor::Empty({m, sk.n}, DType::kF32);
      backend::LinearWeight probe = w;
      probe.small_m_max = m;  // forces the small-M kernel for this M
      FERRY_ASSIGN_OR_RETURN(double small_us, time_us(probe, x, y));
      probe.small_m_max = m == 1 ? -1 : m - 1;  // forces the blocked GEMM
      FERRY_ASSIGN_OR_RETURN(double gemm_us, time_us(probe, x, y));
      row["m"].push_back(m);
      row["small_m_us"].push_back(small_us);
      row["gemm_us"].push_back(gemm_us);
      if (small_us <= gemm_us) best = m;
    }
    row["small_m_max"] = best;
    table.push_back(row);
    chosen[sk] = best;
    w.small_m_max = best;
  }
  return table;
}

nlohmann::json DescribeTensor(const Tensor& t, const io::BlobRef& ref) {
  return {{"dtype", std::string(DTypeName(t.dtype()))}, {"shape", t.shape()}, {"blob", ref.ToJson()}};
}

}  // namespace

Result<nlohmann::json> CurrentFingerprint(const std::string& device) {
  nlohmann::json fp;
  fp["ferry_version"] = kVersion;
  fp["weight_layout_version"] = 1;
  if (device == "cpu") {
    const dnnl_version_t* v = dnnl_version();
    fp["device"] = "cpu";
    fp["cpu_isa"] = CpuIsa();
    fp["libraries"] = {{"onednn", std::to_string(v->major) + "." + std::to_string(v->minor) + "." +
                                      std::to_string(v->patch)}};
    return fp;
  }
  FERRY_ASSIGN_OR_RETURN(const int index, backend::ParseCudaDevice(device));
  FERRY_ASSIGN_OR_RETURN(const backend::CudaDeviceInfo gpu, backend::QueryCudaDevice(index));
  fp["device"] = "cuda";
  fp["gpu"] = gpu.name;
  fp["arch"] = gpu.arch();
  fp["libraries"] = {{"cuda_runtime", gpu.runtime_version}, {"cublaslt", gpu.cublaslt_version}};
  return fp;
}

Status CheckFingerprint(const nlohmann::json& fp, const std::string& device) {
  const std::string built = fp.value("device", "");
  const bool on_gpu = device != "cpu";
  if (fp.value("weight_layout_version", 0) != 1) {
    return FailedPrecondition("engine uses weight layout version " + std::to_string(fp.value("weight_layout_version", 0)) +
                              ", this ferry reads version 1");
  }
  if (built == "cpu") {
    if (on_gpu) {
      return FailedPrecondition("engine was built for the CPU; build a GPU engine with `ferry build --device cuda`, "
                                "or run the checkpoint itself with --device " + device);
    }
    const std::string isa = fp.value("cpu_isa", "");
    const std::string here = CpuIsa();
    auto rank = [](const std::string& s) { return s == "avx512" ? 2 : s == "avx2" ? 1 : 0; };
    if (rank(isa) > rank(here)) {
      return FailedPrecondition("engine was built for CPU ISA '" + isa + "', this CPU only has '" + here + "'");
    }
    return Status::Ok();
  }
  if (built != "cuda") return FailedPrecondition("engine was built for an unknown device '" + built + "'");
  const std::string arch = fp.value("arch", "");
  if (!on_gpu) return FailedPrecondition("engine was built for a GPU (" + arch + "); load it with --device cuda");
  FERRY_ASSIGN_OR_RETURN(const int index, backend::ParseCudaDevice(device));
  auto gpu = backend::QueryCudaDevice(index);
  if (!gpu.ok()) return gpu.status().WithContext("engine was built for a GPU (" + arch + ")");
  if (gpu->arch() != arch) {
    return FailedPrecondition("engine was built and tuned for " + arch + " (" + fp.value("gpu", "") + "), this GPU is " +
                              gpu->arch() + " (" + gpu->name + "): rebuild it on this GPU");
  }
  const nlohmann::json libs = fp.value("libraries", nlohmann::json::object());
  const size_t lt = libs.value("cublaslt", size_t{0});
  if (lt != gpu->cublaslt_version) {
    return FailedPrecondition("engine stores GEMM algorithms tuned with cuBLASLt " + std::to_string(lt) +
                              ", this process has cuBLASLt " + std::to_string(gpu->cublaslt_version) +
                              ": rebuild the engine");
  }
  return Status::Ok();
}

Result<BuildReport> BuildEngine(const std::string& model_dir, const std::string& output_path, const BuildOptions& o) {
  const auto t0 = std::chrono::steady_clock::now();
  const bool cuda = o.device != "cpu";
  if (cuda) FERRY_RETURN_IF_ERROR(backend::ParseCudaDevice(o.device).status());
  FERRY_ASSIGN_OR_RETURN(Precision precision, ParsePrecision(o.precision, cuda));
  // The fingerprint first: a GPU build fails here, before any work, when there is no GPU.
  FERRY_ASSIGN_OR_RETURN(const nlohmann::json fingerprint, CurrentFingerprint(o.device));
  std::error_code ec;
  if (!fs::is_directory(model_dir, ec)) return InvalidArgument("'" + model_dir + "' is not a checkpoint directory");
  FERRY_ASSIGN_OR_RETURN(io::ModelConfig config, io::LoadModelConfig(model_dir));
  const int model_ctx = config.max_position_embeddings;
  const int max_seq_len = o.max_seq_len > 0 ? std::min(o.max_seq_len, model_ctx) : std::min(model_ctx, 4096);
  const int max_batch_tokens = o.max_batch_tokens > 0 ? o.max_batch_tokens : max_seq_len;
  SetComputeThreads(o.threads);

  BuildReport report;
  std::map<std::string, Tensor> smooth;
  if (precision.calibrate) {
    FERRY_ASSIGN_OR_RETURN(report.calibration, Calibrate(model_dir, o, max_seq_len, smooth));
  }
  FERRY_ASSIGN_OR_RETURN(std::shared_ptr<io::Checkpoint> ckpt, io::Checkpoint::Open(model_dir));
  model::WeightSource src{[ckpt](const std::string& n) { return ckpt->Get(n); },
                          [ckpt](const std::string& n) { return ckpt->Has(n); }};
  model::LoadOptions lo;
  lo.linear_format = precision.format;
  lo.table_dtype = precision.table_dtype;
  lo.smooth = &smooth;
  // A GPU engine's weights are laid out (and tuned) by the CUDA backend itself.
  EngineOptions eo;
  eo.device = o.device;
  eo.cuda_activations = CudaActivations(o.precision);
  FERRY_ASSIGN_OR_RETURN(std::unique_ptr<backend::Backend> be, MakeBackend(eo));
  std::unique_ptr<model::DecoderModel> decoder;
  std::unique_ptr<model::EncoderModel> encoder;
  if (config.family == io::ModelFamily::kDecoder) {
    FERRY_ASSIGN_OR_RETURN(decoder, model::DecoderModel::Load(config, src, *be, lo));
  } else {
    FERRY_ASSIGN_OR_RETURN(encoder, model::EncoderModel::Load(config, src, *be, lo));
  }

  // Tuned kernel choices per weight shape.
  std::map<std::string, backend::LinearWeight*> all_linears;
  {
    model::WeightVisitor collect{[](const std::string&, const Tensor&) { return Status::Ok(); },
                                 [&](const std::string& key, const backend::LinearWeight& w) {
                                   all_linears[key] = const_cast<backend::LinearWeight*>(&w);
                                   return Status::Ok();
                                 }};
    FERRY_RETURN_IF_ERROR(decoder ? decoder->Visit(collect) : encoder->Visit(collect));
  }
  nlohmann::json tuned;
  if (o.tune && cuda) {
    nlohmann::json shapes = nlohmann::json::array();
    for (auto& [key, w] : all_linears) {
      FERRY_ASSIGN_OR_RETURN(std::string report, be->TuneLinear(*w));
      if (!report.empty()) shapes.push_back(nlohmann::json::parse(report));
    }
    tuned = {{"choice", "cuBLASLt algorithm (or the fused int8 small-M kernel) per weight shape and M bucket, "
                        "timed in CUDA graphs on this GPU"},
             {"linear_shapes", shapes}};
  } else if (o.tune) {
    FERRY_ASSIGN_OR_RETURN(nlohmann::json shapes, TuneLinears(*be, all_linears));
    tuned = {{"choice", "small_m_max: largest rows that run the one-pass decode kernel (else blocked GEMM)"},
             {"threads", ComputeThreads()},
             {"linear_shapes", shapes}};
  }

  FERRY_ASSIGN_OR_RETURN(auto writer, io::EngineWriter::Create(output_path, fingerprint));
  nlohmann::json tensors = nlohmann::json::object(), linears = nlohmann::json::object();
  nlohmann::json index = nlohmann::json::array();
  auto add_blob = [&](const std::string& name, const void* data, size_t bytes) -> Result<io::BlobRef> {
    FERRY_ASSIGN_OR_RETURN(io::BlobRef ref, writer->AddBlob(data, bytes));
    index.push_back({{"name", name}, {"blob", ref.ToJson()}});
    report.weight_bytes += bytes;
    return ref;
  };
  model::WeightVisitor visitor{
      [&](const std::string& key, const Tensor& t) -> Status {
        Tensor c = t.is_contiguous() ? t : t.Clone();
        FERRY_ASSIGN_OR_RETURN(io::BlobRef ref, add_blob(key, c.raw(), c.nbytes()));
        tensors[key] = DescribeTensor(c, ref);
        return Status::Ok();
      },
      [&](const std::string& key, const backend::LinearWeight& w) -> Status {
        FERRY_ASSIGN_OR_RETURN(backend::SerializedLinear s, be->SerializeLinear(w));
        nlohmann::json layout = nlohmann::json::parse(s.layout_json, nullptr, false);
        if (layout.is_discarded()) return Internal("backend wrote an invalid layout for '" + key + "'");
        nlohmann::json blobs = nlohmann::json::array();
        for (size_t i = 0; i < s.blobs.size(); ++i) {
          const Tensor& b = s.blobs[i];
          FERRY_ASSIGN_OR_RETURN(io::BlobRef ref, add_blob(key + "#" + std::to_string(i), b.raw(), b.nbytes()));
          blobs.push_back(DescribeTensor(b, ref));
        }
        linears[key] = {{"layout", layout}, {"blobs", blobs}, {"small_m_max", w.small_m_max}};
        return Status::Ok();
      }};
  FERRY_RETURN_IF_ERROR(decoder ? decoder->Visit(visitor) : encoder->Visit(visitor));

  nlohmann::json files = nlohmann::json::object(), binary_files = nlohmann::json::object();
  for (const char* name : kTextFiles) {
    const fs::path p = fs::path(model_dir) / name;
    if (!fs::exists(p, ec)) continue;
    FERRY_ASSIGN_OR_RETURN(std::string text, ReadFileToString(p.string()));
    files[name] = text;
  }
  for (const char* name : kBinaryFiles) {
    const fs::path p = fs::path(model_dir) / name;
    if (!fs::exists(p, ec)) continue;
    FERRY_ASSIGN_OR_RETURN(std::string bytes, ReadFileToString(p.string()));
    FERRY_ASSIGN_OR_RETURN(io::BlobRef ref, add_blob(std::string("file:") + name, bytes.data(), bytes.size()));
    binary_files[name] = ref.ToJson();
  }
  nlohmann::json manifest;
  manifest["format_version"] = io::kEngineFormatVersion;
  manifest["fingerprint"] = fingerprint;
  manifest["model"] = {{"family", config.family == io::ModelFamily::kDecoder ? "decoder" : "encoder"},
                       {"model_type", config.model_type},
                       {"eos_token_ids", config.eos_token_ids},
                       {"bos_token_ids", config.bos_token_ids}};
  manifest["files"] = files;
  manifest["binary_files"] = binary_files;
  manifest["build"] = {{"precision", o.precision},
                       {"device", o.device},
                       {"max_seq_len", max_seq_len},
                       {"max_batch_tokens", max_batch_tokens},
                       {"source", fs::absolute(model_dir, ec).string()},
                       {"weight_format", backend::WeightFormatName(precision.format)}};
  if (cuda) manifest["build"]["activations"] = std::string(DTypeName(eo.cuda_activations));
  if (precision.calibrate) manifest["build"]["calibration"] = report.calibration;
  if (!tuned.is_null()) manifest["tuned"] = tuned;
  manifest["tensors"] = tensors;
  manifest["linears"] = linears;
  manifest["blobs_index"] = index;
  report.blobs = static_cast<int>(index.size());
  FERRY_RETURN_IF_ERROR(writer->Finish(manifest));
  report.file_bytes = static_cast<size_t>(fs::file_size(output_path, ec));
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return report;
}

}  // namespace ferry::engine
