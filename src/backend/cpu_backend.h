// The CPU implementation of the backend op set: ferry's AVX2 kernels (GEMV/GEMM over packed
// weight panels, attention, norms, RoPE, activations) on the OpenMP compute threads.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "backend/backend.h"
#include "core/allocator.h"
#include "kernels/cpu/linear.h"

namespace ferry::backend {

struct CpuBackendOptions {
  kernels::cpu::LinearConfig linear;
  int threads = 0;  // compute threads of every forward pass (BindComputeThreads); 0: the process default
};

// Thread-safe: its only state is TuneLinear's record of timed shapes, under a mutex. Each
// op spreads its work over the compute threads (ferry::SetComputeThreads); concurrent
// calls from several threads are correct but share the same cores.
class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(CpuBackendOptions options = CpuBackendOptions())
      : options_(options), pool_(BlockPool::Create()) {}

  Device device() const override { return Device::Cpu(); }
  std::string Name() const override { return "cpu"; }
  // Tensors of kLargeAllocation bytes and more come from the backend's BlockPool (reused
  // across passes, bounded by one pass's high-water mark); smaller ones from the heap.
  Result<Tensor> Allocate(const Shape& shape, DType dtype) override;
  BlockPool::Stats pool_stats() const { return pool_->stats(); }
  // Sets the calling thread's compute threads to the backend's count (options.threads, or
  // what SetThreads set last), when one is set; each forward pass calls it as it starts.
  void BindComputeThreads() override;
  void SetThreads(int threads) override {
    threads_.store(threads > 0 ? threads : options_.threads, std::memory_order_relaxed);
  }
  int threads() const { return threads_.load(std::memory_order_relaxed); }

  // Converts / quantizes the weight to w.format and packs it into column panels for the
  // GEMV/GEMM kernels (kernels/cpu/packed_weight.h); a bf16/f16 bias becomes f32. w.weight
  // is not read again and may be dropped.
  Status PrepareLinear(LinearWeight& w) override;
  bool TakesInt8Blocks() const override { return true; }
  // The layout JSON and blobs are described in kernels/cpu/packed_weight_io.h.
  Result<SerializedLinear> SerializeLinear(const LinearWeight& w) override;
  Result<LinearWeight> DeserializeLinear(const SerializedLinear& s) override;
  // Uses w.packed; a weight that was never prepared (or whose pack was made from another
  // tensor) is packed on the fly, which is correct but slow.
  Status Linear(const Tensor& x, const LinearWeight& w, Tensor& y) override;
  Status GeluFeedForward(const Tensor& x, const LinearWeight& w_in, Tensor& mid, const LinearWeight& w_out,
                         Tensor& y) override;
  // options.linear.bf16_activations and a weight the vdpbf16ps GEMM takes (bf16 or int8-wo),
  // whichever GEMM route the CPU then takes.
  bool RoundsInputToBf16(const LinearWeight& w) const override;
  // Times the one-pass decode kernel against the blocked GEMM for 1 to 64 rows and sets
  // w.small_m_max to the largest row count where decode is at least as fast (cpu_tuning.cc).
  // The crossover depends on the compute threads at the time of the call.
  Result<std::string> TuneLinear(LinearWeight& w) override;
  std::string DescribeTuning() const override;

  // The CPU ISA and oneDNN version; an engine runs on any CPU with at least its ISA
  // (cpu_fingerprint.cc).
  Result<io::EngineFingerprint> Fingerprint() const override;
  Status CheckFingerprint(const io::EngineFingerprint& fingerprint) const override;

  Status Embedding(const Tensor& table, const Tensor& ids, Tensor& out) override;
  Status RmsNorm(const Tensor& x, const Tensor& gamma, float eps, Tensor& out) override;
  Status AddRmsNorm(Tensor& residual, const Tensor& delta, const Tensor& gamma, float eps, Tensor& out) override;
  Status LayerNorm(const Tensor& x, const Tensor& delta, const Tensor& gamma, const Tensor& beta, float eps,
                   Tensor& out) override;
  Status Rope(Tensor& q, Tensor& k, int num_heads, int num_kv_heads, const Tensor& positions,
              const RopeTable& table) override;
  Status SiluMul(const Tensor& gate_up, Tensor& out) override;
  Status Gelu(Tensor& x) override;
  Status Tanh(Tensor& x) override;
  Status GeluTanhMul(const Tensor& gate_up, Tensor& out) override;
  Status GeluMul(const Tensor& gate_up, Tensor& out) override;
  Status Scale(Tensor& x, float s) override;
  Status SoftCap(Tensor& x, float cap) override;
  Status HeadRmsNorm(Tensor& x, int64_t col_begin, int heads, int head_dim, const Tensor& gamma,
                     float eps) override;
  Status Add(Tensor& x, const Tensor& y) override;

  Status WriteKv(const Tensor& k, const Tensor& v, const Tensor& slots, KvLayer& layer) override;
  Status PagedAttention(const Tensor& q, const KvLayer& layer, const AttentionBatch& batch,
                        const AttentionParams& params, Tensor& out) override;
  Status DenseAttention(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionBatch& batch,
                        const AttentionParams& params, Tensor& out) override;
  // Reads q, k and v in place from qkv's columns.
  Status DenseAttentionQkv(const Tensor& qkv, const AttentionBatch& batch, const AttentionParams& params,
                           Tensor& out) override;

  Result<Tensor> ToHost(const Tensor& t) override;
  Status Synchronize() override { return Status::Ok(); }

 private:
  // Linear, with the GELU applied to y when `gelu`.
  Status LinearWith(const Tensor& x, const LinearWeight& w, Tensor& y, bool gelu);
  // (format, block size, out, in): weights of one shape and format share their tuned crossover.
  using TuneKey = std::tuple<int, int64_t, int64_t, int64_t>;

  CpuBackendOptions options_;
  std::shared_ptr<BlockPool> pool_;
  std::atomic<int> threads_{options_.threads};
  std::mutex tune_mu_;
  std::map<TuneKey, int> tuned_;  // GUARDED_BY(tune_mu_)
};

std::unique_ptr<Backend> MakeCpuBackend(CpuBackendOptions options);

}  // namespace ferry::backend
