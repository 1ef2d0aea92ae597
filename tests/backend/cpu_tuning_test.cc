// The CPU backend's kernel tuning: the decode-kernel crossover is timed once per weight
// shape and format, recorded in the weight, and described for the manifest.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <memory>

#include "backend/cpu_backend.h"

namespace ferry::backend {
namespace {

LinearWeight Prepared(Backend& be, int64_t n, int64_t k, WeightFormat format) {
  LinearWeight w;
  w.weight = Tensor::Empty({n, k}, DType::kF32);
  for (int64_t i = 0; i < w.weight.numel(); ++i) w.weight.data<float>()[i] = static_cast<float>(i % 13) * 0.01f - 0.06f;
  w.format = format;
  EXPECT_TRUE(be.PrepareLinear(w).ok());
  return w;
}

TEST(CpuTuningTest, TimesEachShapeOnceAndRecordsTheCrossover) {
  std::unique_ptr<Backend> be = MakeCpuBackend();
  LinearWeight a = Prepared(*be, 48, 64, WeightFormat::kBF16);
  auto report = be->TuneLinear(a);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  ASSERT_FALSE(report->empty());
  const nlohmann::json j = nlohmann::json::parse(*report);
  EXPECT_EQ(j["format"], "bf16");
  EXPECT_EQ(j["n"], 48);
  EXPECT_EQ(j["k"], 64);
  EXPECT_EQ(j["m"], nlohmann::json({1, 2, 4, 8, 16, 32, 64}));
  ASSERT_EQ(j["small_m_us"].size(), 7u);
  ASSERT_EQ(j["gemm_us"].size(), 7u);
  for (size_t i = 0; i < 7; ++i) {
    EXPECT_GT(j["small_m_us"][i].get<double>(), 0.0);
    EXPECT_GT(j["gemm_us"][i].get<double>(), 0.0);
  }
  // The choice is the largest bucket where the decode kernel was at least as fast (-1: none).
  int expected = -1;
  for (size_t i = 0; i < 7; ++i) {
    if (j["small_m_us"][i].get<double>() <= j["gemm_us"][i].get<double>()) expected = j["m"][i].get<int>();
  }
  EXPECT_EQ(j["small_m_max"], expected);
  EXPECT_EQ(a.small_m_max, expected);

  // Same shape and format: no new timing, the same choice.
  LinearWeight b = Prepared(*be, 48, 64, WeightFormat::kBF16);
  auto again = be->TuneLinear(b);
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again->empty());
  EXPECT_EQ(b.small_m_max, expected);

  // Another format of the same shape is timed on its own.
  LinearWeight c = Prepared(*be, 48, 64, WeightFormat::kF32);
  auto other = be->TuneLinear(c);
  ASSERT_TRUE(other.ok());
  EXPECT_EQ(nlohmann::json::parse(*other)["format"], "fp32");
}

TEST(CpuTuningTest, TheChoiceChangesSpeedOnly) {
  std::unique_ptr<Backend> be = MakeCpuBackend();
  LinearWeight w = Prepared(*be, 32, 48, WeightFormat::kBF16);
  Tensor x = Tensor::Empty({5, 48}, DType::kF32);
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = static_cast<float>(i % 7) * 0.1f;
  Tensor before = Tensor::Empty({5, 32}, DType::kF32), after = Tensor::Empty({5, 32}, DType::kF32);
  ASSERT_TRUE(be->Linear(x, w, before).ok());
  ASSERT_TRUE(be->TuneLinear(w).ok());
  ASSERT_TRUE(be->Linear(x, w, after).ok());
  for (int64_t i = 0; i < before.numel(); ++i) {
    EXPECT_NEAR(before.data<float>()[i], after.data<float>()[i], 1e-4f) << i;
  }
}

TEST(CpuTuningTest, DescribesItsChoiceAndThreads) {
  std::unique_ptr<Backend> be = MakeCpuBackend();
  const nlohmann::json j = nlohmann::json::parse(be->DescribeTuning());
  EXPECT_NE(j["choice"].get<std::string>().find("small_m_max"), std::string::npos);
  EXPECT_GE(j["threads"].get<int>(), 1);
}

TEST(CpuTuningTest, AnUnpreparedWeightIsRefused) {
  std::unique_ptr<Backend> be = MakeCpuBackend();
  LinearWeight w;
  w.weight = Tensor::Zeros({16, 16}, DType::kF32);
  auto r = be->TuneLinear(w);
  EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace ferry::backend
