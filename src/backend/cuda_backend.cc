#include "backend/cuda_backend.h"

#include <cuda_runtime.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "backend/cuda_fingerprint.h"
#include "core/logging.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/kernels.h"

namespace ferry::backend {

namespace {

using json = nlohmann::json;

// Device memory in size classes, recycled when the last Tensor using a block goes away, so
// the steady state (the same bucket shapes every step) allocates nothing. Thread-safe.
class DevicePool : public std::enable_shared_from_this<DevicePool> {
 public:
  explicit DevicePool(int device) : device_(device) {}
  ~DevicePool() {
    for (auto& [size, blocks] : free_) {
      for (void* p : blocks) cudaFree(p);
    }
  }

  Result<std::shared_ptr<void>> Get(size_t bytes) {
    const size_t size = RoundUp(std::max<size_t>(bytes, 256));
    void* p = nullptr;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto& list = free_[size];
      if (!list.empty()) {
        p = list.back();
        list.pop_back();
      }
    }
    if (p == nullptr) {
      FERRY_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
      FERRY_CUDA_RETURN_IF_ERROR(cudaMalloc(&p, size));
      allocated_bytes_ += size;
    }
    std::weak_ptr<DevicePool> self = weak_from_this();
    return std::shared_ptr<void>(p, [self, size](void* q) {
      if (auto pool = self.lock()) {
        std::lock_guard<std::mutex> lock(pool->mu_);
        pool->free_[size].push_back(q);
      } else {
        cudaFree(q);
      }
    });
  }

  size_t allocated_bytes() const { return allocated_bytes_; }

 private:
  // Powers of two up to 1 MiB, then multiples of 1 MiB: little waste, few classes.
  static size_t RoundUp(size_t n) {
    if (n <= (1u << 20)) {
      size_t p = 256;
      while (p < n) p <<= 1;
      return p;
    }
    return (n + (1u << 20) - 1) & ~static_cast<size_t>((1u << 20) - 1);
  }

  const int device_;
  std::mutex mu_;
  std::map<size_t, std::vector<void*>> free_;  // GUARDED_BY(mu_)
  std::atomic<size_t> allocated_bytes_{0};
};

// Small host arrays an op needs on the device (token ids, positions, slots, block tables):
// copied into pinned memory at once (the caller's array may die on return), then to the
// device asynchronously on the stream. The rings restart after every stream synchronize.
class Staging {
 public:
  static constexpr size_t kBytes = 16 << 20;

  Status Init() {
    FERRY_CUDA_RETURN_IF_ERROR(cudaHostAlloc(&host_, kBytes, cudaHostAllocDefault));
    FERRY_CUDA_RETURN_IF_ERROR(cudaMalloc(&device_, kBytes));
    return Status::Ok();
  }
  ~Staging() {
    if (host_ != nullptr) cudaFreeHost(host_);
    if (device_ != nullptr) cudaFree(device_);
  }

  // Device copy of `bytes` bytes at `src`. The layers of one step stage the same arrays
  // (positions, slots, the attention batch) again and again: an array already staged since
  // the last reset, from the same address with the same bytes, is not copied twice.
  // `copy`: enqueue the host-to-device copy (false while a step graph replays: its recorded
  // copy reads the pinned slot when the graph runs). `may_wait`: when the ring is full, wait
  // for the stream and start over (not allowed while a graph is captured or replayed).
  Result<void*> Put(const void* src, size_t bytes, cudaStream_t stream, bool copy = true, bool may_wait = true) {
    for (size_t i = 0; i < used_; ++i) {
      const Entry& e = entries_[i];
      if (e.host == src && e.bytes.size() == bytes && std::memcmp(e.bytes.data(), src, bytes) == 0) return e.device;
    }
    FERRY_ASSIGN_OR_RETURN(void* d, Copy(src, bytes, stream, copy, may_wait));
    if (used_ < kMaxEntries) {
      // Entries keep their buffers between steps, so the steady state allocates nothing.
      if (used_ == entries_.size()) entries_.emplace_back();
      Entry& e = entries_[used_++];
      const char* p = static_cast<const char*>(src);
      e.host = src;
      e.bytes.assign(p, p + bytes);
      e.device = d;
    }
    return d;
  }
  void Reset() {
    offset_ = 0;
    used_ = 0;
    ++epoch_;
  }
  // Changes whenever staged data may be overwritten (a reset, or the ring wrapping around):
  // a device pointer from an earlier epoch must not be reused.
  uint64_t epoch() const { return epoch_; }

 private:
  struct Entry {
    const void* host = nullptr;
    std::vector<char> bytes;
    void* device = nullptr;
  };
  static constexpr size_t kMaxEntries = 16;

  Result<void*> Copy(const void* src, size_t bytes, cudaStream_t stream, bool copy, bool may_wait) {
    const size_t size = (bytes + 255) & ~static_cast<size_t>(255);
    if (size > kBytes) return ResourceExhausted("staging buffer too small for " + std::to_string(bytes) + " bytes");
    if (offset_ + size > kBytes) {
      if (!may_wait) return ResourceExhausted("a step graph stages more than " + std::to_string(kBytes) + " bytes");
      FERRY_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
      Reset();
    }
    char* h = static_cast<char*>(host_) + offset_;
    char* d = static_cast<char*>(device_) + offset_;
    std::memcpy(h, src, bytes);
    if (copy) FERRY_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(d, h, bytes, cudaMemcpyHostToDevice, stream));
    offset_ += size;
    return static_cast<void*>(d);
  }

  void* host_ = nullptr;
  void* device_ = nullptr;
  size_t offset_ = 0;
  uint64_t epoch_ = 1;
  std::vector<Entry> entries_;  // [0, used_): staged since the last reset
  size_t used_ = 0;
};

// A prepared weight on the GPU.
struct CudaLinear {
  Tensor weight;       // [out, in] in the GEMM's input dtype (act dtype, int8 or fp8)
  Tensor scales;       // f32 [out]: int8 / fp8 per-channel scales (undefined otherwise)
  Tensor smooth;       // f32 [in]: SmoothQuant factors for W8A8 (undefined: none)
  Tensor bias;         // [out] or undefined: the activation dtype for float kinds (cuBLASLt adds
                       // it in its epilogue), f32 for int8 and fp8 (added by ferry's epilogue)
  WeightFormat format = WeightFormat::kNative;
  cuda::GemmKind kind = cuda::GemmKind::kBF16;
  std::vector<std::optional<cuda::GemmChoice>> choices;  // tuned per M bucket (empty: heuristic)
};

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(const CudaBackendOptions& o) : options_(o) {}

  Status Init() {
    FERRY_CUDA_RETURN_IF_ERROR(cudaSetDevice(options_.device));
    FERRY_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    pool_ = std::make_shared<DevicePool>(options_.device);
    graph_pool_ = std::make_shared<DevicePool>(options_.device);
    FERRY_RETURN_IF_ERROR(staging_.Init());
    FERRY_ASSIGN_OR_RETURN(gemm_, cuda::LtGemm::Create(32 << 20));
    cudaDeviceProp prop{};
    FERRY_CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&prop, options_.device));
    name_ = std::string("cuda:") + prop.name + " (sm_" + std::to_string(prop.major) + std::to_string(prop.minor) + ")";
    return Status::Ok();
  }
  ~CudaBackend() override {
    if (stream_ != nullptr) {
      cudaStreamSynchronize(stream_);
      graphs_.clear();
      cudaStreamDestroy(stream_);
    }
  }

  Device device() const override { return Device::Cuda(options_.device); }
  std::string Name() const override { return name_; }
  DType activation_dtype() const override { return options_.activations; }
  DType kv_cache_dtype() const override { return options_.kv_cache; }

  // Tensors the models allocate. While a step graph is captured they come from the graphs'
  // own pool and are recorded; while it replays, the recorded buffers are handed out again
  // in the same order, so the caller finds the graph's results where the graph writes them.
  Tensor Allocate(const Shape& shape, DType dtype) override {
    if (mode_ == GraphMode::kReplay) {
      const size_t i = alloc_cursor_++;
      if (i < graph_->buffers.size() && graph_->buffers[i].shape == shape && graph_->buffers[i].dtype == dtype) {
        return Tensor::FromBorrowed(graph_->buffers[i].data, shape, dtype, nullptr, device());
      }
      Diverged("allocation " + std::to_string(i) + " differs from the recording");
      return Scratch(shape, dtype);  // keeps the body running; RunGraph fails the step
    }
    Tensor t = Scratch(shape, dtype);
    if (mode_ == GraphMode::kCapture && t.defined()) graph_->buffers.push_back({t.raw(), shape, dtype});
    return t;
  }

  // --- weights ---------------------------------------------------------------------------

  Status PrepareLinear(LinearWeight& w) override;
  Result<SerializedLinear> SerializeLinear(const LinearWeight& w) override;
  Result<LinearWeight> DeserializeLinear(const SerializedLinear& s) override;
  Status Linear(const Tensor& x, const LinearWeight& w, Tensor& y) override;
  Result<std::string> TuneLinear(LinearWeight& w) override;
  std::string DescribeTuning() const override {
    return json{{"choice", "cuBLASLt algorithm (or the fused int8 small-M kernel) per weight shape and M bucket, "
                           "timed in CUDA graphs on this GPU"}}
        .dump();
  }
  Result<io::EngineFingerprint> Fingerprint() const override { return CudaFingerprint(options_.device); }
  Status CheckFingerprint(const io::EngineFingerprint& fp) const override {
    return CheckCudaFingerprint(fp, options_.device);
  }

  // --- elementwise -----------------------------------------------------------------------

  Status Embedding(const Tensor& table, const int32_t* ids, int64_t n, Tensor& out) override {
    FERRY_ASSIGN_OR_RETURN(void* d_ids, Stage(ids, n * sizeof(int32_t)));
    if (replaying()) return Status::Ok();
    FERRY_ASSIGN_OR_RETURN(const Tensor* t, Resident(table));
    return cuda::EmbeddingGather(t->raw(), t->dtype(), static_cast<const int32_t*>(d_ids), n, t->dim(1), out.raw(),
                                 out.dtype(), stream_);
  }
  Status RmsNorm(const Tensor& x, const Tensor& gamma, float eps, Tensor& out) override {
    if (replaying()) return Status::Ok();
    FERRY_ASSIGN_OR_RETURN(const Tensor* g, ResidentF32(gamma));
    return cuda::RmsNorm(x.raw(), g->data<float>(), eps, x.dim(0), x.dim(1), out.raw(), x.dtype(), stream_);
  }
  Status AddRmsNorm(Tensor& residual, const Tensor& delta, const Tensor& gamma, float eps, Tensor& out) override {
    if (replaying()) return Status::Ok();
    FERRY_ASSIGN_OR_RETURN(const Tensor* g, ResidentF32(gamma));
    return cuda::AddRmsNorm(residual.raw(), delta.raw(), g->data<float>(), eps, residual.dim(0), residual.dim(1),
                            out.raw(), residual.dtype(), stream_);
  }
  Status LayerNorm(const Tensor& x, const Tensor& delta, const Tensor& gamma, const Tensor& beta, float eps,
                   Tensor& out) override {
    if (replaying()) return Status::Ok();
    FERRY_ASSIGN_OR_RETURN(const Tensor* g, ResidentF32(gamma));
    FERRY_ASSIGN_OR_RETURN(const Tensor* b, ResidentF32(beta));
    return cuda::LayerNorm(x.raw(), delta.defined() ? delta.raw() : nullptr, g->data<float>(), b->data<float>(), eps,
                           x.dim(0), x.dim(1), out.raw(), x.dtype(), stream_);
  }
  Status Rope(Tensor& q, Tensor& k, int num_heads, int num_kv_heads, const int32_t* positions,
              const RopeTable& table) override {
    const int64_t T = q.dim(0);
    FERRY_ASSIGN_OR_RETURN(void* d_pos, Stage(positions, T * sizeof(int32_t)));
    if (replaying()) return Status::Ok();
    FERRY_ASSIGN_OR_RETURN(const float* inv_freq, RopeFrequencies(table));
    return cuda::Rope(q.raw(), k.raw(), T, num_heads, num_kv_heads, table.head_dim,
                      static_cast<const int32_t*>(d_pos), inv_freq, q.dtype(), stream_);
  }
  Status SiluMul(const Tensor& gate_up, Tensor& out) override {
    if (replaying()) return Status::Ok();
    return cuda::SiluMul(gate_up.raw(), gate_up.dim(0), out.dim(1), out.raw(), out.dtype(), stream_);
  }
  Status Gelu(Tensor& x) override {
    if (replaying()) return Status::Ok();
    return cuda::Gelu(x.raw(), x.numel(), x.dtype(), stream_);
  }
  Status Tanh(Tensor& x) override {
    if (replaying()) return Status::Ok();
    return cuda::Tanh(x.raw(), x.numel(), x.dtype(), stream_);
  }
  Status Add(Tensor& x, const Tensor& y) override {
    if (replaying()) return Status::Ok();
    return cuda::Add(x.raw(), y.raw(), x.numel(), x.dtype(), stream_);
  }
  Status PoolRows(const Tensor& x, const std::vector<SeqSpan>& spans, bool mean, Tensor& out) override {
    const int64_t S = static_cast<int64_t>(spans.size());
    if (out.dim(0) != S || out.dim(1) != x.dim(1) || out.dtype() != x.dtype()) {
      return InvalidArgument("PoolRows: cannot pool " + x.DebugString() + " into " + out.DebugString());
    }
    std::vector<int32_t>& rows = pool_rows_;
    rows.resize(static_cast<size_t>(2 * S));
    for (int64_t s = 0; s < S; ++s) {
      if (spans[s].q_begin < 0 || spans[s].q_len <= 0 || spans[s].q_begin + spans[s].q_len > x.dim(0)) {
        return InvalidArgument("PoolRows: span outside the rows");
      }
      rows[s] = spans[s].q_begin;
      rows[S + s] = spans[s].q_len;
    }
    FERRY_ASSIGN_OR_RETURN(void* d_rows, Stage(rows.data(), rows.size() * sizeof(int32_t)));
    if (replaying()) return Status::Ok();
    const auto* begin = static_cast<const int32_t*>(d_rows);
    if (!mean) return cuda::EmbeddingGather(x.raw(), x.dtype(), begin, S, x.dim(1), out.raw(), out.dtype(), stream_);
    return cuda::MeanRows(x.raw(), x.dim(1), begin, begin + S, S, out.raw(), x.dtype(), stream_);
  }
  Status CopyColumns(const Tensor& src, int64_t col_begin, Tensor& dst) override {
    if (replaying()) return Status::Ok();
    return cuda::CopyColumns(src.raw(), src.dim(0), src.dim(1), col_begin, dst.raw(), dst.dim(1), src.dtype(), stream_);
  }

  // --- KV cache and attention ------------------------------------------------------------

  Status WriteKv(const Tensor& k, const Tensor& v, const int32_t* slots, KvLayer& layer) override {
    const int64_t T = k.dim(0);
    const int kv_heads = static_cast<int>(layer.k.dim(1));
    const int head_dim = static_cast<int>(layer.k.dim(3));
    FERRY_ASSIGN_OR_RETURN(void* d_slots, Stage(slots, T * sizeof(int32_t)));
    if (replaying()) return Status::Ok();
    return cuda::WriteKv(k.raw(), v.raw(), static_cast<const int32_t*>(d_slots), T, kv_heads, head_dim,
                         layer.block_tokens, layer.k.raw(), layer.v.raw(), k.dtype(), layer.k.dtype(), stream_);
  }
  Status RopeQkvWriteKv(const Tensor& qkv, int num_heads, int num_kv_heads, const int32_t* positions,
                        const RopeTable& table, const int32_t* slots, KvLayer& layer, Tensor& q, Tensor& k,
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
    FERRY_ASSIGN_OR_RETURN(void* d_pos, Stage(positions, T * sizeof(int32_t)));
    FERRY_ASSIGN_OR_RETURN(void* d_slots, Stage(slots, T * sizeof(int32_t)));
    if (replaying()) return Status::Ok();
    FERRY_ASSIGN_OR_RETURN(const float* inv_freq, RopeFrequencies(table));
    return cuda::RopeQkvWriteKv(qkv.raw(), q.raw(), T, num_heads, num_kv_heads, head_dim,
                                static_cast<const int32_t*>(d_pos), inv_freq, static_cast<const int32_t*>(d_slots),
                                layer.block_tokens, layer.k.raw(), layer.v.raw(), qkv.dtype(), layer.k.dtype(),
                                stream_);
  }
  Status PagedAttention(const Tensor& q, const KvLayer& layer, const std::vector<SeqSpan>& spans,
                        const AttentionParams& params, Tensor& out) override;
  Status DenseAttention(const Tensor& q, const Tensor& k, const Tensor& v, const std::vector<SeqSpan>& spans,
                        const AttentionParams& params, Tensor& out) override;
  Status DenseAttentionQkv(const Tensor& qkv, const std::vector<SeqSpan>& spans, const AttentionParams& params,
                           Tensor& q, Tensor& k, Tensor& v, Tensor& out) override;

  // --- host transfers --------------------------------------------------------------------

  Result<Tensor> ToHost(const Tensor& t) override {
    if (t.device().is_cpu()) return t.ToF32();
    FERRY_RETURN_IF_ERROR(NotInGraph("ToHost"));
    Tensor f = t;
    if (t.dtype() != DType::kF32) {
      f = Scratch(t.shape(), DType::kF32);
      FERRY_RETURN_IF_ERROR(cuda::Convert(t.raw(), t.dtype(), f.raw(), DType::kF32, t.numel(), stream_));
    }
    Tensor host = Tensor::Empty(t.shape(), DType::kF32);
    FERRY_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(host.raw(), f.raw(), host.nbytes(), cudaMemcpyDeviceToHost, stream_));
    FERRY_RETURN_IF_ERROR(Synchronize());
    return host;
  }
  Status Synchronize() override {
    FERRY_RETURN_IF_ERROR(NotInGraph("Synchronize"));
    FERRY_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
    staging_.Reset();
    return Status::Ok();
  }

  // --- step graphs and sampling ------------------------------------------------------------

  bool supports_graphs() const override { return true; }
  Status RunGraph(const GraphKey& key, const std::function<Status()>& body) override;
  // Records `body` as the graph `id` and launches it once (RunGraph's first sight).
  Status Capture(const std::pair<int64_t, int64_t>& id, const GraphKey& key, const std::function<Status()>& body);
  int graph_count() const override { return static_cast<int>(graphs_.size()); }
  void ReleaseGraphs(int64_t owner) override {
    if (mode_ != GraphMode::kOff) return;
    cudaStreamSynchronize(stream_);
    std::erase_if(graphs_, [owner](const auto& g) { return g.first.first == owner; });
    std::erase_if(eager_only_, [owner](const auto& id) { return id.first == owner; });
  }
  bool samples_on_device() const override { return true; }
  Status SampleTokens(const Tensor& logits, std::span<const TokenSampling> rows, std::vector<int32_t>& tokens) override;

 private:
  enum class GraphMode : uint8_t { kOff, kCapture, kReplay };
  struct GraphScope;

  // One captured step: the executable graph, the buffers the body allocated (in order) and
  // the sizes of everything it staged or launched with host-side bounds, which a replay's
  // body must repeat exactly.
  struct StepGraph {
    struct Buffer {
      void* data = nullptr;
      Shape shape;
      DType dtype = DType::kF32;
    };
    cudaGraphExec_t exec = nullptr;
    std::vector<Buffer> buffers;
    std::vector<int64_t> trace;
    StepGraph() = default;
    StepGraph(const StepGraph&) = delete;
    StepGraph& operator=(const StepGraph&) = delete;
    ~StepGraph() {
      if (exec != nullptr) cudaGraphExecDestroy(exec);
    }
  };

  bool replaying() const { return mode_ == GraphMode::kReplay; }
  Status NotInGraph(const char* what) const {
    if (mode_ == GraphMode::kOff) return Status::Ok();
    return FailedPrecondition(std::string(what) + " cannot run inside a step graph");
  }
  void Diverged(const std::string& what) {
    if (graph_error_.ok()) graph_error_ = Internal("step graph replay diverged: " + what);
  }
  // Records (capture) or checks (replay) a size that shapes the recorded work.
  void Trace(int64_t value) {
    if (mode_ == GraphMode::kCapture) {
      graph_->trace.push_back(value);
    } else if (mode_ == GraphMode::kReplay) {
      const size_t i = trace_cursor_++;
      if (i >= graph_->trace.size() || graph_->trace[i] != value) {
        Diverged("traced size " + std::to_string(i) + " is " + std::to_string(value));
      }
    }
  }
  // Device memory the backend itself needs (never replayed to the caller): from the graphs'
  // pool while capturing, so that no eager work ever shares a recorded buffer.
  Tensor Scratch(const Shape& shape, DType dtype) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    DevicePool& pool = mode_ == GraphMode::kCapture ? *graph_pool_ : *pool_;
    auto block = pool.Get(static_cast<size_t>(n) * DTypeSize(dtype));
    if (!block.ok()) {
      FERRY_LOG_ERROR("GPU allocation of {} bytes failed: {}", n * DTypeSize(dtype), block.status().message());
      return Tensor();
    }
    std::shared_ptr<void> mem = std::move(block).value();
    return Tensor::FromBorrowed(mem.get(), shape, dtype, mem, device());
  }
  Result<void*> Stage(const void* host, size_t bytes) {
    if (mode_ == GraphMode::kOff) return staging_.Put(host, bytes, stream_);
    Trace(static_cast<int64_t>(bytes));
    FERRY_ASSIGN_OR_RETURN(void* slot, staging_.Put(host, bytes, stream_, /*copy=*/mode_ == GraphMode::kCapture,
                                                    /*may_wait=*/false));
    Trace(static_cast<int64_t>(reinterpret_cast<uintptr_t>(slot)));  // the same slot, not just the same size
    return slot;
  }
  Result<Tensor> UploadBytes(const void* host, const Shape& shape, DType dtype);
  // Dense attention over q, k and v rows `*_stride` elements apart (0: packed).
  Status RunDenseAttention(const void* q, const void* k, const void* v, int64_t q_stride, int64_t kv_stride,
                           DType dtype, int64_t tokens, const std::vector<SeqSpan>& spans,
                           const AttentionParams& params, Tensor& out);
  // The GEMM of y = x · W^T: problem, pointers and (W8A8, fp8) the activations quantized per
  // token into q and row_scales, which must live until the GEMM has run.
  Status SetUpGemm(const Tensor& x, const CudaLinear& lin, int64_t n, Tensor& y, cuda::GemmProblem& p,
                   cuda::GemmArgs& a, Tensor& q, Tensor& row_scales);

  // A host weight tensor's device copy (uploaded once, keyed by its address); device
  // tensors are returned as they are.
  Result<const Tensor*> Resident(const Tensor& t) { return Upload(t, t.dtype()); }
  Result<const Tensor*> ResidentF32(const Tensor& t) { return Upload(t, DType::kF32); }
  Result<const Tensor*> Upload(const Tensor& t, DType dtype) {
    if (!t.device().is_cpu()) return &t;
    std::lock_guard<std::mutex> lock(uploads_mu_);
    auto it = uploads_.find(t.raw());
    if (it != uploads_.end()) return &it->second;
    Tensor host = dtype == DType::kF32 ? t.ToF32() : t;
    Tensor dev = Scratch(host.shape(), host.dtype());
    if (!dev.defined()) return ResourceExhausted("no GPU memory for a " + t.DebugString() + " weight");
    FERRY_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dev.raw(), host.raw(), host.nbytes(), cudaMemcpyHostToDevice, stream_));
    FERRY_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
    keep_.push_back(t);  // the host address stays valid (and unique) while cached
    return &uploads_.emplace(t.raw(), std::move(dev)).first->second;
  }
  Result<const float*> RopeFrequencies(const RopeTable& table) {
    std::lock_guard<std::mutex> lock(uploads_mu_);
    auto it = rope_.find(&table);
    if (it == rope_.end() || it->second.first != table.inv_freq) {
      Tensor dev = Scratch({static_cast<int64_t>(table.inv_freq.size())}, DType::kF32);
      FERRY_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dev.raw(), table.inv_freq.data(), dev.nbytes(),
                                                 cudaMemcpyHostToDevice, stream_));
      FERRY_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
      it = rope_.insert_or_assign(&table, std::make_pair(table.inv_freq, dev)).first;
    }
    return it->second.second.data<float>();
  }

  const CudaBackendOptions options_;
  std::string name_;
  cudaStream_t stream_ = nullptr;
  std::shared_ptr<DevicePool> pool_;
  Staging staging_;
  std::unique_ptr<cuda::LtGemm> gemm_;
  std::vector<int32_t> meta_;  // attention batch description, reused between calls
  std::vector<cuda::SamplingParamsGpu> sample_params_;
  std::vector<int32_t> pool_rows_;  // PoolRows: first rows, then lengths
  // TuneLinear's choices by (kind, out, in, bias): weights of one shape are timed once.
  std::map<std::tuple<int, int64_t, int64_t, bool>, std::vector<std::optional<cuda::GemmChoice>>> tuned_;
  std::vector<int32_t> history_;  // SampleTokens: every row's history, back to back
  std::vector<int64_t> offsets_;
  // The last attention batch staged in this staging epoch (layers after the first reuse it).
  std::vector<SeqSpan> meta_spans_;
  const void* meta_device_ = nullptr;
  uint64_t meta_epoch_ = 0;
  // Step graphs.
  GraphMode mode_ = GraphMode::kOff;
  StepGraph* graph_ = nullptr;  // the one being captured or replayed
  size_t alloc_cursor_ = 0;
  size_t trace_cursor_ = 0;
  int plan_context_ = 0;
  Status graph_error_;
  std::shared_ptr<DevicePool> graph_pool_;
  std::map<std::pair<int64_t, int64_t>, std::unique_ptr<StepGraph>> graphs_;  // by (owner, id)
  std::set<std::pair<int64_t, int64_t>> eager_only_;  // buckets whose recording failed
  bool capture_open_ = false;
  std::mutex uploads_mu_;
  std::unordered_map<const void*, Tensor> uploads_;  // GUARDED_BY(uploads_mu_)
  std::vector<Tensor> keep_;                         // GUARDED_BY(uploads_mu_)
  std::unordered_map<const RopeTable*, std::pair<std::vector<float>, Tensor>> rope_;  // GUARDED_BY(uploads_mu_)
};

}  // namespace

// --- linear layers ---------------------------------------------------------------------------

namespace {

// Host-side per-output-channel symmetric int8 quantization of w [n, k] (f32), optionally
// after multiplying column j by smooth[j] (SmoothQuant: x / s, W * s).
void QuantizeWeightInt8(const float* w, int64_t n, int64_t k, const float* smooth, std::vector<int8_t>& q,
                        std::vector<float>& scales) {
  q.resize(static_cast<size_t>(n * k));
  scales.resize(static_cast<size_t>(n));
  std::vector<float> row(static_cast<size_t>(k));
  for (int64_t r = 0; r < n; ++r) {
    float amax = 0.0f;
    for (int64_t j = 0; j < k; ++j) {
      row[j] = w[r * k + j] * (smooth != nullptr ? smooth[j] : 1.0f);
      amax = std::max(amax, std::fabs(row[j]));
    }
    const float scale = amax / 127.0f;
    scales[r] = scale;
    const float inv = scale > 0.0f ? 1.0f / scale : 0.0f;
    for (int64_t j = 0; j < k; ++j) {
      q[r * k + j] = static_cast<int8_t>(std::clamp(std::nearbyint(row[j] * inv), -127.0f, 127.0f));
    }
  }
}

// Per-output-channel fp8 e4m3: scale = max|w| / 448.
void QuantizeWeightFp8(const float* w, int64_t n, int64_t k, std::vector<uint8_t>& q, std::vector<float>& scales) {
  q.resize(static_cast<size_t>(n * k));
  scales.resize(static_cast<size_t>(n));
  std::vector<float> scaled(static_cast<size_t>(k));
  for (int64_t r = 0; r < n; ++r) {
    float amax = 0.0f;
    for (int64_t j = 0; j < k; ++j) amax = std::max(amax, std::fabs(w[r * k + j]));
    const float scale = amax / 448.0f;
    scales[r] = scale;
    const float inv = scale > 0.0f ? 1.0f / scale : 0.0f;
    for (int64_t j = 0; j < k; ++j) scaled[j] = w[r * k + j] * inv;
    ConvertFromF32(DType::kF8E4M3, scaled.data(), q.data() + r * k, static_cast<size_t>(k));
  }
}

cuda::GemmKind FloatKind(DType act) {
  switch (act) {
    case DType::kBF16: return cuda::GemmKind::kBF16;
    case DType::kF16: return cuda::GemmKind::kF16;
    default: return cuda::GemmKind::kF32;
  }
}

}  // namespace

Result<Tensor> CudaBackend::UploadBytes(const void* host, const Shape& shape, DType dtype) {
  Tensor dev = Scratch(shape, dtype);
  if (!dev.defined()) return ResourceExhausted("out of GPU memory for a weight");
  FERRY_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dev.raw(), host, dev.nbytes(), cudaMemcpyHostToDevice, stream_));
  FERRY_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
  return dev;
}

Status CudaBackend::PrepareLinear(LinearWeight& w) {
  if (!w.weight.defined() || w.weight.rank() != 2) return InvalidArgument("PrepareLinear: weight must be [out, in]");
  const int64_t n = w.weight.dim(0), k = w.weight.dim(1);
  auto lin = std::make_shared<CudaLinear>();
  lin->format = w.format;
  if (w.format == WeightFormat::kInt8W8A8 || w.format == WeightFormat::kFp8) {
    // int8 (IMMA) and fp8 GEMMs take only some shapes (N and K multiples of 4, or 16): a
    // layer they cannot run, such as a classifier head of 3 labels or a vocabulary of
    // 50257, stays in the activation dtype, as TensorRT keeps such layers in higher precision.
    cuda::GemmProblem probe;
    probe.kind = w.format == WeightFormat::kFp8 ? cuda::GemmKind::kFp8 : cuda::GemmKind::kInt8;
    probe.out_dtype = options_.activations == DType::kF32 ? DType::kBF16 : options_.activations;
    probe.m = 1;
    probe.n = n;
    probe.k = k;
    probe.has_bias = w.bias.defined();
    probe.fp8_scaling = cuda::Fp8Scaling::kPerRowCol;
    const Status fits = gemm_->CheckProblem(probe);
    if (fits.code() == StatusCode::kInvalidArgument) {
      FERRY_LOG_INFO("a [{}, {}] weight stays in {} ({} GEMMs cannot take it: {})", n, k,
                     DTypeName(options_.activations), WeightFormatName(w.format), fits.message());
      lin->format = WeightFormat::kNative;
    } else if (!fits.ok()) {
      return fits;
    }
  }
  const Tensor f = w.weight.ToF32();
  switch (lin->format) {
    case WeightFormat::kNative:
    case WeightFormat::kF32:
    case WeightFormat::kBF16:
    case WeightFormat::kF16: {
      // On the GPU a float weight takes the activations' dtype: cuBLASLt multiplies like types.
      const DType act = options_.activations;
      lin->kind = FloatKind(act);
      Tensor host = Tensor::Empty({n, k}, act);
      ConvertFromF32(act, f.data<float>(), host.raw(), static_cast<size_t>(n * k));
      FERRY_ASSIGN_OR_RETURN(lin->weight, UploadBytes(host.raw(), {n, k}, act));
      break;
    }
    case WeightFormat::kInt8:
    case WeightFormat::kInt8W8A8: {
      const bool w8a8 = lin->format == WeightFormat::kInt8W8A8;
      lin->kind = w8a8 ? cuda::GemmKind::kInt8 : cuda::GemmKind::kInt8WeightOnly;
      Tensor smooth_host;
      if (w8a8 && w.smooth.defined()) {
        smooth_host = w.smooth.ToF32();
        if (smooth_host.numel() != k) return InvalidArgument("SmoothQuant factors do not match the weight");
        FERRY_ASSIGN_OR_RETURN(lin->smooth, UploadBytes(smooth_host.raw(), {k}, DType::kF32));
      }
      std::vector<int8_t> q;
      std::vector<float> scales;
      QuantizeWeightInt8(f.data<float>(), n, k, smooth_host.defined() ? smooth_host.data<float>() : nullptr, q, scales);
      FERRY_ASSIGN_OR_RETURN(lin->weight, UploadBytes(q.data(), {n, k}, DType::kI8));
      FERRY_ASSIGN_OR_RETURN(lin->scales, UploadBytes(scales.data(), {n}, DType::kF32));
      break;
    }
    case WeightFormat::kFp8: {
      lin->kind = cuda::GemmKind::kFp8;
      std::vector<uint8_t> q;
      std::vector<float> scales;
      QuantizeWeightFp8(f.data<float>(), n, k, q, scales);
      FERRY_ASSIGN_OR_RETURN(lin->weight, UploadBytes(q.data(), {n, k}, DType::kF8E4M3));
      FERRY_ASSIGN_OR_RETURN(lin->scales, UploadBytes(scales.data(), {n}, DType::kF32));
      break;
    }
  }
  if (w.bias.defined()) {
    const Tensor b = w.bias.ToF32();
    const bool float_kind = lin->kind == cuda::GemmKind::kBF16 || lin->kind == cuda::GemmKind::kF16 ||
                            lin->kind == cuda::GemmKind::kF32;
    const DType bias_dtype = float_kind ? options_.activations : DType::kF32;
    Tensor host = Tensor::Empty({n}, bias_dtype);
    ConvertFromF32(bias_dtype, b.data<float>(), host.raw(), static_cast<size_t>(n));
    FERRY_ASSIGN_OR_RETURN(lin->bias, UploadBytes(host.raw(), {n}, bias_dtype));
  }
  w.out = n;
  w.in = k;
  w.format = lin->format;
  w.packed = lin;
  w.weight = Tensor();  // the GPU copy is what runs
  w.smooth = Tensor();
  return Status::Ok();
}

Status CudaBackend::SetUpGemm(const Tensor& x, const CudaLinear& lin, int64_t n, Tensor& y, cuda::GemmProblem& p,
                              cuda::GemmArgs& a, Tensor& q, Tensor& row_scales) {
  const int64_t m = x.dim(0), k = x.dim(1);
  p.kind = lin.kind;
  p.out_dtype = y.dtype();
  p.m = m;
  p.n = n;
  p.k = k;
  p.has_bias = lin.bias.defined();
  p.bias_dtype = p.has_bias ? lin.bias.dtype() : DType::kF32;
  a.x = x.raw();
  a.w = lin.weight.raw();
  a.y = y.raw();
  a.bias = p.has_bias ? lin.bias.raw() : nullptr;
  if (lin.kind == cuda::GemmKind::kInt8 || lin.kind == cuda::GemmKind::kFp8) {
    // Per-token dynamic activation quantization.
    row_scales = Scratch({m}, DType::kF32);
    if (lin.kind == cuda::GemmKind::kInt8) {
      q = Scratch({m, k}, DType::kI8);
      FERRY_RETURN_IF_ERROR(cuda::QuantizeRowsInt8(x.raw(), m, k, lin.smooth.defined() ? lin.smooth.data<float>()
                                                                                       : nullptr,
                                                   q.data<int8_t>(), row_scales.data<float>(), x.dtype(), stream_));
    } else {
      q = Scratch({m, k}, DType::kF8E4M3);
      FERRY_RETURN_IF_ERROR(cuda::QuantizeRowsFp8(x.raw(), m, k, q.raw(), row_scales.data<float>(), x.dtype(), stream_));
      p.fp8_scaling = cuda::Fp8Scaling::kPerRowCol;
    }
    a.x = q.raw();
    a.x_scale = row_scales.data<float>();
  }
  if (lin.kind == cuda::GemmKind::kInt8 || lin.kind == cuda::GemmKind::kFp8 ||
      lin.kind == cuda::GemmKind::kInt8WeightOnly) {
    a.w_scale = lin.scales.data<float>();
  }
  return Status::Ok();
}

Status CudaBackend::Linear(const Tensor& x, const LinearWeight& w, Tensor& y) {
  const auto* lin = static_cast<const CudaLinear*>(w.packed.get());
  if (lin == nullptr) return FailedPrecondition("Linear: weight was not prepared for the CUDA backend");
  const int64_t m = x.dim(0), n = w.out_features(), k = w.in_features();
  if (x.dim(1) != k || y.dim(0) != m || y.dim(1) != n) {
    return InvalidArgument("Linear: shapes x " + x.DebugString() + ", y " + y.DebugString() + " do not fit [" +
                           std::to_string(n) + ", " + std::to_string(k) + "]");
  }
  if (m == 0 || replaying()) return Status::Ok();
  cuda::GemmProblem p;
  cuda::GemmArgs a;
  Tensor q, row_scales;
  FERRY_RETURN_IF_ERROR(SetUpGemm(x, *lin, n, y, p, a, q, row_scales));
  p.small_m_max = w.small_m_max;
  const cuda::GemmChoice* choice = nullptr;
  const int bucket = cuda::GemmMBucket(m);
  if (bucket < static_cast<int>(lin->choices.size()) && lin->choices[bucket].has_value()) choice = &*lin->choices[bucket];
  return gemm_->Run(p, a, stream_, choice);
}

Result<std::string> CudaBackend::TuneLinear(LinearWeight& w) {
  auto* lin = static_cast<CudaLinear*>(w.packed.get());
  if (lin == nullptr) return FailedPrecondition("TuneLinear: weight was not prepared for the CUDA backend");
  FERRY_RETURN_IF_ERROR(NotInGraph("TuneLinear"));
  const int64_t n = w.out_features(), k = w.in_features();
  const auto key = std::make_tuple(static_cast<int>(lin->kind), n, k, lin->bias.defined());
  auto it = tuned_.find(key);
  if (it != tuned_.end()) {
    lin->choices = it->second;
    return std::string();
  }
  const DType act = options_.activations;
  json report = {{"kind", std::string(cuda::GemmKindName(lin->kind))}, {"n", n}, {"k", k}, {"buckets", json::array()}};
  std::vector<std::optional<cuda::GemmChoice>> choices(cuda::kGemmMBuckets);
  // Inputs of the largest bucket, in the activation dtype; smaller buckets use their first rows.
  const int64_t max_m = cuda::GemmBucketTuneM(cuda::kGemmMBuckets - 1);
  std::vector<float> host(static_cast<size_t>(max_m * k));
  uint64_t h = 0x243F6A8885A308D3ull;
  for (float& v : host) {
    h = h * 6364136223846793005ull + 1442695040888963407ull;
    v = static_cast<float>(static_cast<int64_t>(h >> 40) - (1 << 23)) / static_cast<float>(1 << 23);
  }
  FERRY_ASSIGN_OR_RETURN(Tensor x32, UploadBytes(host.data(), {max_m, k}, DType::kF32));
  Tensor x = Scratch({max_m, k}, act);
  Tensor y = Scratch({max_m, n}, act);
  if (!x.defined() || !y.defined()) return ResourceExhausted("no GPU memory to tune a [" + std::to_string(n) + ", " +
                                                             std::to_string(k) + "] weight");
  FERRY_RETURN_IF_ERROR(cuda::Convert(x32.raw(), DType::kF32, x.raw(), act, max_m * k, stream_));
  for (int b = 0; b < cuda::kGemmMBuckets; ++b) {
    const int64_t m = cuda::GemmBucketTuneM(b);
    Tensor xb = x.Slice(0, m), yb = y.Slice(0, m);
    cuda::GemmProblem p;
    cuda::GemmArgs a;
    Tensor q, row_scales;
    FERRY_RETURN_IF_ERROR(SetUpGemm(xb, *lin, n, yb, p, a, q, row_scales));
    FERRY_ASSIGN_OR_RETURN(cuda::GemmChoice choice, gemm_->Tune(p, a, stream_));
    report["buckets"].push_back({{"m", m}, {"choice", choice.ToString()}, {"us", choice.measured_us}});
    choices[b] = choice;
  }
  lin->choices = choices;
  tuned_.emplace(key, std::move(choices));
  return report.dump();
}

// A CUDA engine's linear: layout JSON plus blobs (weight, scales, smooth, bias) copied to the host.
Result<SerializedLinear> CudaBackend::SerializeLinear(const LinearWeight& w) {
  const auto* lin = static_cast<const CudaLinear*>(w.packed.get());
  if (lin == nullptr) return FailedPrecondition("SerializeLinear: weight was not prepared");
  nlohmann::json layout = {{"backend", "cuda"}, {"format", WeightFormatName(lin->format)},
                           {"kind", std::string(cuda::GemmKindName(lin->kind))}, {"out", w.out_features()},
                           {"in", w.in_features()}};
  SerializedLinear s;
  auto add = [&](const char* name, const Tensor& t) -> Status {
    if (!t.defined()) return Status::Ok();
    Tensor host = Tensor::Empty(t.shape(), t.dtype());
    FERRY_CUDA_RETURN_IF_ERROR(cudaMemcpy(host.raw(), t.raw(), t.nbytes(), cudaMemcpyDeviceToHost));
    layout["blobs"].push_back(name);
    s.blobs.push_back(std::move(host));
    return Status::Ok();
  };
  FERRY_RETURN_IF_ERROR(add("weight", lin->weight));
  FERRY_RETURN_IF_ERROR(add("scales", lin->scales));
  FERRY_RETURN_IF_ERROR(add("smooth", lin->smooth));
  FERRY_RETURN_IF_ERROR(add("bias", lin->bias));
  json choices = json::array();
  for (const auto& c : lin->choices) choices.push_back(c ? json(c->ToString()) : json(nullptr));
  layout["gemm_choices"] = choices;
  s.layout_json = layout.dump();
  return s;
}

Result<LinearWeight> CudaBackend::DeserializeLinear(const SerializedLinear& s) {
  json layout;
  try {
    layout = json::parse(s.layout_json);
  } catch (const json::exception& e) {
    return DataLoss(std::string("bad linear layout: ") + e.what());
  }
  if (layout.value("backend", "") != "cuda") {
    return FailedPrecondition("this weight was packed for another backend; rebuild the engine with --device cuda");
  }
  auto lin = std::make_shared<CudaLinear>();
  FERRY_ASSIGN_OR_RETURN(lin->format, ParseWeightFormat(layout.value("format", "")));
  const std::string kind = layout.value("kind", "");
  bool known = false;
  for (auto k : {cuda::GemmKind::kF32, cuda::GemmKind::kBF16, cuda::GemmKind::kF16, cuda::GemmKind::kFp8,
                 cuda::GemmKind::kInt8, cuda::GemmKind::kInt8WeightOnly}) {
    if (kind == cuda::GemmKindName(k)) {
      lin->kind = k;
      known = true;
    }
  }
  if (!known) return DataLoss("unknown GEMM kind '" + kind + "'");
  const json names = layout.value("blobs", json::array());
  if (names.size() != s.blobs.size()) return DataLoss("linear layout names " + std::to_string(names.size()) + " blobs");
  for (size_t i = 0; i < names.size(); ++i) {
    const Tensor& b = s.blobs[i];
    FERRY_ASSIGN_OR_RETURN(Tensor dev, UploadBytes(b.raw(), b.shape(), b.dtype()));
    const std::string name = names[i];
    if (name == "weight") lin->weight = dev;
    else if (name == "scales") lin->scales = dev;
    else if (name == "smooth") lin->smooth = dev;
    else if (name == "bias") lin->bias = dev;
    else return DataLoss("unknown linear blob '" + name + "'");
  }
  if (!lin->weight.defined() || lin->weight.rank() != 2) return DataLoss("linear without a weight blob");
  for (const json& c : layout.value("gemm_choices", json::array())) {
    if (c.is_string()) {
      FERRY_ASSIGN_OR_RETURN(cuda::GemmChoice choice, cuda::GemmChoice::FromString(c.get<std::string>()));
      lin->choices.push_back(choice);
    } else {
      lin->choices.push_back(std::nullopt);
    }
  }
  LinearWeight w;
  w.format = lin->format;
  w.out = lin->weight.dim(0);
  w.in = lin->weight.dim(1);
  w.packed = lin;
  return w;
}

// --- attention -------------------------------------------------------------------------------

Status CudaBackend::PagedAttention(const Tensor& q, const KvLayer& layer, const std::vector<SeqSpan>& spans,
                                   const AttentionParams& params, Tensor& out) {
  const int S = static_cast<int>(spans.size());
  if (S == 0) return Status::Ok();
  const int bt = layer.block_tokens;
  int max_blocks = 1, max_q = 1, max_ctx = 1;
  for (const SeqSpan& s : spans) {
    max_blocks = std::max(max_blocks, (s.context_len + bt - 1) / bt);
    max_q = std::max(max_q, s.q_len);
    max_ctx = std::max(max_ctx, s.context_len);
  }
  if (mode_ != GraphMode::kOff) {
    // A recorded step is sized for the graph's planning context, not for this batch.
    if (max_ctx > plan_context_) {
      return InvalidArgument("a sequence of " + std::to_string(max_ctx) + " tokens exceeds the step graph's " +
                             std::to_string(plan_context_));
    }
    max_ctx = plan_context_;
    max_blocks = (plan_context_ + bt - 1) / bt;
    Trace(S);
    Trace(max_q);
  }
  // One staged array: q_begin[S], q_len[S], context_len[S], block_tables[S * max_blocks]. The
  // layers of a step pass the same batch: it is built and staged once per staging epoch.
  const bool same = meta_epoch_ == staging_.epoch() && meta_spans_.size() == spans.size() &&
                    std::equal(spans.begin(), spans.end(), meta_spans_.begin(), [](const SeqSpan& a, const SeqSpan& b) {
                      return a.q_begin == b.q_begin && a.q_len == b.q_len && a.context_len == b.context_len &&
                             a.block_table == b.block_table;
                    }) &&
                    meta_.size() == static_cast<size_t>(3 * S + S * max_blocks);
  if (!same) {
    std::vector<int32_t>& meta = meta_;
    meta.assign(static_cast<size_t>(3 * S + S * max_blocks), 0);
    for (int i = 0; i < S; ++i) {
      const SeqSpan& s = spans[i];
      meta[i] = s.q_begin;
      meta[S + i] = s.q_len;
      meta[2 * S + i] = s.context_len;
      const int nb = (s.context_len + bt - 1) / bt;
      std::copy(s.block_table, s.block_table + nb, meta.begin() + 3 * S + static_cast<int64_t>(i) * max_blocks);
    }
    FERRY_ASSIGN_OR_RETURN(void* d_meta, Stage(meta.data(), meta.size() * sizeof(int32_t)));
    meta_spans_.assign(spans.begin(), spans.end());
    meta_device_ = d_meta;
    meta_epoch_ = staging_.epoch();
  }
  if (replaying()) return Status::Ok();
  const int32_t* dm = static_cast<const int32_t*>(meta_device_);
  cuda::PagedAttentionArgs a;
  a.q = q.raw();
  a.out = out.raw();
  a.act_dtype = q.dtype();
  a.num_tokens = static_cast<int>(q.dim(0));
  a.k_cache = layer.k.raw();
  a.v_cache = layer.v.raw();
  a.kv_dtype = layer.k.dtype();
  a.block_tokens = bt;
  a.num_seqs = S;
  a.q_begin = dm;
  a.q_len = dm + S;
  a.context_len = dm + 2 * S;
  a.block_tables = dm + 3 * S;
  a.max_blocks_per_seq = max_blocks;
  a.max_q_len = max_q;
  a.max_context_len = max_ctx;
  a.num_heads = params.num_heads;
  a.num_kv_heads = params.num_kv_heads;
  a.head_dim = params.head_dim;
  a.scale = params.scale;
  a.causal = params.causal;
  FERRY_ASSIGN_OR_RETURN(size_t ws, cuda::PagedAttentionWorkspaceBytes(S, params.num_heads, params.num_kv_heads,
                                                                      params.head_dim, max_ctx));
  Tensor workspace;
  if (ws > 0) {
    workspace = Scratch({static_cast<int64_t>(ws)}, DType::kI8);
    a.workspace = workspace.raw();
    a.workspace_bytes = ws;
  }
  return cuda::PagedAttention(a, stream_);
}

Status CudaBackend::DenseAttention(const Tensor& q, const Tensor& k, const Tensor& v, const std::vector<SeqSpan>& spans,
                                   const AttentionParams& params, Tensor& out) {
  return RunDenseAttention(q.raw(), k.raw(), v.raw(), 0, 0, q.dtype(), q.dim(0), spans, params, out);
}

Status CudaBackend::DenseAttentionQkv(const Tensor& qkv, const std::vector<SeqSpan>& spans,
                                      const AttentionParams& params, Tensor& q, Tensor& k, Tensor& v, Tensor& out) {
  (void)q;  // read in place from the fused projection
  (void)k;
  (void)v;
  const int64_t q_dim = static_cast<int64_t>(params.num_heads) * params.head_dim;
  const int64_t kv_dim = static_cast<int64_t>(params.num_kv_heads) * params.head_dim;
  if (qkv.dim(1) != q_dim + 2 * kv_dim) {
    return InvalidArgument("DenseAttentionQkv: " + qkv.DebugString() + " is not a fused QKV projection of this shape");
  }
  const size_t elem = DTypeSize(qkv.dtype());
  const char* base = static_cast<const char*>(qkv.raw());
  return RunDenseAttention(base, base + q_dim * elem, base + (q_dim + kv_dim) * elem, qkv.dim(1), qkv.dim(1),
                           qkv.dtype(), qkv.dim(0), spans, params, out);
}

Status CudaBackend::RunDenseAttention(const void* q, const void* k, const void* v, int64_t q_stride,
                                      int64_t kv_stride, DType dtype, int64_t tokens,
                                      const std::vector<SeqSpan>& spans, const AttentionParams& params, Tensor& out) {
  const int S = static_cast<int>(spans.size());
  if (S == 0) return Status::Ok();
  std::vector<int32_t>& meta = meta_;
  meta.resize(static_cast<size_t>(2 * S));
  for (int i = 0; i < S; ++i) {
    meta[i] = spans[i].q_begin;
    meta[S + i] = spans[i].q_len;
  }
  FERRY_ASSIGN_OR_RETURN(void* d_meta, Stage(meta.data(), meta.size() * sizeof(int32_t)));
  if (replaying()) return Status::Ok();
  const int32_t* dm = static_cast<const int32_t*>(d_meta);
  cuda::DenseAttentionArgs a;
  a.q = q;
  a.k = k;
  a.v = v;
  a.q_row_stride = q_stride;
  a.kv_row_stride = kv_stride;
  a.out = out.raw();
  a.dtype = dtype;
  a.num_tokens = static_cast<int>(tokens);
  a.num_seqs = S;
  a.q_begin = dm;
  a.q_len = dm + S;
  a.num_heads = params.num_heads;
  a.num_kv_heads = params.num_kv_heads;
  a.head_dim = params.head_dim;
  a.scale = params.scale;
  a.causal = params.causal;
  return cuda::DenseAttention(a, stream_);
}

// --- step graphs -----------------------------------------------------------------------------

// Leaves graph mode however a capture or replay ends. On failure (an error or an exception
// from the body) it also ends a capture still open, waits for copies already enqueued and
// restarts the staging ring, so no half-recorded graph or unwritten staged entry outlives
// the attempt.
struct CudaBackend::GraphScope {
  CudaBackend* be;
  bool ok = false;
  ~GraphScope() {
    be->mode_ = GraphMode::kOff;
    be->graph_ = nullptr;
    if (ok) return;
    if (be->capture_open_) {
      cudaGraph_t graph = nullptr;
      cudaStreamEndCapture(be->stream_, &graph);
      if (graph != nullptr) cudaGraphDestroy(graph);
      be->capture_open_ = false;
    }
    cudaStreamSynchronize(be->stream_);
    be->staging_.Reset();
  }
};

Status CudaBackend::RunGraph(const GraphKey& key, const std::function<Status()>& body) {
  if (mode_ != GraphMode::kOff) return FailedPrecondition("step graphs do not nest");
  if (key.plan_context <= 0) return InvalidArgument("a step graph needs a positive planning context");
  // Earlier work has finished with the staging ring: a recording restarts it at offset 0.
  FERRY_RETURN_IF_ERROR(Synchronize());
  const std::pair<int64_t, int64_t> id{key.owner, key.id};
  if (eager_only_.count(id) != 0) return body();
  auto it = graphs_.find(id);
  if (it == graphs_.end()) {
    // First sight: run the step eagerly, which uploads host weights, plans the GEMMs and
    // sizes their scratch (none of which may happen during a capture), then record it.
    FERRY_RETURN_IF_ERROR(body());
    FERRY_RETURN_IF_ERROR(Synchronize());
    const Status captured = Capture(id, key, body);
    if (captured.ok()) return Status::Ok();
    // The eager run worked, so the recording is what failed: this bucket runs eagerly from
    // now on, and the step again, since the capture left the caller's buffers unwritten.
    FERRY_LOG_WARN("decode bucket {} cannot be recorded as a CUDA graph ({}); it runs eagerly", key.id,
                   captured.message());
    graphs_.erase(id);
    eager_only_.insert(id);
    return body();
  }
  StepGraph& g = *it->second;
  Status st;
  {
    GraphScope scope{this};
    mode_ = GraphMode::kReplay;
    graph_ = &g;
    plan_context_ = key.plan_context;
    alloc_cursor_ = 0;
    trace_cursor_ = 0;
    graph_error_ = Status::Ok();
    st = body();
    if (st.ok()) {
      Trace(static_cast<int64_t>(alloc_cursor_));
      if (trace_cursor_ != g.trace.size() || alloc_cursor_ != g.buffers.size()) Diverged("the step made fewer calls");
    }
    scope.ok = st.ok() && graph_error_.ok();
  }
  if (!st.ok()) return st;
  if (!graph_error_.ok()) {
    graphs_.erase(id);  // recaptured on the next call
    return graph_error_;
  }
  FERRY_CUDA_RETURN_IF_ERROR(cudaGraphLaunch(g.exec, stream_));
  return Status::Ok();
}

Status CudaBackend::Capture(const std::pair<int64_t, int64_t>& id, const GraphKey& key,
                            const std::function<Status()>& body) {
  auto g = std::make_unique<StepGraph>();
  GraphScope scope{this};
  mode_ = GraphMode::kCapture;
  graph_ = g.get();
  plan_context_ = key.plan_context;
  FERRY_CUDA_RETURN_IF_ERROR(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeRelaxed));
  capture_open_ = true;
  const Status st = body();
  cudaGraph_t graph = nullptr;
  const cudaError_t end = cudaStreamEndCapture(stream_, &graph);
  capture_open_ = false;
  if (!st.ok()) {
    if (graph != nullptr) cudaGraphDestroy(graph);
    return st;
  }
  FERRY_CUDA_RETURN_IF_ERROR(end);
  const cudaError_t inst = cudaGraphInstantiate(&g->exec, graph, 0);
  cudaGraphDestroy(graph);
  FERRY_CUDA_RETURN_IF_ERROR(inst);
  g->trace.push_back(static_cast<int64_t>(g->buffers.size()));
  StepGraph* captured = g.get();
  graphs_[id] = std::move(g);
  // The eager run computed this step, but the caller holds the capture's buffers: fill them.
  FERRY_CUDA_RETURN_IF_ERROR(cudaGraphLaunch(captured->exec, stream_));
  scope.ok = true;
  return Status::Ok();
}

// --- sampling ----------------------------------------------------------------------------------

Status CudaBackend::SampleTokens(const Tensor& logits, std::span<const TokenSampling> rows,
                                 std::vector<int32_t>& tokens) {
  FERRY_RETURN_IF_ERROR(NotInGraph("SampleTokens"));
  const int n = static_cast<int>(rows.size());
  tokens.assign(static_cast<size_t>(n), -1);
  if (n == 0) return Status::Ok();
  if (logits.rank() != 2 || logits.dim(0) < n) {
    return InvalidArgument("SampleTokens: logits " + logits.DebugString() + " for " + std::to_string(n) + " rows");
  }
  const int64_t vocab = logits.dim(1);
  const Tensor* f32 = &logits;
  Tensor converted;
  Tensor uploaded;
  if (logits.device().is_cpu()) {
    const Tensor host = logits.Slice(0, n).Clone();
    FERRY_ASSIGN_OR_RETURN(uploaded, UploadBytes(host.raw(), host.shape(), host.dtype()));
    f32 = &uploaded;
  }
  if (f32->dtype() != DType::kF32) {
    converted = Scratch({n, vocab}, DType::kF32);
    FERRY_RETURN_IF_ERROR(cuda::Convert(f32->raw(), f32->dtype(), converted.raw(), DType::kF32, n * vocab, stream_));
    f32 = &converted;
  }
  std::vector<cuda::SamplingParamsGpu>& params = sample_params_;
  params.resize(static_cast<size_t>(n));
  bool penalty = false;
  for (int r = 0; r < n; ++r) {
    const TokenSampling& t = rows[r];
    params[r] = cuda::SamplingParamsGpu{t.temperature, t.top_k, t.top_p, t.min_p, t.repetition_penalty, t.seed, t.counter};
    penalty = penalty || t.repetition_penalty != 1.0f;
  }
  const int32_t* d_history = nullptr;
  const int64_t* d_offsets = nullptr;
  if (penalty) {
    history_.clear();
    offsets_.assign(1, 0);
    for (const TokenSampling& t : rows) {  // only penalized rows need their history
      if (t.repetition_penalty != 1.0f) history_.insert(history_.end(), t.history.begin(), t.history.end());
      offsets_.push_back(static_cast<int64_t>(history_.size()));
    }
    if (history_.empty()) history_.push_back(-1);
    FERRY_ASSIGN_OR_RETURN(void* h, Stage(history_.data(), history_.size() * sizeof(int32_t)));
    FERRY_ASSIGN_OR_RETURN(void* o, Stage(offsets_.data(), offsets_.size() * sizeof(int64_t)));
    d_history = static_cast<const int32_t*>(h);
    d_offsets = static_cast<const int64_t*>(o);
  }
  Tensor out = Scratch({n}, DType::kI32);
  FERRY_RETURN_IF_ERROR(cuda::SampleRows(f32->data<float>(), n, static_cast<int>(vocab), params.data(), d_history,
                                         d_offsets, out.data<int32_t>(), stream_));
  FERRY_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(tokens.data(), out.raw(), static_cast<size_t>(n) * sizeof(int32_t), cudaMemcpyDeviceToHost, stream_));
  return Synchronize();
}

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

bool CudaAvailable() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

Result<std::unique_ptr<Backend>> MakeCudaBackend(const CudaBackendOptions& options) {
  if (!CudaAvailable()) return Unavailable("no CUDA device is available");
  if (options.activations != DType::kBF16 && options.activations != DType::kF16 && options.activations != DType::kF32) {
    return InvalidArgument("CUDA activations must be bf16, f16 or f32");
  }
  auto be = std::make_unique<CudaBackend>(options);
  FERRY_RETURN_IF_ERROR(be->Init());
  return std::unique_ptr<Backend>(std::move(be));
}

}  // namespace ferry::backend
