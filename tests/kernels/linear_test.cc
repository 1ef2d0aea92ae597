#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <mutex>
#include <random>
#include <tuple>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "core/thread_pool.h"
#include "kernels/cpu/linear.h"
#include "kernels/cpu/parallel.h"
#include "kernel_test_util.h"

namespace ferry {
namespace {

using backend::LinearWeight;
using testing::ConvertTo;
using testing::ExpectClose;
using testing::Poisoned;
using testing::RandomTensor;
using testing::Values;

// y = x · W^T + b in double, from the weight's (already rounded) values.
std::vector<double> ReferenceLinear(const Tensor& x, const Tensor& w, const Tensor& bias) {
  const int64_t m = x.dim(0), k = x.dim(1), n = w.dim(0);
  const std::vector<double> xv = Values(x), wv = Values(w);
  const std::vector<double> bv = bias.defined() ? Values(bias) : std::vector<double>();
  std::vector<double> y(static_cast<size_t>(m * n));
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double acc = bv.empty() ? 0.0 : bv[j];
      for (int64_t l = 0; l < k; ++l) acc += xv[i * k + l] * wv[j * k + l];
      y[i * n + j] = acc;
    }
  }
  return y;
}

struct LinearCase {
  int64_t m, n, k;
};

class LinearTest : public ::testing::TestWithParam<std::tuple<DType, bool>> {};

TEST_P(LinearTest, MatchesReferenceOnBothPaths) {
  const auto [dtype, with_bias] = GetParam();
  std::mt19937 rng(1234);
  auto be = backend::MakeCpuBackend();
  const std::vector<LinearCase> cases = {
      {1, 33, 45},  {3, 16, 64},   {17, 70, 257}, {64, 5, 7},     {1, 1, 1},      {5, 40, 2048},
      {9, 24, 2500}, {200, 50, 300}, {13, 17, 19}, {16, 130, 100}, {100, 200, 513}};
  for (const LinearCase& c : cases) {
    SCOPED_TRACE("m=" + std::to_string(c.m) + " n=" + std::to_string(c.n) + " k=" + std::to_string(c.k));
    const Tensor x = RandomTensor({c.m, c.k}, rng);
    LinearWeight w;
    w.weight = ConvertTo(RandomTensor({c.n, c.k}, rng), dtype);
    if (with_bias) w.bias = RandomTensor({c.n}, rng);
    const std::vector<double> ref = ReferenceLinear(x, w.weight, w.bias);

    // Unprepared weight: packed on the fly.
    Tensor y = Poisoned({c.m, c.n});
    ASSERT_TRUE(be->Linear(x, w, y).ok());
    ExpectClose(y, ref, 1e-5, "unprepared");

    ASSERT_TRUE(be->PrepareLinear(w).ok());
    ASSERT_NE(w.packed, nullptr);
    y = Poisoned({c.m, c.n});
    ASSERT_TRUE(be->Linear(x, w, y).ok());
    ExpectClose(y, ref, 1e-5, "prepared");

    // Force each kernel regardless of M.
    for (int64_t gemv_max_rows : {int64_t{0}, int64_t{1} << 30}) {
      kernels::cpu::LinearConfig config;
      config.gemv_max_rows = gemv_max_rows;
      y = Poisoned({c.m, c.n});
      const kernels::cpu::PackedWeight* pw = kernels::cpu::AsPackedWeight(w.packed);
      ASSERT_NE(pw, nullptr);
      ASSERT_TRUE(kernels::cpu::Linear(x, *pw, w.bias, y, config).ok());
      ExpectClose(y, ref, 1e-5, gemv_max_rows == 0 ? "forced gemm" : "forced gemv");
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, LinearTest,
                         ::testing::Combine(::testing::Values(DType::kF32, DType::kBF16, DType::kF16),
                                            ::testing::Bool()));

TEST(LinearTest, Bf16BiasIsWidened) {
  std::mt19937 rng(7);
  auto be = backend::MakeCpuBackend();
  LinearWeight w;
  w.weight = RandomTensor({20, 30}, rng);
  w.bias = ConvertTo(RandomTensor({20}, rng), DType::kBF16);
  ASSERT_TRUE(be->PrepareLinear(w).ok());
  const Tensor x = RandomTensor({4, 30}, rng);
  Tensor y = Poisoned({4, 20});
  ASSERT_TRUE(be->Linear(x, w, y).ok());
  ExpectClose(y, ReferenceLinear(x, w.weight, w.bias), 1e-5, "bf16 bias");
}

TEST(LinearTest, RowSliceViewsWork) {
  std::mt19937 rng(8);
  auto be = backend::MakeCpuBackend();
  LinearWeight w;
  w.weight = RandomTensor({24, 40}, rng);
  ASSERT_TRUE(be->PrepareLinear(w).ok());
  const Tensor big = RandomTensor({30, 40}, rng);
  const Tensor x = big.Slice(5, 25);
  Tensor y = Poisoned({20, 24});
  ASSERT_TRUE(be->Linear(x, w, y).ok());
  ExpectClose(y, ReferenceLinear(x.Clone(), w.weight, w.bias), 1e-5, "slice");
}

TEST(LinearTest, StalePackIsIgnored) {
  // A packed form left over from another weight must not be used.
  std::mt19937 rng(9);
  auto be = backend::MakeCpuBackend();
  LinearWeight a, b;
  a.weight = RandomTensor({16, 32}, rng);
  b.weight = RandomTensor({16, 32}, rng);
  ASSERT_TRUE(be->PrepareLinear(a).ok());
  b.packed = a.packed;
  const Tensor x = RandomTensor({2, 32}, rng);
  Tensor y = Poisoned({2, 16});
  ASSERT_TRUE(be->Linear(x, b, y).ok());
  ExpectClose(y, ReferenceLinear(x, b.weight, b.bias), 1e-5, "stale pack");
}

TEST(LinearTest, RejectsBadShapes) {
  std::mt19937 rng(10);
  auto be = backend::MakeCpuBackend();
  LinearWeight w;
  w.weight = RandomTensor({8, 12}, rng);
  ASSERT_TRUE(be->PrepareLinear(w).ok());
  Tensor y = Tensor::Empty({3, 8}, DType::kF32);
  EXPECT_FALSE(be->Linear(RandomTensor({3, 11}, rng), w, y).ok()) << "wrong K";
  Tensor y_bad = Tensor::Empty({3, 9}, DType::kF32);
  EXPECT_FALSE(be->Linear(RandomTensor({3, 12}, rng), w, y_bad).ok()) << "wrong N";
  Tensor y_rows = Tensor::Empty({4, 8}, DType::kF32);
  EXPECT_FALSE(be->Linear(RandomTensor({3, 12}, rng), w, y_rows).ok()) << "wrong M";
  Tensor x_bf16 = ConvertTo(RandomTensor({3, 12}, rng), DType::kBF16);
  EXPECT_FALSE(be->Linear(x_bf16, w, y).ok()) << "bf16 activations";
  LinearWeight wb = w;
  wb.bias = RandomTensor({7}, rng);
  EXPECT_FALSE(be->Linear(RandomTensor({3, 12}, rng), wb, y).ok()) << "bias size";
  LinearWeight wi;
  wi.weight = Tensor::Zeros({8, 12}, DType::kI8);
  EXPECT_FALSE(be->PrepareLinear(wi).ok()) << "int8 weight";
  EXPECT_FALSE(be->Linear(RandomTensor({3, 12}, rng), wi, y).ok()) << "int8 weight";
  LinearWeight w1;
  w1.weight = RandomTensor({8}, rng);
  EXPECT_FALSE(be->PrepareLinear(w1).ok()) << "1-D weight";
  EXPECT_FALSE(be->Linear(RandomTensor({3, 12}, rng), w1, y).ok()) << "1-D weight";
}

TEST(LinearTest, ResultsDoNotDependOnThreadCount) {
  // Threads split output columns (or rows), never a dot product, so sums keep their order.
  std::mt19937 rng(12);
  auto be = backend::MakeCpuBackend();
  LinearWeight w;
  w.weight = ConvertTo(RandomTensor({300, 200}, rng), DType::kBF16);
  ASSERT_TRUE(be->PrepareLinear(w).ok());
  const int saved = ComputeThreads();
  for (int64_t m : {1, 5, 40}) {
    const Tensor x = RandomTensor({m, 200}, rng);
    Tensor y1 = Poisoned({m, 300}), y2 = Poisoned({m, 300});
    SetComputeThreads(1);
    ASSERT_TRUE(be->Linear(x, w, y1).ok());
    SetComputeThreads(2);
    ASSERT_TRUE(be->Linear(x, w, y2).ok());
    EXPECT_EQ(0, std::memcmp(y1.raw(), y2.raw(), y1.nbytes())) << "m=" << m;
  }
  SetComputeThreads(saved);
}

// Claimed chunks: every index once, chunks that start and end on the grain (but the last),
// long ones first, and more chunks than threads, so a thread that runs ahead takes more.
TEST(LinearTest, ParallelForClaimedCoversRangeOnceInGrainChunks) {
  const int saved = ComputeThreads();
  SetComputeThreads(2);
  for (const auto& [n, grain] : std::vector<std::pair<int64_t, int64_t>>{{1000, 7}, {5, 1}, {64, 64}, {130, 3}}) {
    std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
    std::mutex mu;
    std::vector<std::pair<int64_t, int64_t>> chunks;
    kernels::cpu::ParallelForClaimed(n, grain, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)]++;
      std::lock_guard<std::mutex> lock(mu);
      chunks.emplace_back(b, e);
    });
    for (auto& h : hits) EXPECT_EQ(h.load(), 1) << "n=" << n;
    std::sort(chunks.begin(), chunks.end());
    for (size_t i = 0; i < chunks.size(); ++i) {
      EXPECT_EQ(chunks[i].first % grain, 0) << "n=" << n;
      if (chunks[i].second == n) continue;
      EXPECT_EQ(chunks[i].second % grain, 0) << "n=" << n;
      if (i > 0) {
        EXPECT_LE(chunks[i].second - chunks[i].first, chunks[i - 1].second - chunks[i - 1].first) << "n=" << n;
      }
    }
    if (n == 1000) {
      EXPECT_GT(chunks.size(), 4u);
      EXPECT_EQ(chunks.front().second, 1000 / 4 / grain * grain) << "the first claim: a quarter with two threads";
    }
  }
  SetComputeThreads(saved);
}

// Decode GEMVs: the threads claim runs of panels as they finish (ParallelForClaimed), so
// which thread computes a column changes from call to call; a column's sums do not. 4,100
// outputs of K = 640 in bf16: 257 panels of 20 KiB, many claims, and a short last panel.
TEST(LinearTest, ClaimedGemvPanelsGiveOneThreadsBytes) {
  std::mt19937 rng(31);
  auto be = backend::MakeCpuBackend();
  const int64_t n = 4100, k = 640;
  LinearWeight w;
  w.weight = ConvertTo(RandomTensor({n, k}, rng), DType::kBF16);
  w.bias = RandomTensor({n}, rng);
  ASSERT_TRUE(be->PrepareLinear(w).ok());
  const int saved = ComputeThreads();
  for (int64_t m : {1, 3, 8}) {
    const Tensor x = RandomTensor({m, k}, rng);
    Tensor y1 = Poisoned({m, n});
    SetComputeThreads(1);
    ASSERT_TRUE(be->Linear(x, w, y1).ok());
    ExpectClose(y1, ReferenceLinear(x, w.weight, w.bias), 1e-4, "m=" + std::to_string(m));
    SetComputeThreads(2);
    for (int rep = 0; rep < 5; ++rep) {
      Tensor y2 = Poisoned({m, n});
      ASSERT_TRUE(be->Linear(x, w, y2).ok());
      EXPECT_EQ(0, std::memcmp(y1.raw(), y2.raw(), y1.nbytes())) << "m=" << m << " rep " << rep;
    }
  }
  SetComputeThreads(saved);
}

// The AVX-512 tile's K chunks (gemm.cc, kPairKChunk; here two of 550) depend on the weight
// alone: still the reference's values, and a row's bytes do not depend on which rows share its
// batch or on the thread count (513 panels: threads take whole pairs). The same holds for the
// AVX2 tile, whose shorter tiles for a batch's last rows sum in a full tile's order.
TEST(LinearTest, WideOutputsKeepTheirSumsInAnyBatch) {
  std::mt19937 rng(21);
  auto be = backend::MakeCpuBackend();
  const int64_t n = 8200, k = 1100;
  LinearWeight w;
  w.weight = RandomTensor({n, k}, rng);
  ASSERT_TRUE(be->PrepareLinear(w).ok());
  const kernels::cpu::PackedWeight* pw = kernels::cpu::AsPackedWeight(w.packed);
  ASSERT_NE(pw, nullptr);
  kernels::cpu::LinearConfig gemm;
  gemm.gemv_max_rows = 0;
  const Tensor x = RandomTensor({40, k}, rng);
  const Tensor x13 = x.Slice(0, 13).Clone();
  Tensor y = Poisoned({40, n}), y13 = Poisoned({13, n});
  ASSERT_TRUE(kernels::cpu::Linear(x, *pw, Tensor(), y, gemm).ok());
  ASSERT_TRUE(kernels::cpu::Linear(x13, *pw, Tensor(), y13, gemm).ok());
  ExpectClose(y13, ReferenceLinear(x13, w.weight, Tensor()), 1e-5, "13 rows");
  EXPECT_EQ(0, std::memcmp(y.raw(), y13.raw(), y13.nbytes())) << "13 rows alone and in a batch of 40";
  const int saved = ComputeThreads();
  SetComputeThreads(1);
  Tensor y1 = Poisoned({40, n});
  ASSERT_TRUE(kernels::cpu::Linear(x, *pw, Tensor(), y1, gemm).ok());
  SetComputeThreads(saved);
  EXPECT_EQ(0, std::memcmp(y.raw(), y1.raw(), y.nbytes())) << "one thread and all";
}

TEST(LinearTest, EmptyBatchIsOk) {
  std::mt19937 rng(11);
  auto be = backend::MakeCpuBackend();
  LinearWeight w;
  w.weight = RandomTensor({8, 12}, rng);
  Tensor x = Tensor::Empty({0, 12}, DType::kF32);
  Tensor y = Tensor::Empty({0, 8}, DType::kF32);
  EXPECT_TRUE(be->Linear(x, w, y).ok());
}

}  // namespace
}  // namespace ferry
