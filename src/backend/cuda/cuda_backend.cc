// The CUDA backend (backend/cuda_backend.h): the Backend op set on one stream per engine,
// put together from the parts beside this file.
#include "backend/cuda_backend.h"

#include <cuda_runtime.h>

#include <cstdlib>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "backend/cuda/attention_ops.h"
#include "backend/cuda/context.h"
#include "backend/cuda/gemm_tuning.h"
#include "backend/cuda/graph_recorder.h"
#include "backend/cuda/linear_gemm.h"
#include "backend/cuda/linear_weights.h"
#include "backend/cuda/resident_weights.h"
#include "backend/cuda/sampling.h"
#include "backend/cuda/step_upload.h"
#include "backend/cuda/weight_loader.h"
#include "backend/cuda_fingerprint.h"
#include "backend/step_graphs.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/kernels.h"

namespace ferry::backend {

namespace {

constexpr size_t kGemmWorkspaceBytes = 32 << 20;

// Thread-compatible: one caller at a time (the engine's scheduler thread), except Allocate.
class CudaBackend final : public Backend {
 public:
  CudaBackend(const CudaBackendOptions& o, std::unique_ptr<CudaContext> ctx, std::unique_ptr<cuda::LtGemm> gemm)
      : options_(o),
        ctx_(std::move(ctx)),
        gemm_(std::move(gemm)),
        resident_(*ctx_),
        tuner_(*ctx_, *gemm_, o.activations),
        attention_(*ctx_),
        sampler_(*ctx_),
        recorder_(*ctx_),
        graphs_(recorder_) {}
  ~CudaBackend() override {
    loader_.reset();  // a load that failed halfway: its copies finish before the buffers go
    // Recordings and their buffers go before the stream they run on.
    cudaStreamSynchronize(ctx_->stream());
    graphs_.Clear();
  }

  Device device() const override { return ctx_->device(); }
  std::string Name() const override { return ctx_->name(); }
  DType activation_dtype() const override { return options_.activations; }
  DType kv_cache_dtype() const override { return options_.kv_cache; }
  Result<Tensor> Allocate(const Shape& shape, DType dtype) override { return ctx_->Allocate(shape, dtype); }
  std::optional<std::pair<size_t, size_t>> DeviceMemory() const override {
    size_t free = 0, total = 0;
    if (cudaSetDevice(ctx_->device().index) != cudaSuccess || cudaMemGetInfo(&free, &total) != cudaSuccess) {
      return std::nullopt;
    }
    return std::make_pair(free, total);
  }

  // --- weights ---------------------------------------------------------------------------

  Status PrepareLinear(LinearWeight& w) override { return PrepareLinearParts({}, w); }
  Status PrepareLinearParts(const std::vector<Tensor>& parts, LinearWeight& w) override {
    FERRY_ASSIGN_OR_RETURN(WeightLoader * loader, Loader());
    return PrepareCudaLinear(*ctx_, *loader, *gemm_, options_.activations, parts, w);
  }
  Result<SerializedLinear> SerializeLinear(const LinearWeight& w) override {
    FERRY_RETURN_IF_ERROR(EnsureLoaded());
    return SerializeCudaLinear(w);
  }
  Result<LinearWeight> DeserializeLinear(const SerializedLinear& s) override {
    FERRY_ASSIGN_OR_RETURN(WeightLoader * loader, Loader());
    return DeserializeCudaLinear(*loader, s);
  }
  Status PreloadWeight(const Tensor& t) override {
    // Tables ops read by index (embeddings); small vectors (norm gains) are uploaded at first use.
    if (!t.defined() || !t.device().is_cpu() || t.nbytes() < (1u << 20) || !t.is_contiguous()) return Status::Ok();
    FERRY_ASSIGN_OR_RETURN(WeightLoader * loader, Loader());
    FERRY_ASSIGN_OR_RETURN(Tensor dev, loader->Upload(t, t.dtype()));
    resident_.Adopt(t, std::move(dev));
    return Status::Ok();
  }
  Status FinishLoading() override {
    if (loader_ == nullptr) return Status::Ok();
    const Status status = loader_->Finish();
    loader_.reset();  // the pinned slots and the conversion scratch go back
    return status;
  }
  size_t DeviceBytesHeld() const override { return ctx_->held_bytes() + kGemmWorkspaceBytes; }
  void ReleaseCachedMemory() override {
    if (ctx_->recording()) return;
    cudaStreamSynchronize(stream());
    ctx_->TrimPools();
  }
  Status Linear(const Tensor& x, const LinearWeight& w, Tensor& y) override {
    FERRY_RETURN_IF_ERROR(EnsureLoaded());
    return RunLinear(*ctx_, *gemm_, x, w, y);
  }
  Status GeluLinear(Tensor& x, const LinearWeight& w, Tensor& y) override {
    FERRY_RETURN_IF_ERROR(EnsureLoaded());
    return RunGeluLinear(*ctx_, *gemm_, x, w, y);
  }
  Status GatedLinear(const Tensor& gate_up, bool gelu_tanh, Tensor& mlp, const LinearWeight& w, Tensor& y) override {
    FERRY_RETURN_IF_ERROR(EnsureLoaded());
    if (QuantizesActivations(w)) return RunGatedLinear(*ctx_, *gemm_, gate_up, gelu_tanh, w, y);
    return Backend::GatedLinear(gate_up, gelu_tanh, mlp, w, y);
  }
  Status NormLinear(Tensor& residual, const Tensor* delta, const Tensor& gamma, float eps, Tensor& h,
                    const LinearWeight& w, Tensor& y) override {
    FERRY_RETURN_IF_ERROR(EnsureLoaded());
    FERRY_ASSIGN_OR_RETURN(const Tensor* g, resident_.GetF32(gamma));
    if (FusesNormLinear(residual, delta, g->data<float>(), w)) {
      return RunNormLinear(*ctx_, *gemm_, residual, delta, g->data<float>(), eps, w, y);
    }
    return Backend::NormLinear(residual, delta, gamma, eps, h, w, y);
  }
  // FERRY_FUSE_LAYERNORM=0 (read once) keeps the LayerNorm and the quantization as two passes,
  // for comparisons; the bytes are the same either way (CudaKernels.LayerNormQuantize*,
  // CudaLinearRoutesTest).
  bool FusesLayerNormLinear(const LinearWeight& w) const override {
    static const bool enabled = [] {
      const char* v = std::getenv("FERRY_FUSE_LAYERNORM");
      return v == nullptr || std::string(v) != "0";
    }();
    return enabled && QuantizesActivations(w);
  }
  Status LayerNormLinear(const Tensor& x, const Tensor& delta, const Tensor& gamma, const Tensor& beta, float eps,
                         Tensor& out, const LinearWeight& w, Tensor& y) override {
    FERRY_RETURN_IF_ERROR(EnsureLoaded());
    FERRY_ASSIGN_OR_RETURN(const Tensor* g, resident_.GetF32(gamma));
    FERRY_ASSIGN_OR_RETURN(const Tensor* b, resident_.GetF32(beta));
    const Tensor* d = delta.defined() ? &delta : nullptr;
    if (::ferry::backend::FusesLayerNormLinear(x, d, g->data<float>(), b->data<float>(), out, w)) {
      return RunLayerNormLinear(*ctx_, *gemm_, x, d, g->data<float>(), b->data<float>(), eps, out, w, y);
    }
    return Backend::LayerNormLinear(x, delta, gamma, beta, eps, out, w, y);
  }
  Result<std::string> TuneLinear(LinearWeight& w) override {
    FERRY_RETURN_IF_ERROR(EnsureLoaded());
    return tuner_.Tune(w);
  }
  std::string DescribeTuning() const override {
    return nlohmann::json{{"choice", "cuBLASLt algorithm (or the fused int8 small-M kernel) per weight shape and M "
                                     "bucket, timed in CUDA graphs on this GPU"}}
        .dump();
  }
  Result<io::EngineFingerprint> Fingerprint() const override { return CudaFingerprint(options_.device); }
  Status CheckFingerprint(const io::EngineFingerprint& fp) const override {
    return CheckCudaFingerprint(fp, options_.device);
  }

  // --- elementwise -----------------------------------------------------------------------

  Status Embedding(const Tensor& table, const Tensor& ids, Tensor& out) override {
    FERRY_RETURN_IF_ERROR(EnsureLoaded());
    const int64_t n = ids.defined() ? ids.numel() : 0;
    FERRY_ASSIGN_OR_RETURN(const int32_t* d_ids, Indices(ids, n, "Embedding", "ids"));
    FERRY_ASSIGN_OR_RETURN(const Tensor* t, resident_.Get(table));
    return cuda::EmbeddingGather(t->raw(), t->dtype(), d_ids, n, t->dim(1), out.raw(), out.dtype(), stream());
  }
  Status RmsNorm(const Tensor& x, const Tensor& gamma, float eps, Tensor& out) override {
    FERRY_ASSIGN_OR_RETURN(const Tensor* g, resident_.GetF32(gamma));
    return cuda::RmsNorm(x.raw(), g->data<float>(), eps, x.dim(0), x.dim(1), out.raw(), x.dtype(), stream());
  }
  Status AddRmsNorm(Tensor& residual, const Tensor& delta, const Tensor& gamma, float eps, Tensor& out) override {
    FERRY_ASSIGN_OR_RETURN(const Tensor* g, resident_.GetF32(gamma));
    return cuda::AddRmsNorm(residual.raw(), delta.raw(), g->data<float>(), eps, residual.dim(0), residual.dim(1),
                            out.raw(), residual.dtype(), stream());
  }
  Status LayerNorm(const Tensor& x, const Tensor& delta, const Tensor& gamma, const Tensor& beta, float eps,
                   Tensor& out) override {
    FERRY_ASSIGN_OR_RETURN(const Tensor* g, resident_.GetF32(gamma));
    FERRY_ASSIGN_OR_RETURN(const Tensor* b, resident_.GetF32(beta));
    return cuda::LayerNorm(x.raw(), delta.defined() ? delta.raw() : nullptr, g->data<float>(), b->data<float>(), eps,
                           x.dim(0), x.dim(1), out.raw(), x.dtype(), stream());
  }
  Status Rope(Tensor& q, Tensor& k, int num_heads, int num_kv_heads, const Tensor& positions,
              const RopeTable& table) override {
    const int64_t T = q.dim(0);
    FERRY_ASSIGN_OR_RETURN(const int32_t* d_pos, Indices(positions, T, "Rope", "positions"));
    FERRY_ASSIGN_OR_RETURN(const float* inv_freq, resident_.RopeFrequencies(table));
    return cuda::Rope(q.raw(), k.raw(), T, num_heads, num_kv_heads, table.head_dim, d_pos, inv_freq, q.dtype(),
                      stream());
  }
  Status SiluMul(const Tensor& gate_up, Tensor& out) override {
    return cuda::SiluMul(gate_up.raw(), gate_up.dim(0), out.dim(1), out.raw(), out.dtype(), stream());
  }
  Status Gelu(Tensor& x) override { return cuda::Gelu(x.raw(), x.numel(), x.dtype(), stream()); }
  Status Tanh(Tensor& x) override { return cuda::Tanh(x.raw(), x.numel(), x.dtype(), stream()); }
  Status GeluTanhMul(const Tensor& gate_up, Tensor& out) override {
    return cuda::GeluTanhMul(gate_up.raw(), gate_up.dim(0), out.dim(1), out.raw(), out.dtype(), stream());
  }
  Status GeluMul(const Tensor& gate_up, Tensor& out) override {
    return cuda::GeluMul(gate_up.raw(), gate_up.dim(0), out.dim(1), out.raw(), out.dtype(), stream());
  }
  Status Scale(Tensor& x, float s) override { return cuda::Scale(x.raw(), x.numel(), s, x.dtype(), stream()); }
  Status SoftCap(Tensor& x, float cap) override {
    return cuda::SoftCap(x.raw(), x.numel(), cap, x.dtype(), stream());
  }
  Status HeadRmsNorm(Tensor& x, int64_t col_begin, int heads, int head_dim, const Tensor& gamma,
                     float eps) override {
    FERRY_ASSIGN_OR_RETURN(const Tensor* g, resident_.GetF32(gamma));
    return cuda::HeadRmsNorm(x.raw(), x.dim(0), x.dim(1), col_begin, heads, head_dim, g->data<float>(), eps,
                             x.dtype(), stream());
  }
  Status Add(Tensor& x, const Tensor& y) override {
    return cuda::Add(x.raw(), y.raw(), x.numel(), x.dtype(), stream());
  }
  Status PoolRows(const Tensor& x, const AttentionBatch& batch, PoolMode mode, Tensor& out) override {
    return attention_.Pool(x, batch, mode, out);
  }
  Status CopyColumns(const Tensor& src, int64_t col_begin, Tensor& dst) override {
    return cuda::CopyColumns(src.raw(), src.dim(0), src.dim(1), col_begin, dst.raw(), dst.dim(1), src.dtype(),
                             stream());
  }

  // --- KV cache and attention ------------------------------------------------------------

  Status WriteKv(const Tensor& k, const Tensor& v, const Tensor& slots, KvLayer& layer) override {
    const int64_t T = k.dim(0);
    const int kv_heads = static_cast<int>(layer.k.dim(1));
    const int head_dim = static_cast<int>(layer.k.dim(3));
    FERRY_ASSIGN_OR_RETURN(const int32_t* d_slots, Indices(slots, T, "WriteKv", "slots"));
    return cuda::WriteKv(k.raw(), v.raw(), d_slots, T, kv_heads, head_dim, layer.block_tokens, layer.k.raw(),
                         layer.v.raw(), k.dtype(), layer.k.dtype(), stream());
  }
  Status RopeQkvWriteKv(const Tensor& qkv, int num_heads, int num_kv_heads, const Tensor& positions,
                        const RopeTable& table, const Tensor& slots, KvLayer& layer, Tensor& q, Tensor& k,
                        Tensor& v) override {
    (void)k;  // one pass: no split copies of k and v
    (void)v;
    const int64_t T = qkv.dim(0);
    const int head_dim = static_cast<int>(layer.k.dim(3));
    if (qkv.dim(1) != static_cast<int64_t>(num_heads + 2 * num_kv_heads) * head_dim || q.dim(0) != T ||
        q.dim(1) != static_cast<int64_t>(num_heads) * head_dim || q.dtype() != qkv.dtype() ||
        layer.k.dim(1) != num_kv_heads || table.head_dim != head_dim) {
      return InvalidArgument("RopeQkvWriteKv: qkv " + qkv.DebugString() + ", q " + q.DebugString() +
                             " and the cache do not fit");
    }
    FERRY_ASSIGN_OR_RETURN(const int32_t* d_pos, Indices(positions, T, "RopeQkvWriteKv", "positions"));
    FERRY_ASSIGN_OR_RETURN(const int32_t* d_slots, Indices(slots, T, "RopeQkvWriteKv", "slots"));
    FERRY_ASSIGN_OR_RETURN(const float* inv_freq, resident_.RopeFrequencies(table));
    return cuda::RopeQkvWriteKv(qkv.raw(), q.raw(), T, num_heads, num_kv_heads, head_dim, d_pos, inv_freq, d_slots,
                                layer.block_tokens, layer.k.raw(), layer.v.raw(), qkv.dtype(), layer.k.dtype(),
                                stream());
  }
  Status PagedAttention(const Tensor& q, const KvLayer& layer, const AttentionBatch& batch,
                        const AttentionParams& params, Tensor& out) override {
    return attention_.Paged(q, layer, batch, params, out);
  }
  Status DenseAttention(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionBatch& batch,
                        const AttentionParams& params, Tensor& out) override {
    return attention_.Dense(q.raw(), k.raw(), v.raw(), 0, 0, q.dtype(), q.dim(0), batch, params, out);
  }
  // Reads q, k and v in place from the fused projection.
  Status DenseAttentionQkv(const Tensor& qkv, const AttentionBatch& batch, const AttentionParams& params,
                           Tensor& out) override {
    const int64_t q_dim = static_cast<int64_t>(params.num_heads) * params.head_dim;
    const int64_t kv_dim = static_cast<int64_t>(params.num_kv_heads) * params.head_dim;
    if (qkv.dim(1) != q_dim + 2 * kv_dim) {
      return InvalidArgument("DenseAttentionQkv: " + qkv.DebugString() +
                             " is not a fused QKV projection of this shape");
    }
    const size_t elem = DTypeSize(qkv.dtype());
    const char* base = static_cast<const char*>(qkv.raw());
    return attention_.Dense(base, base + q_dim * elem, base + (q_dim + kv_dim) * elem, qkv.dim(1), qkv.dim(1),
                            qkv.dtype(), qkv.dim(0), batch, params, out);
  }

  // --- host transfers --------------------------------------------------------------------

  Result<Tensor> ToHost(const Tensor& t) override {
    if (t.device().is_cpu()) return t.ToF32();
    FERRY_RETURN_IF_ERROR(EnsureLoaded());
    FERRY_RETURN_IF_ERROR(ctx_->NotRecording("ToHost"));
    Tensor f = t;
    if (t.dtype() != DType::kF32) {
      FERRY_ASSIGN_OR_RETURN(f, ctx_->Allocate(t.shape(), DType::kF32));
      FERRY_RETURN_IF_ERROR(cuda::Convert(t.raw(), t.dtype(), f.raw(), DType::kF32, t.numel(), stream()));
    }
    Tensor host = Tensor::Empty(t.shape(), DType::kF32);
    FERRY_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(host.raw(), f.raw(), host.nbytes(), cudaMemcpyDeviceToHost, stream()));
    FERRY_RETURN_IF_ERROR(ctx_->Synchronize());
    return host;
  }
  Status Synchronize() override {
    FERRY_RETURN_IF_ERROR(EnsureLoaded());
    return ctx_->Synchronize();
  }

  // --- step inputs, step graphs and sampling -------------------------------------------------

  Result<StepTensors> UploadStep(const StepInputs& inputs) override {
    FERRY_RETURN_IF_ERROR(EnsureLoaded());
    return UploadStepInputs(*ctx_, inputs);
  }
  bool supports_graphs() const override { return true; }
  Result<Tensor> RunGraph(const GraphKey& key, const StepInputs& inputs, const StepBody& body) override {
    if (ctx_->recording()) return FailedPrecondition("step graphs do not nest");
    FERRY_RETURN_IF_ERROR(EnsureLoaded());
    return graphs_.Run(key, inputs, body);
  }
  int graph_count() const override { return graphs_.count(); }
  void ReleaseGraphs(int64_t owner) override {
    if (ctx_->recording()) return;
    cudaStreamSynchronize(stream());
    graphs_.Release(owner);
  }
  bool samples_on_device() const override { return true; }
  Status SampleTokens(const Tensor& logits, std::span<const TokenSampling> rows,
                      std::vector<int32_t>& tokens) override {
    return sampler_.Sample(logits, rows, tokens);
  }
  bool patches_step_tokens() const override { return true; }
  Result<std::unique_ptr<PendingTokens>> SampleTokensAsync(const Tensor& logits, std::span<const TokenSampling> rows,
                                                           std::span<const int32_t> host_rows) override {
    return sampler_.SampleAsync(logits, rows, host_rows);
  }

 private:
  cudaStream_t stream() const { return ctx_->stream(); }

  // The weight loader of the load in progress (made at its first weight).
  Result<WeightLoader*> Loader() {
    if (loader_ == nullptr) {
      FERRY_RETURN_IF_ERROR(ctx_->NotRecording("loading a weight"));
      FERRY_ASSIGN_OR_RETURN(loader_, WeightLoader::Create(*ctx_));
    }
    return loader_.get();
  }
  // Weights still on their way are waited for before anything reads them (the loader's
  // stream is not the compute stream).
  Status EnsureLoaded() { return loader_ == nullptr ? Status::Ok() : FinishLoading(); }

  // The device int32 array behind an index tensor of n ids: a device tensor as it is, a host
  // one copied over for this op.
  Result<const int32_t*> Indices(const Tensor& t, int64_t n, const char* op, const char* what) {
    if (!t.defined() || t.dtype() != DType::kI32 || t.rank() != 1 || t.numel() != n) {
      return InvalidArgument(std::string(op) + ": " + what + " " + t.DebugString() + " are not " + std::to_string(n) +
                             " i32 values");
    }
    if (t.device().is_cpu()) {
      FERRY_ASSIGN_OR_RETURN(void* d, ctx_->Stage(t.raw(), static_cast<size_t>(n) * sizeof(int32_t)));
      return static_cast<const int32_t*>(d);
    }
    if (t.device() != ctx_->device()) {
      return InvalidArgument(std::string(op) + ": " + what + " are on " + t.device().ToString() + ", not " +
                             ctx_->device().ToString());
    }
    return t.data<const int32_t>();
  }

  const CudaBackendOptions options_;
  std::unique_ptr<CudaContext> ctx_;
  std::unique_ptr<cuda::LtGemm> gemm_;
  ResidentWeights resident_;
  GemmTuner tuner_;
  CudaAttention attention_;
  DeviceSampler sampler_;
  CudaGraphRecorder recorder_;
  StepGraphs graphs_;
  std::unique_ptr<WeightLoader> loader_;  // while an engine loads
};

}  // namespace

Result<CudaDeviceInfo> QueryCudaDevice(int device) {
  if (!CudaAvailable()) return Unavailable("no CUDA device is available");
  CudaDeviceInfo info;
  cudaDeviceProp prop{};
  FERRY_CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&prop, device));
  info.name = prop.name;
  info.cc_major = prop.major;
  info.cc_minor = prop.minor;
  FERRY_CUDA_RETURN_IF_ERROR(cudaRuntimeGetVersion(&info.runtime_version));
  FERRY_CUDA_RETURN_IF_ERROR(cudaDriverGetVersion(&info.driver_version));
  info.cublaslt_version = cublasLtGetVersion();
  return info;
}

Result<CudaMemoryInfo> QueryCudaMemory(int device) {
  if (!CudaAvailable()) return Unavailable("no CUDA device is available");
  int previous = 0;
  FERRY_CUDA_RETURN_IF_ERROR(cudaGetDevice(&previous));
  FERRY_CUDA_RETURN_IF_ERROR(cudaSetDevice(device));
  CudaMemoryInfo info;
  const cudaError_t err = cudaMemGetInfo(&info.free_bytes, &info.total_bytes);
  FERRY_CUDA_RETURN_IF_ERROR(cudaSetDevice(previous));
  FERRY_CUDA_RETURN_IF_ERROR(err);
  return info;
}

bool CudaAvailable() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

Result<std::unique_ptr<Backend>> MakeCudaBackend(const CudaBackendOptions& options) {
  if (!CudaAvailable()) return Unavailable("no CUDA device is available");
  if (options.activations != DType::kBF16 && options.activations != DType::kF16 && options.activations != DType::kF32) {
    return InvalidArgument("CUDA activations must be bf16, f16 or f32");
  }
  FERRY_ASSIGN_OR_RETURN(std::unique_ptr<CudaContext> ctx, CudaContext::Create(options.device));
  FERRY_ASSIGN_OR_RETURN(std::unique_ptr<cuda::LtGemm> gemm, cuda::LtGemm::Create(kGemmWorkspaceBytes));
  return std::unique_ptr<Backend>(std::make_unique<CudaBackend>(options, std::move(ctx), std::move(gemm)));
}

}  // namespace ferry::backend
