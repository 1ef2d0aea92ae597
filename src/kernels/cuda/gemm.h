// GEMM on the GPU through cuBLASLt: Y[M, N] = X[M, K] · W[N, K]^T (+ bias[N]) (+ GELU), with
// X the activations (row-major), W a linear layer's weight as Hugging Face stores it
// ([out, in], row-major) and Y row-major.
//
// cuBLASLt is column-major, so every problem runs as Y^T = W · X^T: W read as a K x N
// column-major matrix and transposed (A, op T), X as K x M (B, op N), Y as N x M (D). This
// "TN" form is also the one cuBLASLt's fp8 and int8 (IMMA) kernels require.
//
// Kinds and what runs them:
//   kF32 / kBF16 / kF16   cuBLASLt, f32 accumulation (TF32 only when asked); bias and tanh-GELU
//                          fused through CUBLASLT_EPILOGUE_BIAS / GELU / GELU_BIAS when the bias
//                          has Y's dtype; erf-GELU, an f32 bias into a 16-bit Y, and GELU into
//                          f32 outputs (kept to f32 accuracy) in an in-place epilogue kernel.
//   kFp8                   e4m3 x e4m3 through cuBLASLt (compute capability 8.9+). Per-tensor
//                          scales go to cuBLASLt's A/B scale pointers. Per-token x per-channel
//                          scales use cuBLASLt's outer-vector scale mode where the library offers
//                          it for the problem (cuBLASLt 13.1 does on the H200, bf16 output),
//                          otherwise cuBLASLt writes the f32 accumulator to scratch and an
//                          epilogue kernel applies scales, bias and activation. Fast (reduced
//                          precision) fp8 accumulation only when the problem asks for it
//                          (fp8_fast_accum). For decode batches an fp8 (or W8A8) linear may
//                          instead run the small-M kernel on its stored weight and unquantized
//                          activations (gemm_kernels::Fp8WeightOnlySmallM, Int8SmoothedSmallM)
//                          outside Run: an engine stores that as a kSmallM choice, which
//                          backend/cuda/linear_gemm.cc takes before quantizing anything (Run
//                          refuses it for a kFp8 or kInt8 problem). The tuner also times ferry's
//                          8-bit tensor-core kernels (w8_gemm.cu) on the quantized operands,
//                          with the scales applied in their registers (up to kW8MmaTunedMaxM
//                          rows, and past kW8MmaMaxM).
//   kInt8 (W8A8)           int8 x int8 -> int32 through cuBLASLt (IMMA) into scratch, then the
//                          epilogue kernel: y = acc * x_scale[m] * w_scale[n] (+ bias) (+ GELU).
//                          With out_dtype kI32 the raw accumulator is the output. For float
//                          outputs the tuner also times ferry's 8-bit tensor-core kernels
//                          (decode batches and, past kW8MmaMaxM rows, 128 x 128 tiles), which
//                          do the same in one pass.
//   kInt8WeightOnly        small M (decode): one fused kernel reads the int8 weight once and
//                          dequantizes in registers (half the bytes of a bf16 weight); larger M:
//                          the weight is dequantized (w * scale, rounded to the activation dtype)
//                          into scratch once per call and the float GEMM runs on it. cuBLASLt has
//                          no mixed int8 x bf16 kernels, and the dequantization pass costs about
//                          3 bytes per weight against the GEMM's 2·M flops per weight, so it is
//                          cheap once M is in the hundreds. Measured on an H200 (N=8192, K=2048,
//                          bf16): M=1 8.6 us fused vs 22.7 us dequantized (bf16 weights: 11 us);
//                          M=8 21 us either way, where the fused kernel's CUDA-core FMAs, not
//                          bandwidth, bound it. Hence the default cut at M=8; Tune times both
//                          routes for M <= 64 and keeps the faster.
//   kInt4WeightOnly        4-bit weights in groups along K (kernels/int4_groups.h, packed as
//                          PackInt4Rows: [N, K/8] words), f32 scales and u8 zero points per
//                          [N, K/group]; activations bf16 or f16. Three routes: the small-M
//                          kernel (the int8 one's shape, a quarter of bf16's weight bytes);
//                          ferry's tensor-core kernel (int4_gemm.cu: 4-bit tiles expanded in
//                          shared memory, WMMA, split-K when the grid would leave SMs idle) for
//                          mid M; dequantization into scratch + cuBLASLt for large M. Defaults:
//                          M <= 8, M <= kInt4MmaMaxMDefault, beyond; Tune times all three.
//
// Algorithm choice: Run takes cuBLASLt's first heuristic unless given a GemmChoice; Tune
// times the top heuristics (and, for int8 weight-only, the fused small-M kernel) on the
// caller's buffers and returns the fastest as a GemmChoice that an engine file can store
// (ToString / FromString) and Run can take later. Engines tune one choice per weight shape
// and M bucket (GemmMBucket): a choice tuned at one M is checked (cublasLtMatmulAlgoCheck,
// once per shape) before it runs at another M of its bucket, and Run falls back to the
// heuristic, counting it, when the library rejects it.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <cublasLt.h>
#include <cuda_runtime.h>

#include "core/dtype.h"
#include "core/status.h"

namespace ferry::cuda {

enum class GemmKind : uint8_t {
  kF32,             // f32 x f32 -> f32
  kBF16,            // bf16 x bf16 -> bf16
  kF16,             // f16 x f16 -> f16
  kFp8,             // e4m3 x e4m3 -> out_dtype (bf16, f16 or f32)
  kInt8,            // int8 x int8 -> out_dtype (bf16, f16, f32; kI32: the raw accumulator)
  kInt8WeightOnly,  // out_dtype (bf16, f16, f32) activations x int8 weights -> out_dtype
  kInt4WeightOnly,  // out_dtype (bf16, f16) activations x 4-bit grouped weights -> out_dtype
};
std::string_view GemmKindName(GemmKind kind);

enum class GemmActivation : uint8_t {
  kNone,
  kGeluTanh,  // 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), cuBLASLt's GELU epilogue
  kGeluErf,   // 0.5 x (1 + erf(x / sqrt(2))), the exact GELU (the CPU backend's)
};

enum class Fp8Scaling : uint8_t {
  kPerTensor,  // x_scale[1], w_scale[1]
  kPerRowCol,  // x_scale[M] (per token), w_scale[N] (per output channel)
};

// The shape and types of one GEMM. Everything here is part of the descriptor cache key.
struct GemmProblem {
  GemmKind kind = GemmKind::kBF16;
  DType out_dtype = DType::kBF16;  // Y's dtype; kF32/kBF16/kF16 require the matching one
  int64_t m = 0;
  int64_t n = 0;
  int64_t k = 0;
  int64_t ldx = 0;  // elements from one row of X to the next; 0: k
  int64_t ldy = 0;  // elements from one row of Y to the next; 0: n
  bool has_bias = false;
  DType bias_dtype = DType::kF32;  // f32 or out_dtype
  GemmActivation activation = GemmActivation::kNone;
  Fp8Scaling fp8_scaling = Fp8Scaling::kPerTensor;
  bool allow_tf32 = false;  // kF32: TF32 tensor cores (about 1e-3 relative error)
  // kFp8: cuBLASLt's fast accumulation (CUBLASLT_MATMUL_DESC_FAST_ACCUM): the tensor cores'
  // own accumulator over the whole K, without the periodic promotion of partial sums to f32
  // registers. Faster on sm_90; the accumulator keeps fewer mantissa bits than f32.
  bool fp8_fast_accum = false;
  // kInt8WeightOnly without a GemmChoice: row counts up to this run the fused small-M kernel;
  // 0: kInt8WeightOnlySmallMDefault; negative: never. kBF16 / kF16: up to this (> 0) run
  // the dense small-M kernel; otherwise never without a choice.
  int small_m_max = 0;
  // kInt4WeightOnly: input columns per scale group (a multiple of 32 dividing K).
  int64_t group_size = 0;

  int64_t x_stride() const { return ldx ? ldx : k; }
  int64_t y_stride() const { return ldy ? ldy : n; }
  bool operator==(const GemmProblem&) const = default;
};

// Device pointers of one call. Scales are f32 device arrays.
struct GemmArgs {
  const void* x = nullptr;         // [M, ldx] in the kind's activation dtype
  const void* w = nullptr;         // [N, K] dense, the kind's weight dtype
  void* y = nullptr;               // [M, ldy] in out_dtype
  const void* bias = nullptr;      // [N] in bias_dtype, when has_bias
  const float* x_scale = nullptr;  // kFp8: [1] or [M]; kInt8: [M]
  const float* w_scale = nullptr;  // kFp8: [1] or [N]; kInt8, kInt8WeightOnly: [N];
                                   // kInt4WeightOnly: [N, K / group_size]
  const uint8_t* w_zero = nullptr;  // kInt4WeightOnly: [N, K / group_size]
};

// One algorithm for one problem, as Tune found it: storable in an engine file.
struct GemmChoice {
  enum class Route : uint8_t {
    kCublasLt = 0,     // the cuBLASLt algorithm in `algo`
    kSmallM = 1,       // kInt8WeightOnly, kInt4WeightOnly, kBF16, kF16: ferry's small-M kernel;
                       // in an fp8 or W8A8 linear's choices: the small-M kernel on its
                       // unquantized input (backend/cuda/linear_gemm.cc; not Run's)
    kCublasLtAcc = 2,  // kFp8 per-row/col only: `algo` on the f32-accumulator route (unit
                       // scales into scratch, then ScaleEpilogue), whose kernels (split-K,
                       // small tiles) can beat the outer-vector ones for small M
    kInt4Mma = 3,      // kInt4WeightOnly only: ferry's tensor-core kernel
    kW8Mma = 4,        // kFp8 and kInt8 (float output): ferry's 8-bit tensor-core kernels
                       // (gemm_kernels::W8Mma; decode batches up to kW8MmaMaxM rows, tiles of
                       // 128 channels x 128 or 256 tokens past that)
  };
  Route route = Route::kCublasLt;
  // kW8Mma past kW8MmaMaxM rows: the TMA tile kernel's 256-token tiles instead of 128 (Tune times
  // both; gemm_kernels::W8TileKernelVariant).
  bool wide_tile = false;
  std::array<uint64_t, 8> algo{};  // cublasLtMatmulAlgo_t::data, valid for this cuBLASLt version
  uint64_t workspace_bytes = 0;
  float measured_us = 0.0f;  // Tune's median time (informational)

  // "lt:<8 x 16 hex digits>:<workspace bytes>", the same with "lt_acc:", "small_m",
  // "int4_mma", "w8_mma" or "w8_mma:t256" (wide_tile).
  // measured_us is not stored.
  std::string ToString() const;
  static Result<GemmChoice> FromString(std::string_view text);
};

// M buckets for tuned choices: 1 | 2-4 | 5-8 | 9-16 | 17-32 | 33-64 | 65-128 | 129-256 |
// 257-512 | 513-1024 | 1025-4096. Decode batches live in the small buckets, where the best
// cuBLASLt tile (and split-K) changes with every doubling. Past 512 rows the large tiles win,
// but a choice timed at 2048 rows does not carry down to a prefill of 1,024 tokens: the 8-bit
// tile kernel's 256-row tile, the fastest at 2048 for a 1B down projection, gave 1,024 rows
// 64 blocks for 132 multiprocessors (74 us a call on an H100 where cuBLASLt's fp8 GEMM took
// 32), so 513-1024 has its own bucket, timed at 1024. Engines written with ten buckets
// (their last one 513-4096) have that choice copied into both (DeserializeCudaLinear).
// Past kGemmMaxTunedM rows (encoder batches of long windows, long prefill
// chunks) GemmMBucket answers kGemmMBuckets, a bucket with no tuned choice: Run takes the
// heuristic (for fp8 per-row/col the outer-vector route first). A choice timed at 2048 rows
// does not carry that far: there the fp8 f32-accumulator route won, whose extra pass over
// the output grows with M, and at 16,384 rows (bert-base, 32 windows of 512) it cost a fifth
// of the forward pass.
inline constexpr int kGemmMBuckets = 11;
inline constexpr int64_t kGemmMaxTunedM = 4096;
int GemmMBucket(int64_t m);
// The M to tune a bucket at: its largest row count (2048 for the last tuned bucket).
int64_t GemmBucketTuneM(int bucket);

inline constexpr int kInt8WeightOnlySmallMDefault = 8;
// kBF16 / kF16: Tune (with TuneOptions::dense_small_m) times the small-M kernel against
// cuBLASLt up to this M (one launch; past it the kernel would read the weight once per 8
// rows). Without a choice, dense problems run cuBLASLt unless small_m_max says otherwise.
inline constexpr int kDenseSmallMMaxM = 8;
// kInt4WeightOnly without a choice: the tensor-core kernel up to this M (past the small-M
// kernel's), dequantization + cuBLASLt beyond.
inline constexpr int kInt4MmaMaxMDefault = 64;
// kFp8 / kInt8: the 8-bit tensor-core decode kernel takes up to this many rows; past it the
// same route runs the 128 x 128 tile kernel (prefill and encoder batches, the scales and the
// int32 -> float epilogue in its registers). Either runs only where a tuned choice names it.
// Tune offers the decode kernel up to kW8MmaTunedMaxM rows. With the cp.async form, an 8B fp8
// engine that took it at 32 rows decoded 5 % slower at batch 32 on an H200. With the TMA form, on
// an H100, engines tuned with it up to 64 rows against 16 decoded batch 32 1.02-1.11x faster
// (8B fp8, 1B fp8, 1B W8A8), while at batch 64 the 1B fp8 engine lost (0.90-0.97x), so the 33-64
// bucket keeps cuBLASLt (docs/performance.md). Past kW8MmaMaxM rows it offers the tile kernel.
inline constexpr int kW8MmaMaxM = 64;
inline constexpr int kW8MmaTunedMaxM = 32;

struct LtGemmOptions {
  size_t workspace_bytes = size_t{32} << 20;
  // kFp8 with kPerRowCol: try cuBLASLt's outer-vector scale mode before the f32-accumulator
  // route. Off forces the epilogue-kernel route (tests compare the two).
  bool fp8_outer_vector_scales = true;
};

struct TuneOptions {
  int max_algos = 8;  // heuristics to time
  int warmup_runs = 3;
  int calls_per_sample = 10;  // back-to-back calls captured in one CUDA graph
  int timed_runs = 9;         // graph replays timed with events; the median counts
  // kBF16 / kF16 up to kDenseSmallMMaxM rows: time the dense small-M kernel against
  // cuBLASLt and keep the faster. On an H200 (bench/cuda_gemm_bench, 8 layers of llama-3-8B
  // linears) it took 0.93x / 0.91x cuBLASLt's heuristic at M = 1 / 2 and lost from M = 4.
  bool dense_small_m = true;
  // A small-M kernel outside LtGemm's own routes, timed as one more candidate (route kSmallM)
  // on the tuning stream: an fp8 or W8A8 linear's small-M kernel, which reads x unquantized.
  std::function<Status(cudaStream_t)> extra_small_m;
  // kFp8 / kInt8 up to kW8MmaTunedMaxM rows: time ferry's 8-bit tensor-core kernel as well.
  bool w8_mma = true;
};

// Owns a cuBLASLt handle, a device workspace, a scratch buffer (accumulators, dequantized
// weights) and the descriptors of every problem it has run. Thread-compatible: one per
// stream, since the workspace and scratch are shared by all its calls.
class LtGemm {
 public:
  static Result<std::unique_ptr<LtGemm>> Create(size_t workspace_bytes = size_t{32} << 20);
  static Result<std::unique_ptr<LtGemm>> Create(const LtGemmOptions& options);
  ~LtGemm();
  LtGemm(const LtGemm&) = delete;
  LtGemm& operator=(const LtGemm&) = delete;

  // InvalidArgument for malformed problems (shapes, dtypes, cuBLASLt's alignment rules),
  // Unimplemented for combinations this device or build cannot run (fp8 before sm_89).
  Status CheckProblem(const GemmProblem& p) const;
  // Scratch a problem may need (0 for most); Run grows the scratch when it is short, which
  // synchronizes the stream, so reserve the largest at load time. An outgrown buffer is
  // kept until the LtGemm goes away, since CUDA graphs captured earlier still use it.
  static size_t ScratchBytes(const GemmProblem& p);
  Status ReserveScratch(size_t bytes, cudaStream_t stream);

  // Enqueues the GEMM on `stream`. After the first call for a shape (and pointer alignment)
  // no descriptor is created and no heuristic is queried.
  Status Run(const GemmProblem& p, const GemmArgs& args, cudaStream_t stream, const GemmChoice* choice = nullptr);

  // Times the candidates on the caller's buffers (y is overwritten) and returns the fastest:
  // each candidate's calls are captured in a CUDA graph on a private stream and replayed, so
  // the time is the device's, not the launch overhead's. Synchronizes `stream` first (the
  // inputs) and finishes before returning. Build-time work: it creates streams and graphs.
  Result<GemmChoice> Tune(const GemmProblem& p, const GemmArgs& args, cudaStream_t stream,
                          const TuneOptions& options = TuneOptions());

  // How Run computes a problem with these pointers, e.g. "cublaslt[bias+gelu_tanh]",
  // "cublaslt[outer_vec] > f32 acc > scale_epilogue", "small_m_kernel".
  Result<std::string> DescribeRoute(const GemmProblem& p, const GemmArgs& args);

  int cached_plans() const { return static_cast<int>(plans_.size()); }
  // Stored choices the library rejected (Run used its heuristic instead).
  int64_t choice_fallbacks() const { return choice_fallbacks_; }
  size_t workspace_bytes() const { return workspace_bytes_; }

  struct Plan;
  struct PlanKey {
    GemmProblem problem;
    uint8_t align_x = 0, align_w = 0, align_y = 0, align_bias = 0;  // log2 bytes, up to 256
    int8_t variant = -1;  // the only variant to build; -1: the first the library accepts
    bool operator==(const PlanKey&) const = default;
  };
  struct PlanKeyHash {
    size_t operator()(const PlanKey& key) const;
  };

 private:
  LtGemm() = default;

  // only_variant >= 0: that variant or Unimplemented (a choice's route); -1: the first the
  // library accepts, in Variants' order.
  Result<Plan*> GetPlan(const GemmProblem& p, const GemmArgs& args, int only_variant = -1);
  Status BuildPlan(const GemmProblem& p, const GemmArgs& args, int first_variant, Plan& plan,
                   bool only_first = false);
  // The index of the f32-accumulator variant of an fp8 per-row/col problem; -1 otherwise.
  int AccVariantIndex(const GemmProblem& p) const;
  Status SetCallPointers(Plan& plan, const GemmArgs& args);
  Status EnsureScratch(size_t bytes, cudaStream_t stream);
  bool UseSmallM(const GemmProblem& p, const GemmArgs& args, const GemmChoice* choice) const;
  Status RunSmallM(const GemmProblem& p, const GemmArgs& args, cudaStream_t stream);
  bool UseInt4Mma(const GemmProblem& p, const GemmArgs& args, const GemmChoice* choice) const;
  bool W8MmaApplies(const GemmProblem& p, const GemmArgs& args) const;
  Status RunW8Mma(const GemmProblem& p, const GemmArgs& args, cudaStream_t stream, bool wide_tile);
  Status RunInt4Mma(const GemmProblem& p, const GemmArgs& args, cudaStream_t stream);
  Status RunLt(const GemmProblem& p, const GemmArgs& args, cudaStream_t stream, const GemmChoice* choice,
               const cublasLtMatmulAlgo_t* forced_algo);
  // lt_status: cublasLtMatmul's own status (success when it was not reached).
  Status RunPlanned(Plan& plan, const GemmProblem& p, const GemmArgs& args, cudaStream_t stream,
                    const cublasLtMatmulAlgo_t& algo, size_t algo_workspace, cublasStatus_t* lt_status);
  static size_t PlanScratchBytes(const Plan& plan, const GemmProblem& p);

  struct HandleDeleter {
    void operator()(cublasLtContext* h) const;
  };
  struct DeviceDeleter {
    void operator()(void* ptr) const;
  };

  std::unique_ptr<cublasLtContext, HandleDeleter> handle_;
  std::unique_ptr<void, DeviceDeleter> workspace_;
  size_t workspace_bytes_ = 0;
  std::unique_ptr<void, DeviceDeleter> scratch_;
  size_t scratch_bytes_ = 0;
  std::vector<std::unique_ptr<void, DeviceDeleter>> retired_scratch_;  // outgrown, still in recorded graphs
  LtGemmOptions options_;
  int cc_major_ = 0;
  int cc_minor_ = 0;
  std::unordered_map<PlanKey, std::unique_ptr<Plan>, PlanKeyHash> plans_;
  int64_t choice_fallbacks_ = 0;
};

// The kernels of gemm_epilogue.cu, for LtGemm and its tests. All enqueue on `stream` and
// report launch errors.
namespace gemm_kernels {

// y[m, n] = act(acc[m, n] * xs * ws + bias[n]), acc dense [M, N] (int32 or f32); xs is
// x_scale[m] (per_row) or x_scale[0], ws is w_scale[n] (per_col) or w_scale[0]; a null scale
// counts as 1. y is bf16, f16 or f32 with row stride ldy.
Status ScaleEpilogue(const void* acc, DType acc_dtype, int64_t m, int64_t n, const float* x_scale, bool per_row,
                     const float* w_scale, bool per_col, const void* bias, DType bias_dtype,
                     GemmActivation act, void* y, DType y_dtype, int64_t ldy, cudaStream_t stream);

// y[m, n] = act(y[m, n] + bias[n]) in place (bias may be null).
Status BiasActivation(void* y, DType y_dtype, int64_t m, int64_t n, int64_t ldy, const void* bias,
                      DType bias_dtype, GemmActivation act, cudaStream_t stream);

// out[n, k] = w[n, k] * scale[n], rounded to out_dtype (bf16, f16 or f32); dense [N, K].
Status DequantizeInt8Rows(const int8_t* w, int64_t n, int64_t k, const float* scale, void* out, DType out_dtype,
                          cudaStream_t stream);

// The fused int8 weight-only kernel: y[m, n] = act(sum_k x[m, k] * w[n, k] * scale[n] + bias[n])
// with f32 accumulation; x and y in x_dtype (bf16, f16, f32). Needs SmallMSupported.
bool SmallMSupported(const void* x, DType x_dtype, int64_t ldx, const int8_t* w, int64_t k);
Status Int8WeightOnlySmallM(const void* x, DType x_dtype, int64_t ldx, int64_t m, const int8_t* w,
                            const float* scale, int64_t n, int64_t k, const void* bias, DType bias_dtype,
                            GemmActivation act, void* y, int64_t ldy, cudaStream_t stream);

// The same kernel on e4m3 weights with per-channel scales (an fp8 linear's weight) and
// unquantized activations (x and y in x_dtype): for decode batches an fp8 linear may run it
// instead of quantizing its input for cuBLASLt (the tuner times both up to kDenseSmallMMaxM
// rows). Needs SmallMSupported (the same alignment as int8).
Status Fp8WeightOnlySmallM(const void* x, DType x_dtype, int64_t ldx, int64_t m, const void* w, const float* scale,
                           int64_t n, int64_t k, const void* bias, DType bias_dtype, GemmActivation act, void* y,
                           int64_t ldy, cudaStream_t stream);

// The same kernel on a W8A8 linear's int8 weight (quantized against x / smooth) with its
// unquantized input: each input column is multiplied by inv_smooth[k] (1 / the SmoothQuant
// factors; null: none, Int8WeightOnlySmallM) before the product. inv_smooth 16-byte aligned.
Status Int8SmoothedSmallM(const void* x, DType x_dtype, int64_t ldx, int64_t m, const int8_t* w, const float* scale,
                          const float* inv_smooth, int64_t n, int64_t k, const void* bias, DType bias_dtype,
                          GemmActivation act, void* y, int64_t ldy, cudaStream_t stream);

// The same kernel on dense weights (kBF16, kF16: x, w and y in one dtype), no scale: a
// split-K GEMV for decode batches, which the tuner times against cuBLASLt for M <= 8.
bool DenseSmallMSupported(const void* x, DType dtype, int64_t ldx, const void* w, int64_t k);
Status DenseSmallM(const void* x, DType dtype, int64_t ldx, int64_t m, const void* w, int64_t n, int64_t k,
                   const void* bias, DType bias_dtype, GemmActivation act, void* y, int64_t ldy, cudaStream_t stream);

// int4 weight-only (kernels/cuda/int4_gemm.cu). w: [n, k / 8] words (PackInt4Rows), scale
// f32 and zero u8 [n, k / group]; x and y bf16 or f16 with row strides ldx, ldy;
// y = act(x . ((q - zero) * scale)^T + bias). Int4Supported: k and group multiples of 32,
// group divides k, 16-byte aligned x rows and w.
bool Int4Supported(const void* x, DType x_dtype, int64_t ldx, const void* w, int64_t k, int64_t group);
// out[n, k] = (q - zero) * scale in out_dtype (bf16 or f16), dense.
Status DequantizeInt4Rows(const uint32_t* w, int64_t n, int64_t k, int64_t group, const float* scale,
                          const uint8_t* zero, void* out, DType out_dtype, cudaStream_t stream);
// CUDA cores, for M up to 8 per launch (larger M loops).
Status Int4SmallM(const void* x, DType x_dtype, int64_t ldx, int64_t m, const uint32_t* w, const float* scale,
                  const uint8_t* zero, int64_t n, int64_t k, int64_t group, const void* bias, DType bias_dtype,
                  GemmActivation act, void* y, int64_t ldy, cudaStream_t stream);
// Tensor cores; Int4MmaSupported adds K % 128 == 0 to Int4Supported. Split-K partial sums
// go to `partials` (Int4MmaScratchBytes of them, f32).
bool Int4MmaSupported(const void* x, DType x_dtype, int64_t ldx, const void* w, int64_t k, int64_t group);
size_t Int4MmaScratchBytes(int64_t m, int64_t n, int64_t k);
Status Int4Mma(const void* x, DType x_dtype, int64_t ldx, int64_t m, const uint32_t* w, const float* scale,
               const uint8_t* zero, int64_t n, int64_t k, int64_t group, const void* bias, DType bias_dtype,
               GemmActivation act, void* y, int64_t ldy, float* partials, cudaStream_t stream);

// The 8-bit tensor-core kernel (kernels/cuda/w8_gemm.cu): y[m, n] = act(acc * xs * ws + bias)
// with acc = x[m, :] . w[n, :] over e4m3 (int8 false; f32 accumulation, compute capability
// 8.9+) or int8 (int8 true; exact int32) operands. xs is x_scale[m] (per_row) or x_scale[0], ws
// w_scale[n] (per_col) or w_scale[0]; y bf16, f16 or f32 with row stride ldy. Hopper only
// (compute capability 9.0; the code is built for sm_90a). No scratch: split K is summed within a
// thread-block cluster.
bool W8MmaSupported(const void* x, int64_t ldx, const void* w, int64_t m, int64_t k);
Status W8Mma(bool int8, const void* x, int64_t ldx, int64_t m, const void* w, int64_t n, int64_t k,
             const float* x_scale, bool per_row, const float* w_scale, bool per_col, const void* bias,
             DType bias_dtype, GemmActivation act, void* y, DType y_dtype, int64_t ldy, cudaStream_t stream,
             bool wide_tile = false);
// Which kernel W8Mma runs past kW8MmaMaxM rows: -1 (the default) the TMA kernel (w8_tma_gemm.cu)
// with the tile the caller names (wide_tile: 256 tokens in four stages, one block a
// multiprocessor; otherwise 128 tokens in three stages, two blocks); 0 the cp.async tile kernel;
// 1-3 force the TMA kernel with 128 tokens in three stages, 128 tokens in six stages (one
// block), or 256 tokens in four stages. FERRY_W8_TILE_KERNEL sets it (read once; Tune then times
// the one kernel it names); SetW8TileKernelVariant overrides it for the process (tests; -2
// returns to the environment's).
int W8TileKernelVariant();
void SetW8TileKernelVariant(int variant);
// Which kernel W8Mma runs up to kW8MmaMaxM rows: -1 (the default) and 1 the TMA decode kernel
// (a producer warp feeding the copy engine, every stage in flight); 0 the cp.async one. Both
// issue the same MMAs in the same K order; int8 results are the same bytes, and e4m3 ones too
// where both split K alike (each lowers its split until its clusters all fit at once).
// FERRY_W8_DECODE_KERNEL sets it (read once); SetW8DecodeKernelVariant overrides it for the
// process (tests; -2 returns to the environment's).
int W8DecodeKernelVariant();
void SetW8DecodeKernelVariant(int variant);

}  // namespace gemm_kernels

}  // namespace ferry::cuda
