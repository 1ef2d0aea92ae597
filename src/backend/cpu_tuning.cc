// The CPU backend's tuned kernel choice. The one choice on the CPU that depends on a
// weight's shape is where the one-pass decode kernel (small M) stops beating the blocked
// GEMM as rows grow; an engine build times both on the machine it targets, per weight shape
// and row bucket, as TensorRT's builder times its tactics.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <mutex>
#include <vector>

#include "backend/cpu_backend.h"
#include "core/thread_pool.h"
#include "kernels/cpu/packed_weight.h"

namespace ferry::backend {

namespace {

constexpr int kRowBuckets[] = {1, 2, 4, 8, 16, 32, 64};

// Best of three batches, each long enough (>= 1 ms) for the clock to resolve it.
Result<double> TimeLinearUs(CpuBackend& be, const Tensor& x, const LinearWeight& w, Tensor& y) {
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
}

}  // namespace

Result<std::string> CpuBackend::TuneLinear(LinearWeight& w) {
  if (kernels::cpu::AsPackedWeight(w.packed) == nullptr) {
    return FailedPrecondition("TuneLinear: the weight has not been prepared by the CPU backend");
  }
  const TuneKey key{static_cast<int>(w.format), w.block_size, w.out_features(), w.in_features()};
  {
    std::lock_guard<std::mutex> lock(tune_mu_);
    const auto it = tuned_.find(key);
    if (it != tuned_.end()) {
      w.small_m_max = it->second;
      return std::string();
    }
  }
  const int64_t n = std::get<2>(key), k = std::get<3>(key);
  nlohmann::json row = {{"format", WeightFormatName(w.format)}, {"n", n}, {"k", k}};
  // The largest bucket where the small-M kernel is at least as fast.
  int best = -1;
  for (const int m : kRowBuckets) {
    Tensor x = Tensor::Empty({m, k}, DType::kF32);
    for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = static_cast<float>((i * 7919 % 2001) - 1000) * 1e-3f;
    Tensor y = Tensor::Empty({m, n}, DType::kF32);
    LinearWeight probe = w;
    probe.small_m_max = m;  // forces the small-M kernel for this M
    FERRY_ASSIGN_OR_RETURN(const double small_us, TimeLinearUs(*this, x, probe, y));
    probe.small_m_max = m == 1 ? -1 : m - 1;  // forces the blocked GEMM
    FERRY_ASSIGN_OR_RETURN(const double gemm_us, TimeLinearUs(*this, x, probe, y));
    row["m"].push_back(m);
    row["small_m_us"].push_back(small_us);
    row["gemm_us"].push_back(gemm_us);
    if (small_us <= gemm_us) best = m;
  }
  row["small_m_max"] = best;
  {
    std::lock_guard<std::mutex> lock(tune_mu_);
    tuned_[key] = best;
  }
  w.small_m_max = best;
  return row.dump();
}

std::string CpuBackend::DescribeTuning() const {
  // The crossover moves with the thread count, so the engine records the count it was timed with.
  return nlohmann::json{{"choice", "small_m_max: largest rows that run the one-pass decode kernel (else blocked GEMM)"},
                        {"threads", ComputeThreads()}}
      .dump();
}

}  // namespace ferry::backend
