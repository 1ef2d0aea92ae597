#include "backend/cuda/gemm_tuning.h"

#include <nlohmann/json.hpp>

#include "backend/cuda/linear_gemm.h"
#include "backend/cuda/linear_weights.h"
#include "kernels/cuda/kernels.h"

namespace ferry::backend {

using json = nlohmann::json;

Result<std::string> GemmTuner::Tune(LinearWeight& w) {
  auto* lin = static_cast<CudaLinear*>(w.packed.get());
  if (lin == nullptr) return FailedPrecondition("TuneLinear: weight was not prepared for the CUDA backend");
  FERRY_RETURN_IF_ERROR(ctx_.NotRecording("TuneLinear"));
  const int64_t n = w.out_features(), k = w.in_features();
  const auto key = std::make_tuple(static_cast<int>(lin->kind), n, k, lin->bias.defined());
  auto it = tuned_.find(key);
  if (it != tuned_.end()) {
    lin->choices = it->second;
    return std::string();
  }
  const DType act = activations_;
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
  FERRY_ASSIGN_OR_RETURN(Tensor x32, ctx_.Upload(host.data(), {max_m, k}, DType::kF32));
  FERRY_ASSIGN_OR_RETURN(Tensor x, ctx_.Allocate({max_m, k}, act));
  FERRY_ASSIGN_OR_RETURN(Tensor y, ctx_.Allocate({max_m, n}, act));
  FERRY_RETURN_IF_ERROR(cuda::Convert(x32.raw(), DType::kF32, x.raw(), act, max_m * k, ctx_.stream()));
  for (int b = 0; b < cuda::kGemmMBuckets; ++b) {
    const int64_t m = cuda::GemmBucketTuneM(b);
    Tensor xb = x.Slice(0, m), yb = y.Slice(0, m);
    cuda::GemmProblem p;
    cuda::GemmArgs a;
    Tensor q, row_scales;
    FERRY_RETURN_IF_ERROR(SetUpGemm(ctx_, xb, *lin, n, yb, p, a, q, row_scales));
    cuda::TuneOptions options;
    if (m <= cuda::kDenseSmallMMaxM && UnquantizedSmallMApplies(*lin)) {
      // Decode batches of fp8 and W8A8 weights: the small-M kernel on the unquantized input
      // competes with cuBLASLt's GEMMs (their input quantization, which it saves, is not counted).
      // Timed as it runs behind a norm or a gating, which apply a W8A8 weight's SmoothQuant
      // factors (three of a decoder layer's four linears); behind attention (o) the kernel
      // multiplies them in as well.
      options.extra_small_m = [&, m](cudaStream_t stream) {
        return RunUnquantizedSmallM(*lin, xb.raw(), act, m, n, k, yb.raw(), stream, /*smoothed_input=*/true);
      };
    }
    FERRY_ASSIGN_OR_RETURN(cuda::GemmChoice choice, gemm_.Tune(p, a, ctx_.stream(), options));
    report["buckets"].push_back({{"m", m}, {"choice", choice.ToString()}, {"us", choice.measured_us}});
    choices[b] = choice;
  }
  lin->choices = choices;
  tuned_.emplace(key, std::move(choices));
  return report.dump();
}

}  // namespace ferry::backend
