#include "kernels/cuda/gemm.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "kernels/cuda/cuda_check.h"

namespace ferry::cuda {

namespace {

constexpr size_t kScratchAlignment = 256;

size_t RoundUp(size_t v, size_t to) { return (v + to - 1) / to * to; }

// log2 of a pointer's alignment in bytes, capped at 256 (cuBLASLt's default assumption).
uint8_t AlignLog2(const void* ptr) {
  const auto addr = reinterpret_cast<uintptr_t>(ptr);
  if (addr == 0) return 8;
  uint8_t log2 = 0;
  while (log2 < 8 && (addr & (uintptr_t{1} << log2)) == 0) ++log2;
  return log2;
}

bool AlignedTo(const void* ptr, size_t bytes) { return reinterpret_cast<uintptr_t>(ptr) % bytes == 0; }

bool IsFloatDType(DType d) { return d == DType::kF32 || d == DType::kBF16 || d == DType::kF16; }

cudaDataType_t CudaType(DType d) {
  switch (d) {
    case DType::kF32: return CUDA_R_32F;
    case DType::kF16: return CUDA_R_16F;
    case DType::kBF16: return CUDA_R_16BF;
    case DType::kF8E4M3: return CUDA_R_8F_E4M3;
    case DType::kI8: return CUDA_R_8I;
    case DType::kI32: return CUDA_R_32I;
    default: return CUDA_R_32F;
  }
}

// The activation (X) and weight (W) dtypes a kind reads.
DType XDType(const GemmProblem& p) {
  switch (p.kind) {
    case GemmKind::kF32: return DType::kF32;
    case GemmKind::kBF16: return DType::kBF16;
    case GemmKind::kF16: return DType::kF16;
    case GemmKind::kFp8: return DType::kF8E4M3;
    case GemmKind::kInt8: return DType::kI8;
    case GemmKind::kInt8WeightOnly:
    case GemmKind::kInt4WeightOnly: return p.out_dtype;
  }
  return DType::kF32;
}

DType WDType(const GemmProblem& p) {
  switch (p.kind) {
    case GemmKind::kFp8: return DType::kF8E4M3;
    case GemmKind::kInt8:
    case GemmKind::kInt8WeightOnly: return DType::kI8;
    case GemmKind::kInt4WeightOnly: return DType::kI32;  // eight 4-bit values per word
    default: return XDType(p);
  }
}

const char* ActivationName(GemmActivation a) {
  switch (a) {
    case GemmActivation::kNone: return "none";
    case GemmActivation::kGeluTanh: return "gelu_tanh";
    case GemmActivation::kGeluErf: return "gelu_erf";
  }
  return "?";
}

// Whether the dense small-M kernel can run this problem: bf16 or f16 in and out, aligned.
bool DenseSmallMApplies(const GemmProblem& p, const GemmArgs& args) {
  const DType dtype = p.kind == GemmKind::kBF16 ? DType::kBF16 : DType::kF16;
  return (p.kind == GemmKind::kBF16 || p.kind == GemmKind::kF16) && p.out_dtype == dtype &&
         gemm_kernels::DenseSmallMSupported(args.x, dtype, p.x_stride(), args.w, p.k);
}

std::string ProblemString(const GemmProblem& p) {
  std::string s(GemmKindName(p.kind));
  s += " M=" + std::to_string(p.m) + " N=" + std::to_string(p.n) + " K=" + std::to_string(p.k) +
       " out=" + std::string(DTypeName(p.out_dtype));
  if (p.has_bias) s += " bias=" + std::string(DTypeName(p.bias_dtype));
  if (p.activation != GemmActivation::kNone) s += std::string(" act=") + ActivationName(p.activation);
  return s;
}

// One way of splitting the work between cuBLASLt and ferry's epilogue kernels. Plans try
// the variants of their kind in order and keep the first the library accepts.
struct Variant {
  bool lt_bias = false;       // cuBLASLt adds the bias
  bool lt_gelu = false;       // cuBLASLt applies tanh-GELU (after its bias)
  bool outer_vec = false;     // fp8 per-row/col scales through CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F
  bool acc_scratch = false;   // cuBLASLt writes the accumulator to scratch; ScaleEpilogue writes Y
};

std::vector<Variant> Variants(const GemmProblem& p, const LtGemmOptions& options) {
  std::vector<Variant> out;
  const bool bias_fusable =
      p.has_bias && p.bias_dtype == p.out_dtype && !(p.kind == GemmKind::kFp8 && p.out_dtype == DType::kF32);
  // GELU after the bias: fused only when the bias is fused too (or there is none), and not
  // into f32 outputs, which promise f32 accuracy (ferry's kernel computes tanh exactly).
  const bool gelu_fusable = p.activation == GemmActivation::kGeluTanh && p.out_dtype != DType::kF32 &&
                            (!p.has_bias || bias_fusable);
  auto add_fused_then_plain = [&](bool outer_vec) {
    Variant fused{bias_fusable, gelu_fusable, outer_vec, false};
    out.push_back(fused);
    if (fused.lt_bias || fused.lt_gelu) out.push_back(Variant{false, false, outer_vec, false});
  };
  switch (p.kind) {
    case GemmKind::kF32:
    case GemmKind::kBF16:
    case GemmKind::kF16:
    case GemmKind::kInt8WeightOnly:
    case GemmKind::kInt4WeightOnly:
      add_fused_then_plain(false);
      break;
    case GemmKind::kFp8:
      if (p.fp8_scaling == Fp8Scaling::kPerTensor) {
        add_fused_then_plain(false);
      } else {
        if (options.fp8_outer_vector_scales) add_fused_then_plain(true);
        out.push_back(Variant{false, false, false, true});
      }
      break;
    case GemmKind::kInt8:
      out.push_back(Variant{false, false, false, p.out_dtype != DType::kI32});
      break;
  }
  return out;
}

struct DescDeleter {
  void operator()(cublasLtMatmulDescOpaque_t* d) const { cublasLtMatmulDescDestroy(d); }
};
struct LayoutDeleter {
  void operator()(cublasLtMatrixLayoutOpaque_t* l) const { cublasLtMatrixLayoutDestroy(l); }
};
struct PreferenceDeleter {
  void operator()(cublasLtMatmulPreferenceOpaque_t* p) const { cublasLtMatmulPreferenceDestroy(p); }
};
using DescPtr = std::unique_ptr<cublasLtMatmulDescOpaque_t, DescDeleter>;
using LayoutPtr = std::unique_ptr<cublasLtMatrixLayoutOpaque_t, LayoutDeleter>;
using PreferencePtr = std::unique_ptr<cublasLtMatmulPreferenceOpaque_t, PreferenceDeleter>;

// A stream, graph and executable graph for Tune's timing, destroyed with their scope.
struct StreamDeleter {
  void operator()(CUstream_st* s) const { cudaStreamDestroy(s); }
};
struct GraphDeleter {
  void operator()(CUgraph_st* g) const { cudaGraphDestroy(g); }
};
struct GraphExecDeleter {
  void operator()(CUgraphExec_st* g) const { cudaGraphExecDestroy(g); }
};
using StreamPtr = std::unique_ptr<CUstream_st, StreamDeleter>;
using GraphPtr = std::unique_ptr<CUgraph_st, GraphDeleter>;
using GraphExecPtr = std::unique_ptr<CUgraphExec_st, GraphExecDeleter>;

// A CUDA event pair for timing, destroyed with its scope.
class EventPair {
 public:
  EventPair() = default;
  ~EventPair() {
    if (start_) cudaEventDestroy(start_);
    if (stop_) cudaEventDestroy(stop_);
  }
  EventPair(const EventPair&) = delete;
  EventPair& operator=(const EventPair&) = delete;
  Status Init() {
    FERRY_CUDA_RETURN_IF_ERROR(cudaEventCreate(&start_));
    FERRY_CUDA_RETURN_IF_ERROR(cudaEventCreate(&stop_));
    return Status::Ok();
  }
  cudaEvent_t start() const { return start_; }
  cudaEvent_t stop() const { return stop_; }

 private:
  cudaEvent_t start_ = nullptr;
  cudaEvent_t stop_ = nullptr;
};

}  // namespace

struct LtGemm::Plan {
  DescPtr desc;
  LayoutPtr a, b, d;
  int variant_index = 0;
  int variant_count = 0;
  Variant variant;
  bool dequant_w = false;      // int8 weight-only: W dequantized into scratch first
  bool post_bias = false;      // BiasActivation adds the bias after cuBLASLt
  GemmActivation post_act = GemmActivation::kNone;  // ... and applies this activation
  bool int_scale = false;      // alpha/beta are int32 (IMMA)
  bool lt_scales = false;      // fp8: cuBLASLt reads x_scale / w_scale
  cublasLtMatmulAlgo_t heuristic_algo{};
  size_t heuristic_workspace = 0;
  uint8_t align_a = 8, align_b = 8, align_d = 8;
  bool ran_ok = false;  // a cublasLtMatmul has succeeded with this plan
  // The last stored choice checked against this plan.
  bool choice_checked = false;
  bool choice_ok = false;
  std::array<uint64_t, 8> checked_algo{};
  size_t checked_workspace = 0;
  std::string description;
};

// ---------------------------------------------------------------------------------------
// LtGemm

size_t LtGemm::PlanKeyHash::operator()(const PlanKey& key) const {
  const GemmProblem& p = key.problem;
  uint64_t h = 1469598103934665603ull;
  const auto mix = [&h](uint64_t v) {
    h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  };
  mix(static_cast<uint64_t>(p.kind));
  mix(static_cast<uint64_t>(p.out_dtype));
  mix(static_cast<uint64_t>(p.m));
  mix(static_cast<uint64_t>(p.n));
  mix(static_cast<uint64_t>(p.k));
  mix(static_cast<uint64_t>(p.ldx));
  mix(static_cast<uint64_t>(p.ldy));
  mix(static_cast<uint64_t>(p.has_bias) | static_cast<uint64_t>(p.bias_dtype) << 8 |
      static_cast<uint64_t>(p.activation) << 16 | static_cast<uint64_t>(p.fp8_scaling) << 24 |
      static_cast<uint64_t>(p.allow_tf32) << 32 | static_cast<uint64_t>(p.fp8_fast_accum) << 40);
  mix(static_cast<uint64_t>(p.group_size));
  mix(static_cast<uint64_t>(key.align_x) | static_cast<uint64_t>(key.align_w) << 8 |
      static_cast<uint64_t>(key.align_y) << 16 | static_cast<uint64_t>(key.align_bias) << 24 |
      static_cast<uint64_t>(static_cast<uint8_t>(key.variant)) << 32);
  return static_cast<size_t>(h);
}

void LtGemm::HandleDeleter::operator()(cublasLtContext* h) const { cublasLtDestroy(h); }
void LtGemm::DeviceDeleter::operator()(void* ptr) const { cudaFree(ptr); }

LtGemm::~LtGemm() = default;

Result<std::unique_ptr<LtGemm>> LtGemm::Create(size_t workspace_bytes) {
  LtGemmOptions options;
  options.workspace_bytes = workspace_bytes;
  return Create(options);
}

Result<std::unique_ptr<LtGemm>> LtGemm::Create(const LtGemmOptions& options) {
  std::unique_ptr<LtGemm> g(new LtGemm());
  g->options_ = options;
  int device = 0;
  FERRY_CUDA_RETURN_IF_ERROR(cudaGetDevice(&device));
  FERRY_CUDA_RETURN_IF_ERROR(cudaDeviceGetAttribute(&g->cc_major_, cudaDevAttrComputeCapabilityMajor, device));
  FERRY_CUDA_RETURN_IF_ERROR(cudaDeviceGetAttribute(&g->cc_minor_, cudaDevAttrComputeCapabilityMinor, device));
  cublasLtHandle_t handle = nullptr;
  FERRY_CUBLAS_RETURN_IF_ERROR(cublasLtCreate(&handle));
  g->handle_.reset(handle);
  if (options.workspace_bytes > 0) {
    void* ws = nullptr;
    FERRY_CUDA_RETURN_IF_ERROR(cudaMalloc(&ws, options.workspace_bytes));
    g->workspace_.reset(ws);
  }
  g->workspace_bytes_ = options.workspace_bytes;
  return g;
}

Status LtGemm::CheckProblem(const GemmProblem& p) const {
  // Messages are built only on failure: Run checks every call.
  const auto bad = [&p](const char* why) { return InvalidArgument(std::string(why) + ": " + ProblemString(p)); };
  if (p.m < 0 || p.n <= 0 || p.k <= 0) return bad("GEMM with bad shape");
  if (p.ldx != 0 && p.ldx < p.k) return bad("GEMM ldx < K");
  if (p.ldy != 0 && p.ldy < p.n) return bad("GEMM ldy < N");
  const int64_t ldx = p.x_stride();
  const int64_t ldy = p.y_stride();
  switch (p.kind) {
    case GemmKind::kF32:
    case GemmKind::kBF16:
    case GemmKind::kF16:
      if (p.out_dtype != XDType(p)) return bad("GEMM output dtype must match the inputs");
      break;
    case GemmKind::kInt8WeightOnly:
      if (!IsFloatDType(p.out_dtype)) return bad("int8 weight-only GEMM needs f32, bf16 or f16 activations");
      break;
    case GemmKind::kInt4WeightOnly:
      if (p.out_dtype != DType::kBF16 && p.out_dtype != DType::kF16) {
        return bad("int4 weight-only GEMM needs bf16 or f16 activations");
      }
      if (p.group_size <= 0 || p.group_size % 32 != 0 || p.k % p.group_size != 0 || ldx % 8 != 0) {
        return bad("int4 weight-only GEMM needs a group size that is a multiple of 32 and divides K, and ldx % 8 == 0");
      }
      break;
    case GemmKind::kFp8:
      if (cc_major_ * 10 + cc_minor_ < 89) {
        return Unimplemented("fp8 GEMM needs compute capability 8.9 or newer (this device is sm_" +
                             std::to_string(cc_major_ * 10 + cc_minor_) + "): " + ProblemString(p));
      }
      if (!IsFloatDType(p.out_dtype)) return bad("fp8 GEMM outputs f32, bf16 or f16");
      // cuBLASLt's fp8 kernels: TN only, 16-byte aligned dimensions and rows.
      if (p.n % 16 != 0 || p.k % 16 != 0 || ldx % 16 != 0 ||
          (ldy * static_cast<int64_t>(DTypeSize(p.out_dtype))) % 16 != 0) {
        return bad("fp8 GEMM needs N, K and ldx multiples of 16 and 16-byte output rows");
      }
      break;
    case GemmKind::kInt8:
      if (!IsFloatDType(p.out_dtype) && p.out_dtype != DType::kI32) {
        return bad("int8 GEMM outputs f32, bf16, f16 or i32");
      }
      // IMMA with ordinary (non-COL32) layouts: TN, m and k multiples of 4, 4-byte aligned rows.
      if (p.n % 4 != 0 || p.k % 4 != 0 || ldx % 4 != 0 || (p.out_dtype == DType::kI32 && ldy % 4 != 0)) {
        return bad("int8 GEMM needs N, K and ldx (and ldy for i32 output) multiples of 4");
      }
      if (p.out_dtype == DType::kI32 && (p.has_bias || p.activation != GemmActivation::kNone)) {
        return bad("int8 GEMM with i32 output takes no bias or activation");
      }
      break;
  }
  if (p.has_bias && p.bias_dtype != DType::kF32 && p.bias_dtype != p.out_dtype) {
    return bad("GEMM bias must be f32 or the output dtype");
  }
  return Status::Ok();
}

size_t LtGemm::ScratchBytes(const GemmProblem& p) {
  size_t bytes = 0;
  switch (p.kind) {
    case GemmKind::kInt8WeightOnly:
      bytes = static_cast<size_t>(p.n) * static_cast<size_t>(p.k) * DTypeSize(p.out_dtype);
      break;
    case GemmKind::kInt4WeightOnly:
      bytes = std::max(static_cast<size_t>(p.n) * static_cast<size_t>(p.k) * DTypeSize(p.out_dtype),
                       gemm_kernels::Int4MmaScratchBytes(p.m, p.n, p.k));
      break;
    case GemmKind::kInt8:
      if (p.out_dtype != DType::kI32) bytes = static_cast<size_t>(p.m) * static_cast<size_t>(p.n) * 4;
      break;
    case GemmKind::kFp8:
      if (p.fp8_scaling == Fp8Scaling::kPerRowCol) bytes = static_cast<size_t>(p.m) * static_cast<size_t>(p.n) * 4;
      break;
    default:
      break;
  }
  return RoundUp(bytes, kScratchAlignment);
}

Status LtGemm::ReserveScratch(size_t bytes, cudaStream_t stream) { return EnsureScratch(bytes, stream); }

Status LtGemm::EnsureScratch(size_t bytes, cudaStream_t stream) {
  if (bytes <= scratch_bytes_) return Status::Ok();
  // Work queued on this stream may still read the old buffer, and CUDA graphs captured
  // earlier keep its address: it is retired, not freed. Doubling keeps the retired
  // buffers, together, smaller than the current one.
  FERRY_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
  if (scratch_ != nullptr) retired_scratch_.push_back(std::move(scratch_));
  const size_t size = std::max(RoundUp(bytes, size_t{2} << 20), 2 * scratch_bytes_);
  scratch_bytes_ = 0;
  void* ptr = nullptr;
  FERRY_CUDA_RETURN_IF_ERROR(cudaMalloc(&ptr, size));
  scratch_.reset(ptr);
  scratch_bytes_ = size;
  return Status::Ok();
}

int LtGemm::AccVariantIndex(const GemmProblem& p) const {
  if (p.kind != GemmKind::kFp8 || p.fp8_scaling != Fp8Scaling::kPerRowCol) return -1;
  const std::vector<Variant> variants = Variants(p, options_);
  for (size_t i = 0; i < variants.size(); ++i) {
    if (variants[i].acc_scratch) return static_cast<int>(i);
  }
  return -1;
}

Status LtGemm::BuildPlan(const GemmProblem& p, const GemmArgs& args, int first_variant, Plan& plan,
                         bool only_first) {
  const std::vector<Variant> variants = Variants(p, options_);
  plan.variant_count = static_cast<int>(variants.size());
  const bool int8 = p.kind == GemmKind::kInt8;
  const int64_t ldx = p.x_stride();
  const int64_t ldy = p.y_stride();
  const bool weight_only = p.kind == GemmKind::kInt8WeightOnly || p.kind == GemmKind::kInt4WeightOnly;
  const DType a_dtype = weight_only ? p.out_dtype : WDType(p);
  const DType b_dtype = XDType(p);
  const cublasComputeType_t compute = int8                                          ? CUBLAS_COMPUTE_32I
                                      : (p.kind == GemmKind::kF32 && p.allow_tf32) ? CUBLAS_COMPUTE_32F_FAST_TF32
                                                                                    : CUBLAS_COMPUTE_32F;
  const cudaDataType_t scale_type = int8 ? CUDA_R_32I : CUDA_R_32F;
  Status last = Unimplemented("cuBLASLt offers no algorithm for " + ProblemString(p));

  const int end_variant = only_first ? std::min(first_variant + 1, plan.variant_count) : plan.variant_count;
  for (int vi = first_variant; vi < end_variant; ++vi) {
    const Variant& v = variants[vi];
    DType d_dtype = p.out_dtype;
    if (v.acc_scratch) d_dtype = int8 ? DType::kI32 : DType::kF32;

    cublasLtMatmulDesc_t desc = nullptr;
    FERRY_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescCreate(&desc, compute, scale_type));
    DescPtr desc_owner(desc);
    const int32_t trans_a = CUBLAS_OP_T;
    const int32_t trans_b = CUBLAS_OP_N;
    FERRY_CUBLAS_RETURN_IF_ERROR(
        cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &trans_a, sizeof(trans_a)));
    FERRY_CUBLAS_RETURN_IF_ERROR(
        cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &trans_b, sizeof(trans_b)));
    uint32_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
    if (v.lt_bias && v.lt_gelu) epilogue = CUBLASLT_EPILOGUE_GELU_BIAS;
    else if (v.lt_bias) epilogue = CUBLASLT_EPILOGUE_BIAS;
    else if (v.lt_gelu) epilogue = CUBLASLT_EPILOGUE_GELU;
    FERRY_CUBLAS_RETURN_IF_ERROR(
        cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)));
    if (v.lt_bias) {
      FERRY_CUBLAS_RETURN_IF_ERROR(
          cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &args.bias, sizeof(args.bias)));
    }
    if (p.kind == GemmKind::kFp8 && p.fp8_fast_accum) {
      const int8_t fast = 1;
      FERRY_CUBLAS_RETURN_IF_ERROR(
          cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast, sizeof(fast)));
    }
    if (p.kind == GemmKind::kFp8 && !v.acc_scratch) {
      if (v.outer_vec) {
        const int32_t mode = CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
        FERRY_CUBLAS_RETURN_IF_ERROR(
            cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &mode, sizeof(mode)));
        FERRY_CUBLAS_RETURN_IF_ERROR(
            cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &mode, sizeof(mode)));
      }
      // A is W (its scale per output channel), B is X (per token).
      FERRY_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER,
                                                                  &args.w_scale, sizeof(args.w_scale)));
      FERRY_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER,
                                                                  &args.x_scale, sizeof(args.x_scale)));
    }

    cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
    FERRY_CUBLAS_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(&a, CudaType(a_dtype), p.k, p.n, p.k));
    LayoutPtr a_owner(a);
    FERRY_CUBLAS_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(&b, CudaType(b_dtype), p.k, p.m, ldx));
    LayoutPtr b_owner(b);
    FERRY_CUBLAS_RETURN_IF_ERROR(
        cublasLtMatrixLayoutCreate(&d, CudaType(d_dtype), p.n, p.m, v.acc_scratch ? p.n : ldy));
    LayoutPtr d_owner(d);

    // Alignments the algorithm may assume: the scratch buffers are 256-byte aligned.
    const uint8_t align_a = weight_only ? 8 : AlignLog2(args.w);
    const uint8_t align_b = AlignLog2(args.x);
    const uint8_t align_d = v.acc_scratch ? 8 : AlignLog2(args.y);

    cublasLtMatmulPreference_t pref = nullptr;
    FERRY_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulPreferenceCreate(&pref));
    PreferencePtr pref_owner(pref);
    const uint64_t max_ws = workspace_bytes_;
    FERRY_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &max_ws, sizeof(max_ws)));
    const uint32_t align_bytes[4] = {1u << align_a, 1u << align_b, 1u << align_d, 1u << align_d};
    const cublasLtMatmulPreferenceAttributes_t align_attr[4] = {
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
    for (int i = 0; i < 4; ++i) {
      FERRY_CUBLAS_RETURN_IF_ERROR(
          cublasLtMatmulPreferenceSetAttribute(pref, align_attr[i], &align_bytes[i], sizeof(align_bytes[i])));
    }

    cublasLtMatmulHeuristicResult_t result{};
    int count = 0;
    const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(handle_.get(), desc, a, b, d, d, pref, 1, &result, &count);
    if (st == CUBLAS_STATUS_NOT_SUPPORTED || (st == CUBLAS_STATUS_SUCCESS && count == 0)) {
      last = Unimplemented("cuBLASLt offers no algorithm for " + ProblemString(p));
      continue;
    }
    FERRY_CUBLAS_RETURN_IF_ERROR(st);

    plan.desc = std::move(desc_owner);
    plan.a = std::move(a_owner);
    plan.b = std::move(b_owner);
    plan.d = std::move(d_owner);
    plan.variant_index = vi;
    plan.variant = v;
    plan.dequant_w = weight_only;
    plan.int_scale = int8;
    plan.lt_scales = p.kind == GemmKind::kFp8 && !v.acc_scratch;
    plan.post_bias = p.has_bias && !v.lt_bias && !v.acc_scratch;
    plan.post_act = (v.lt_gelu || v.acc_scratch) ? GemmActivation::kNone : p.activation;
    plan.heuristic_algo = result.algo;
    plan.heuristic_workspace = result.workspaceSize;
    plan.align_a = align_a;
    plan.align_b = align_b;
    plan.align_d = align_d;
    plan.ran_ok = false;
    plan.choice_checked = false;

    std::string desc_text = plan.dequant_w ? "dequantize_w > cublaslt" : "cublaslt";
    std::string fused;
    if (v.outer_vec) fused += "outer_vec";
    if (v.lt_bias) fused += std::string(fused.empty() ? "" : "+") + "bias";
    if (v.lt_gelu) fused += std::string(fused.empty() ? "" : "+") + "gelu_tanh";
    if (p.kind == GemmKind::kFp8 && p.fp8_fast_accum) fused += std::string(fused.empty() ? "" : "+") + "fast_accum";
    if (!fused.empty()) desc_text += "[" + fused + "]";
    if (v.acc_scratch) desc_text += std::string(" > ") + (int8 ? "i32" : "f32") + " acc > scale_epilogue";
    if (plan.post_bias || plan.post_act != GemmActivation::kNone) desc_text += " > bias_activation";
    plan.description = desc_text;
    return Status::Ok();
  }
  return last;
}

Result<LtGemm::Plan*> LtGemm::GetPlan(const GemmProblem& p, const GemmArgs& args, int only_variant) {
  PlanKey key;
  key.variant = static_cast<int8_t>(only_variant);
  key.problem = p;
  key.problem.ldx = p.x_stride();
  key.problem.ldy = p.y_stride();
  key.problem.small_m_max = 0;
  if (!p.has_bias) key.problem.bias_dtype = DType::kF32;
  key.align_x = AlignLog2(args.x);
  key.align_w = AlignLog2(args.w);
  key.align_y = AlignLog2(args.y);
  key.align_bias = p.has_bias ? AlignLog2(args.bias) : 0;
  auto it = plans_.find(key);
  if (it != plans_.end()) return it->second.get();
  auto plan = std::make_unique<Plan>();
  FERRY_RETURN_IF_ERROR(only_variant >= 0 ? BuildPlan(p, args, only_variant, *plan, /*only_first=*/true)
                                          : BuildPlan(p, args, 0, *plan));
  Plan* raw = plan.get();
  plans_.emplace(key, std::move(plan));
  return raw;
}

Status LtGemm::SetCallPointers(Plan& plan, const GemmArgs& args) {
  if (plan.variant.lt_bias) {
    FERRY_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(plan.desc.get(), CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                                &args.bias, sizeof(args.bias)));
  }
  if (plan.lt_scales) {
    FERRY_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(plan.desc.get(), CUBLASLT_MATMUL_DESC_A_SCALE_POINTER,
                                                                &args.w_scale, sizeof(args.w_scale)));
    FERRY_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(plan.desc.get(), CUBLASLT_MATMUL_DESC_B_SCALE_POINTER,
                                                                &args.x_scale, sizeof(args.x_scale)));
  }
  return Status::Ok();
}

size_t LtGemm::PlanScratchBytes(const Plan& plan, const GemmProblem& p) {
  if (plan.dequant_w) return static_cast<size_t>(p.n) * static_cast<size_t>(p.k) * DTypeSize(p.out_dtype);
  if (plan.variant.acc_scratch) return static_cast<size_t>(p.m) * static_cast<size_t>(p.n) * 4;
  return 0;
}

Status LtGemm::RunPlanned(Plan& plan, const GemmProblem& p, const GemmArgs& args, cudaStream_t stream,
                          const cublasLtMatmulAlgo_t& algo, size_t algo_workspace, cublasStatus_t* lt_status) {
  *lt_status = CUBLAS_STATUS_SUCCESS;
  const void* a_ptr = args.w;
  void* d_ptr = args.y;
  if (plan.dequant_w && p.kind == GemmKind::kInt4WeightOnly) {
    FERRY_RETURN_IF_ERROR(gemm_kernels::DequantizeInt4Rows(static_cast<const uint32_t*>(args.w), p.n, p.k,
                                                           p.group_size, args.w_scale, args.w_zero, scratch_.get(),
                                                           p.out_dtype, stream));
    a_ptr = scratch_.get();
  } else if (plan.dequant_w) {
    FERRY_RETURN_IF_ERROR(gemm_kernels::DequantizeInt8Rows(static_cast<const int8_t*>(args.w), p.n, p.k, args.w_scale,
                                                           scratch_.get(), p.out_dtype, stream));
    a_ptr = scratch_.get();
  }
  if (plan.variant.acc_scratch) d_ptr = scratch_.get();
  const float alpha_f = 1.0f, beta_f = 0.0f;
  const int32_t alpha_i = 1, beta_i = 0;
  const void* alpha = plan.int_scale ? static_cast<const void*>(&alpha_i) : static_cast<const void*>(&alpha_f);
  const void* beta = plan.int_scale ? static_cast<const void*>(&beta_i) : static_cast<const void*>(&beta_f);
  *lt_status = cublasLtMatmul(handle_.get(), plan.desc.get(), alpha, a_ptr, plan.a.get(), args.x, plan.b.get(), beta,
                              d_ptr, plan.d.get(), d_ptr, plan.d.get(), &algo,
                              algo_workspace ? workspace_.get() : nullptr, algo_workspace, stream);
  if (*lt_status != CUBLAS_STATUS_SUCCESS) return CublasFailure(*lt_status, "cublasLtMatmul", __FILE__, __LINE__);
  plan.ran_ok = true;
  if (plan.variant.acc_scratch) {
    const bool int8 = p.kind == GemmKind::kInt8;
    FERRY_RETURN_IF_ERROR(gemm_kernels::ScaleEpilogue(
        scratch_.get(), int8 ? DType::kI32 : DType::kF32, p.m, p.n, args.x_scale, /*per_row=*/true, args.w_scale,
        /*per_col=*/true, p.has_bias ? args.bias : nullptr, p.bias_dtype, p.activation, args.y, p.out_dtype,
        p.y_stride(), stream));
  } else if (plan.post_bias || plan.post_act != GemmActivation::kNone) {
    FERRY_RETURN_IF_ERROR(gemm_kernels::BiasActivation(args.y, p.out_dtype, p.m, p.n, p.y_stride(),
                                                       plan.post_bias ? args.bias : nullptr, p.bias_dtype,
                                                       plan.post_act, stream));
  }
  return Status::Ok();
}

bool LtGemm::UseSmallM(const GemmProblem& p, const GemmArgs& args, const GemmChoice* choice) const {
  if (p.kind == GemmKind::kBF16 || p.kind == GemmKind::kF16) {
    // Dense weights: only where a tuned choice (or small_m_max) says the kernel is faster.
    if (!DenseSmallMApplies(p, args)) return false;
    if (choice != nullptr) return choice->route == GemmChoice::Route::kSmallM;
    return p.small_m_max > 0 && p.m <= p.small_m_max;
  }
  if (p.kind == GemmKind::kInt4WeightOnly) {
    if (!gemm_kernels::Int4Supported(args.x, p.out_dtype, p.x_stride(), args.w, p.k, p.group_size)) return false;
  } else if (p.kind != GemmKind::kInt8WeightOnly ||
             !gemm_kernels::SmallMSupported(args.x, p.out_dtype, p.x_stride(), static_cast<const int8_t*>(args.w),
                                            p.k)) {
    return false;
  }
  if (choice != nullptr) return choice->route == GemmChoice::Route::kSmallM;
  const int limit = p.small_m_max == 0 ? kInt8WeightOnlySmallMDefault : p.small_m_max;
  return limit > 0 && p.m <= limit;
}

Status LtGemm::RunSmallM(const GemmProblem& p, const GemmArgs& args, cudaStream_t stream) {
  if (p.kind == GemmKind::kBF16 || p.kind == GemmKind::kF16) {
    return gemm_kernels::DenseSmallM(args.x, p.out_dtype, p.x_stride(), p.m, args.w, p.n, p.k,
                                     p.has_bias ? args.bias : nullptr, p.bias_dtype, p.activation, args.y,
                                     p.y_stride(), stream);
  }
  if (p.kind == GemmKind::kInt4WeightOnly) {
    return gemm_kernels::Int4SmallM(args.x, p.out_dtype, p.x_stride(), p.m, static_cast<const uint32_t*>(args.w),
                                    args.w_scale, args.w_zero, p.n, p.k, p.group_size,
                                    p.has_bias ? args.bias : nullptr, p.bias_dtype, p.activation, args.y,
                                    p.y_stride(), stream);
  }
  return gemm_kernels::Int8WeightOnlySmallM(args.x, p.out_dtype, p.x_stride(), p.m, static_cast<const int8_t*>(args.w),
                                            args.w_scale, p.n, p.k, p.has_bias ? args.bias : nullptr, p.bias_dtype,
                                            p.activation, args.y, p.y_stride(), stream);
}

bool LtGemm::UseInt4Mma(const GemmProblem& p, const GemmArgs& args, const GemmChoice* choice) const {
  if (p.kind != GemmKind::kInt4WeightOnly ||
      !gemm_kernels::Int4MmaSupported(args.x, p.out_dtype, p.x_stride(), args.w, p.k, p.group_size)) {
    return false;
  }
  if (choice != nullptr) return choice->route == GemmChoice::Route::kInt4Mma;
  return p.m <= kInt4MmaMaxMDefault;
}

Status LtGemm::RunInt4Mma(const GemmProblem& p, const GemmArgs& args, cudaStream_t stream) {
  FERRY_RETURN_IF_ERROR(EnsureScratch(gemm_kernels::Int4MmaScratchBytes(p.m, p.n, p.k), stream));
  return gemm_kernels::Int4Mma(args.x, p.out_dtype, p.x_stride(), p.m, static_cast<const uint32_t*>(args.w),
                               args.w_scale, args.w_zero, p.n, p.k, p.group_size, p.has_bias ? args.bias : nullptr,
                               p.bias_dtype, p.activation, args.y, p.y_stride(), static_cast<float*>(scratch_.get()),
                               stream);
}

bool LtGemm::W8MmaApplies(const GemmProblem& p, const GemmArgs& args) const {
  const bool kind_ok = p.kind == GemmKind::kFp8 || (p.kind == GemmKind::kInt8 && p.out_dtype != DType::kI32);
  // Hopper's wgmma, built for sm_90a: compute capability 9.0 exactly. fp8 only with fast
  // accumulation (the tensor cores' accumulator over the whole K), which the kernel uses.
  const bool accumulation_ok = p.kind != GemmKind::kFp8 || p.fp8_fast_accum;
  return kind_ok && accumulation_ok && cc_major_ == 9 && cc_minor_ == 0 &&
         gemm_kernels::W8MmaSupported(args.x, p.x_stride(), args.w, p.m, p.k);
}

Status LtGemm::RunW8Mma(const GemmProblem& p, const GemmArgs& args, cudaStream_t stream, bool wide_tile) {
  const bool per_row_col = p.kind == GemmKind::kInt8 || p.fp8_scaling == Fp8Scaling::kPerRowCol;
  return gemm_kernels::W8Mma(p.kind == GemmKind::kInt8, args.x, p.x_stride(), p.m, args.w, p.n, p.k, args.x_scale,
                             per_row_col, args.w_scale, per_row_col, p.has_bias ? args.bias : nullptr, p.bias_dtype,
                             p.activation, args.y, p.out_dtype, p.y_stride(), stream, wide_tile);
}

Status LtGemm::RunLt(const GemmProblem& p, const GemmArgs& args, cudaStream_t stream, const GemmChoice* choice,
                     const cublasLtMatmulAlgo_t* forced_algo) {
  // An accumulator-route choice runs on that variant's own plan; where the problem has no
  // such variant (not fp8 per-row/col), the default plan's heuristic runs instead.
  int only_variant = -1;
  if (choice != nullptr && choice->route == GemmChoice::Route::kCublasLtAcc) {
    only_variant = AccVariantIndex(p);
    if (only_variant < 0) {
      ++choice_fallbacks_;
      choice = nullptr;
    }
  }
  FERRY_ASSIGN_OR_RETURN(Plan * plan, GetPlan(p, args, only_variant));
  FERRY_RETURN_IF_ERROR(EnsureScratch(PlanScratchBytes(*plan, p), stream));
  FERRY_RETURN_IF_ERROR(SetCallPointers(*plan, args));

  cublasLtMatmulAlgo_t algo = plan->heuristic_algo;
  size_t algo_ws = plan->heuristic_workspace;
  if (forced_algo != nullptr) {
    algo = *forced_algo;
    algo_ws = choice != nullptr ? choice->workspace_bytes : 0;
  } else if (choice != nullptr && (choice->route == GemmChoice::Route::kSmallM ||
                                   choice->route == GemmChoice::Route::kInt4Mma ||
                                   choice->route == GemmChoice::Route::kW8Mma)) {
    ++choice_fallbacks_;  // a kernel choice this problem cannot take (alignment, rows)
  } else if (choice != nullptr && choice->workspace_bytes > workspace_bytes_) {
    ++choice_fallbacks_;  // tuned with a larger workspace than this LtGemm owns
  } else if (choice != nullptr) {
    if (!plan->choice_checked || plan->checked_algo != choice->algo) {
      cublasLtMatmulAlgo_t candidate;
      std::memcpy(candidate.data, choice->algo.data(), sizeof(candidate.data));
      cublasLtMatmulHeuristicResult_t check{};
      const cublasStatus_t st = cublasLtMatmulAlgoCheck(handle_.get(), plan->desc.get(), plan->a.get(), plan->b.get(),
                                                        plan->d.get(), plan->d.get(), &candidate, &check);
      plan->choice_checked = true;
      plan->checked_algo = choice->algo;
      plan->choice_ok = st == CUBLAS_STATUS_SUCCESS && check.workspaceSize <= workspace_bytes_;
      plan->checked_workspace = check.workspaceSize;
    }
    if (plan->choice_ok) {
      std::memcpy(algo.data, choice->algo.data(), sizeof(algo.data));
      algo_ws = plan->checked_workspace;
    } else {
      ++choice_fallbacks_;
    }
  }

  cublasStatus_t lt_status = CUBLAS_STATUS_SUCCESS;
  Status status = RunPlanned(*plan, p, args, stream, algo, algo_ws, &lt_status);
  // A variant the heuristic offered but the library refuses at run time (e.g. a scale mode
  // this device lacks): before the plan's first success, fall to the next variant.
  while (!status.ok() && !plan->ran_ok && forced_algo == nullptr &&
         (lt_status == CUBLAS_STATUS_NOT_SUPPORTED || lt_status == CUBLAS_STATUS_INVALID_VALUE) &&
         plan->variant_index + 1 < plan->variant_count) {
    Plan next;
    if (!BuildPlan(p, args, plan->variant_index + 1, next).ok()) return status;
    *plan = std::move(next);
    FERRY_RETURN_IF_ERROR(EnsureScratch(PlanScratchBytes(*plan, p), stream));
    FERRY_RETURN_IF_ERROR(SetCallPointers(*plan, args));
    status = RunPlanned(*plan, p, args, stream, plan->heuristic_algo, plan->heuristic_workspace, &lt_status);
  }
  return status;
}

namespace {

Status CheckArgs(const GemmProblem& p, const GemmArgs& args) {
  const auto bad = [&p](const std::string& why) { return InvalidArgument(why + ": " + ProblemString(p)); };
  if (args.x == nullptr || args.w == nullptr || args.y == nullptr) return bad("GEMM needs x, w and y");
  if (p.has_bias && args.bias == nullptr) return bad("GEMM has_bias without a bias pointer");
  const bool needs_scales = (p.kind == GemmKind::kInt8 && p.out_dtype != DType::kI32) ||
                            (p.kind == GemmKind::kFp8 && p.fp8_scaling == Fp8Scaling::kPerRowCol);
  if (needs_scales && (args.x_scale == nullptr || args.w_scale == nullptr)) {
    return bad("GEMM needs x_scale and w_scale");
  }
  if (p.kind == GemmKind::kInt8WeightOnly && args.w_scale == nullptr) return bad("int8 weight-only GEMM needs w_scale");
  if (p.kind == GemmKind::kInt4WeightOnly && (args.w_scale == nullptr || args.w_zero == nullptr)) {
    return bad("int4 weight-only GEMM needs w_scale and w_zero");
  }
  const size_t x_align = p.kind == GemmKind::kFp8 ? 16 : p.kind == GemmKind::kInt8 ? 4 : DTypeSize(XDType(p));
  const size_t w_align = p.kind == GemmKind::kFp8 ? 16 : p.kind == GemmKind::kInt8 ? 4 : DTypeSize(WDType(p));
  if (!AlignedTo(args.x, x_align) || !AlignedTo(args.w, w_align) || !AlignedTo(args.y, DTypeSize(p.out_dtype)) ||
      (p.has_bias && !AlignedTo(args.bias, DTypeSize(p.bias_dtype)))) {
    return bad("GEMM pointers misaligned (x needs " + std::to_string(x_align) + " bytes, w " +
               std::to_string(w_align) + ")");
  }
  return Status::Ok();
}

}  // namespace

Status LtGemm::Run(const GemmProblem& p, const GemmArgs& args, cudaStream_t stream, const GemmChoice* choice) {
  FERRY_RETURN_IF_ERROR(CheckProblem(p));
  if (p.m == 0) return Status::Ok();
  FERRY_RETURN_IF_ERROR(CheckArgs(p, args));
  if (choice != nullptr && choice->route == GemmChoice::Route::kSmallM && p.kind != GemmKind::kInt8WeightOnly &&
      p.kind != GemmKind::kInt4WeightOnly && p.kind != GemmKind::kBF16 && p.kind != GemmKind::kF16) {
    return InvalidArgument("small-M GEMM choice for a " + std::string(GemmKindName(p.kind)) + " problem");
  }
  if (choice != nullptr && choice->route == GemmChoice::Route::kInt4Mma && p.kind != GemmKind::kInt4WeightOnly) {
    return InvalidArgument("int4 tensor-core GEMM choice for a " + std::string(GemmKindName(p.kind)) + " problem");
  }
  if (choice != nullptr && choice->route == GemmChoice::Route::kCublasLtAcc && AccVariantIndex(p) < 0) {
    return InvalidArgument("accumulator-route GEMM choice for a problem without one: " + ProblemString(p));
  }
  if (choice != nullptr && choice->route == GemmChoice::Route::kW8Mma &&
      !(p.kind == GemmKind::kFp8 || (p.kind == GemmKind::kInt8 && p.out_dtype != DType::kI32))) {
    return InvalidArgument("8-bit tensor-core GEMM choice for a " + std::string(GemmKindName(p.kind)) + " problem");
  }
  // A bucket's choice also runs at its other row counts; with operands the kernel cannot
  // take, RunLt counts the fallback and runs cuBLASLt's heuristic.
  if (choice != nullptr && choice->route == GemmChoice::Route::kW8Mma && W8MmaApplies(p, args)) {
    return RunW8Mma(p, args, stream, choice->wide_tile);
  }
  if (UseSmallM(p, args, choice)) return RunSmallM(p, args, stream);
  if (UseInt4Mma(p, args, choice)) return RunInt4Mma(p, args, stream);
  return RunLt(p, args, stream, choice, nullptr);
}

Result<std::string> LtGemm::DescribeRoute(const GemmProblem& p, const GemmArgs& args) {
  FERRY_RETURN_IF_ERROR(CheckProblem(p));
  FERRY_RETURN_IF_ERROR(CheckArgs(p, args));
  if (UseSmallM(p, args, nullptr)) return std::string("small_m_kernel");
  if (UseInt4Mma(p, args, nullptr)) return std::string("int4_mma_kernel");
  FERRY_ASSIGN_OR_RETURN(Plan * plan, GetPlan(p, args));
  return plan->description;
}

Result<GemmChoice> LtGemm::Tune(const GemmProblem& p, const GemmArgs& args, cudaStream_t stream,
                                const TuneOptions& options) {
  FERRY_RETURN_IF_ERROR(CheckProblem(p));
  if (p.m == 0) return InvalidArgument("GEMM Tune needs M > 0");
  FERRY_RETURN_IF_ERROR(CheckArgs(p, args));
  if (options.max_algos <= 0 || options.timed_runs <= 0) return InvalidArgument("Tune needs algorithms and runs");

  // Timing runs on a private stream (graph capture needs one that is not the legacy
  // default stream), after the caller's stream has produced the inputs.
  FERRY_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
  cudaStream_t raw_stream = nullptr;
  FERRY_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&raw_stream, cudaStreamNonBlocking));
  StreamPtr stream_owner(raw_stream);
  cudaStream_t tune_stream = raw_stream;

  // The heuristic's route first: it builds the plan (falling through variants the library
  // refuses at run time) and reserves the scratch, which must not grow during capture.
  FERRY_RETURN_IF_ERROR(RunLt(p, args, tune_stream, nullptr, nullptr));
  FERRY_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(tune_stream));
  FERRY_ASSIGN_OR_RETURN(Plan * plan, GetPlan(p, args));

  std::vector<GemmChoice> candidates;
  if (p.kind == GemmKind::kInt8WeightOnly &&
      gemm_kernels::SmallMSupported(args.x, p.out_dtype, p.x_stride(), static_cast<const int8_t*>(args.w), p.k) &&
      p.m <= 64) {
    GemmChoice c;
    c.route = GemmChoice::Route::kSmallM;
    candidates.push_back(c);
  }
  if ((options.dense_small_m && DenseSmallMApplies(p, args) && p.m <= kDenseSmallMMaxM) || options.extra_small_m) {
    GemmChoice c;
    c.route = GemmChoice::Route::kSmallM;
    candidates.push_back(c);
  }
  if (p.kind == GemmKind::kInt4WeightOnly &&
      gemm_kernels::Int4Supported(args.x, p.out_dtype, p.x_stride(), args.w, p.k, p.group_size)) {
    if (p.m <= 64) {
      GemmChoice c;
      c.route = GemmChoice::Route::kSmallM;
      candidates.push_back(c);
    }
    if (p.m <= 512 && gemm_kernels::Int4MmaSupported(args.x, p.out_dtype, p.x_stride(), args.w, p.k, p.group_size)) {
      FERRY_RETURN_IF_ERROR(EnsureScratch(gemm_kernels::Int4MmaScratchBytes(p.m, p.n, p.k), tune_stream));
      GemmChoice c;
      c.route = GemmChoice::Route::kInt4Mma;
      candidates.push_back(c);
    }
  }
  // Decode batches of 8-bit operands: ferry's tensor-core kernel, scales in its registers.
  // FERRY_W8_MMA=0 leaves the kernel out of tuning (engines built then never choose it).
  static const bool w8_allowed = [] {
    const char* v = std::getenv("FERRY_W8_MMA");
    return v == nullptr || std::strcmp(v, "0") != 0;
  }();
  // Past kW8MmaMaxM rows the route runs the tile kernel (prefill, encoder batches). On an H100
  // its TMA form ran W8A8 GEMMs at 1.02-2.45x cuBLASLt's IMMA route on bert-base's shapes (its
  // down projection at 512 rows excepted) and 1.17-1.42x on llama-3-8B's at 2,048 rows, e4m3
  // ones at 0.67-0.89x cuBLASLt's (docs/performance.md), so the tuner times it for int8;
  // FERRY_W8_TILE=1 offers it for fp8 too, FERRY_W8_TILE=0 for neither.
  static const int tile_setting = [] {
    const char* v = std::getenv("FERRY_W8_TILE");
    return v == nullptr || *v == '\0' ? -1 : std::atoi(v);
  }();
  const bool tile_allowed = tile_setting == 1 || (tile_setting == -1 && p.kind == GemmKind::kInt8);
  // FERRY_W8_MMA_TUNED_M (up to kW8MmaMaxM) offers the decode kernel to more rows than
  // kW8MmaTunedMaxM, for measuring it in engines.
  static const int64_t decode_rows = [] {
    const char* v = std::getenv("FERRY_W8_MMA_TUNED_M");
    const int n = v == nullptr ? 0 : std::atoi(v);
    return static_cast<int64_t>(n >= 1 && n <= kW8MmaMaxM ? n : kW8MmaTunedMaxM);
  }();
  const bool w8_rows = p.m <= decode_rows || (p.m > kW8MmaMaxM && tile_allowed);
  if (options.w8_mma && w8_allowed && w8_rows && W8MmaApplies(p, args)) {
    GemmChoice c;
    c.route = GemmChoice::Route::kW8Mma;
    candidates.push_back(c);
    // Past the decode kernel's rows the TMA tile kernel comes in two tile widths: 128 tokens
    // (two blocks a multiprocessor) won on bert-base's linears (K = 768) on an H100, 256 tokens on
    // llama-3-8B's at 2,048 rows (docs/performance.md); the tuner times both.
    if (p.m > kW8MmaMaxM && gemm_kernels::W8TileKernelVariant() < 0) {
      c.wide_tile = true;
      candidates.push_back(c);
    }
  }
  // The heuristic's algorithms for one plan, as candidates of `route`.
  const auto add_candidates = [&](const Plan& pl, GemmChoice::Route route) -> Status {
    cublasLtMatmulPreference_t pref = nullptr;
    FERRY_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulPreferenceCreate(&pref));
    PreferencePtr pref_owner(pref);
    const uint64_t max_ws = workspace_bytes_;
    FERRY_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &max_ws, sizeof(max_ws)));
    const uint32_t align_bytes[4] = {1u << pl.align_a, 1u << pl.align_b, 1u << pl.align_d, 1u << pl.align_d};
    const cublasLtMatmulPreferenceAttributes_t align_attr[4] = {
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
    for (int i = 0; i < 4; ++i) {
      FERRY_CUBLAS_RETURN_IF_ERROR(
          cublasLtMatmulPreferenceSetAttribute(pref, align_attr[i], &align_bytes[i], sizeof(align_bytes[i])));
    }
    std::vector<cublasLtMatmulHeuristicResult_t> results(options.max_algos);
    int count = 0;
    FERRY_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulAlgoGetHeuristic(handle_.get(), pl.desc.get(), pl.a.get(),
                                                                pl.b.get(), pl.d.get(), pl.d.get(), pref,
                                                                options.max_algos, results.data(), &count));
    for (int i = 0; i < count; ++i) {
      if (results[i].state != CUBLAS_STATUS_SUCCESS || results[i].workspaceSize > workspace_bytes_) continue;
      GemmChoice c;
      c.route = route;
      std::memcpy(c.algo.data(), results[i].algo.data, sizeof(results[i].algo.data));
      c.workspace_bytes = results[i].workspaceSize;
      candidates.push_back(c);
    }
    return Status::Ok();
  };
  FERRY_RETURN_IF_ERROR(add_candidates(*plan, plan->variant.acc_scratch && AccVariantIndex(p) >= 0
                                                  ? GemmChoice::Route::kCublasLtAcc
                                                  : GemmChoice::Route::kCublasLt));
  // fp8 per-row/col: the f32-accumulator route's algorithms compete with the outer-vector
  // ones. cuBLASLt offers few kernels with outer-vector scales (one 128 x 128 tile on an
  // H200), which leave most multiprocessors idle for decode-sized M; the accumulator route
  // has split-K and small tiles, and its epilogue pass costs little at small M.
  if (const int acc = AccVariantIndex(p); acc >= 0 && !plan->variant.acc_scratch) {
    Result<Plan*> acc_plan = GetPlan(p, args, acc);
    if (acc_plan.ok()) FERRY_RETURN_IF_ERROR(add_candidates(**acc_plan, GemmChoice::Route::kCublasLtAcc));
  }
  if (candidates.empty()) return Unimplemented("no GEMM candidates to tune for " + ProblemString(p));

  EventPair events;
  FERRY_RETURN_IF_ERROR(events.Init());
  const auto run_candidate = [&](const GemmChoice& c) -> Status {
    if (c.route == GemmChoice::Route::kSmallM) {
      return options.extra_small_m ? options.extra_small_m(tune_stream) : RunSmallM(p, args, tune_stream);
    }
    if (c.route == GemmChoice::Route::kInt4Mma) return RunInt4Mma(p, args, tune_stream);
    if (c.route == GemmChoice::Route::kW8Mma) return RunW8Mma(p, args, tune_stream, c.wide_tile);
    cublasLtMatmulAlgo_t algo;
    std::memcpy(algo.data, c.algo.data(), sizeof(algo.data));
    return RunLt(p, args, tune_stream, &c, &algo);
  };
  // Per-call device time of a candidate: `calls` back-to-back runs captured in a graph and
  // replayed, so launch gaps (cuBLASLt's host work is longer than a decode GEMM) stay out.
  // Without a graph (capture refused), the same calls are enqueued directly.
  const auto time_candidate = [&](const GemmChoice& c, bool use_graph) -> Result<float> {
    const int calls = std::max(1, options.calls_per_sample);
    GraphPtr graph_owner;
    GraphExecPtr exec_owner;
    if (use_graph) {
      FERRY_CUDA_RETURN_IF_ERROR(cudaStreamBeginCapture(tune_stream, cudaStreamCaptureModeThreadLocal));
      Status captured = Status::Ok();
      for (int i = 0; i < calls && captured.ok(); ++i) captured = run_candidate(c);
      cudaGraph_t graph = nullptr;
      const cudaError_t ended = cudaStreamEndCapture(tune_stream, &graph);
      graph_owner.reset(graph);
      FERRY_RETURN_IF_ERROR(captured);
      FERRY_CUDA_RETURN_IF_ERROR(ended);
      cudaGraphExec_t exec = nullptr;
      FERRY_CUDA_RETURN_IF_ERROR(cudaGraphInstantiate(&exec, graph, 0));
      exec_owner.reset(exec);
      FERRY_CUDA_RETURN_IF_ERROR(cudaGraphLaunch(exec, tune_stream));
    }
    const auto enqueue = [&]() -> Status {
      if (use_graph) {
        FERRY_CUDA_RETURN_IF_ERROR(cudaGraphLaunch(exec_owner.get(), tune_stream));
        return Status::Ok();
      }
      for (int i = 0; i < calls; ++i) FERRY_RETURN_IF_ERROR(run_candidate(c));
      return Status::Ok();
    };
    std::vector<float> times;
    for (int i = 0; i < options.timed_runs; ++i) {
      FERRY_CUDA_RETURN_IF_ERROR(cudaEventRecord(events.start(), tune_stream));
      FERRY_RETURN_IF_ERROR(enqueue());
      FERRY_CUDA_RETURN_IF_ERROR(cudaEventRecord(events.stop(), tune_stream));
      FERRY_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(events.stop()));
      float ms = 0.0f;
      FERRY_CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&ms, events.start(), events.stop()));
      times.push_back(ms * 1000.0f / static_cast<float>(calls));
    }
    std::nth_element(times.begin(), times.begin() + times.size() / 2, times.end());
    return times[times.size() / 2];
  };

  GemmChoice best;
  bool have_best = false;
  for (const GemmChoice& c : candidates) {
    bool failed = false;
    for (int i = 0; i < options.warmup_runs && !failed; ++i) failed = !run_candidate(c).ok();
    if (failed || cudaStreamSynchronize(tune_stream) != cudaSuccess) continue;  // cannot run here: no candidate
    Result<float> us = time_candidate(c, /*use_graph=*/true);
    if (!us.ok()) {
      (void)cudaGetLastError();  // a refused capture leaves no sticky error
      us = time_candidate(c, /*use_graph=*/false);
      if (!us.ok()) continue;
    }
    if (!have_best || *us < best.measured_us) {
      best = c;
      best.measured_us = *us;
      have_best = true;
    }
  }
  if (!have_best) return Internal("no GEMM candidate ran for " + ProblemString(p));
  FERRY_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(tune_stream));
  return best;
}

}  // namespace ferry::cuda
