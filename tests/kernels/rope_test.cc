#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "backend/backend.h"
#include "kernel_test_util.h"

namespace ferry {
namespace {

using backend::MakeRopeTable;
using backend::RopeScalingParams;
using backend::RopeTable;
using testing::ExpectClose;
using testing::RandomTensor;
using testing::Values;

std::vector<double> ReferenceRope(const std::vector<double>& x, int64_t tokens, int heads, int head_dim,
                                  const std::vector<int32_t>& pos, const RopeTable& table) {
  std::vector<double> out = x;
  const int half = static_cast<int>(table.inv_freq.size());
  for (int64_t t = 0; t < tokens; ++t) {
    for (int h = 0; h < heads; ++h) {
      const int64_t base = (t * heads + h) * head_dim;
      for (int i = 0; i < half; ++i) {
        const double angle = pos[t] * static_cast<double>(table.inv_freq[i]);
        const double a = x[base + i], b = x[base + i + half];
        out[base + i] = a * std::cos(angle) - b * std::sin(angle);
        out[base + i + half] = b * std::cos(angle) + a * std::sin(angle);
      }
    }
  }
  return out;
}

TEST(RopeTest, MatchesReferenceForAllTables) {
  std::mt19937 rng(31);
  auto be = backend::MakeCpuBackend();
  RopeScalingParams none, linear, llama3;
  linear.type = RopeScalingParams::Type::kLinear;
  linear.factor = 4.0f;
  llama3.type = RopeScalingParams::Type::kLlama3;
  llama3.factor = 32.0f;
  for (int head_dim : {64, 10, 128}) {
    for (const RopeScalingParams& scaling : {none, linear, llama3}) {
      SCOPED_TRACE("head_dim=" + std::to_string(head_dim));
      const RopeTable table = MakeRopeTable(head_dim, 500000.0f, scaling);
      const int64_t tokens = 19;
      const int heads = 4, kv_heads = 2;
      std::vector<int32_t> pos(tokens);
      std::uniform_int_distribution<int32_t> pd(0, 130000);
      for (auto& p : pos) p = pd(rng);
      pos[0] = 0;
      Tensor q = RandomTensor({tokens, heads * head_dim}, rng);
      Tensor k = RandomTensor({tokens, kv_heads * head_dim}, rng);
      const auto q_ref = ReferenceRope(Values(q), tokens, heads, head_dim, pos, table);
      const auto k_ref = ReferenceRope(Values(k), tokens, kv_heads, head_dim, pos, table);
      ASSERT_TRUE(be->Rope(q, k, heads, kv_heads, backend::HostIndices(pos), table).ok());
      ExpectClose(q, q_ref, 1e-6, "q");
      ExpectClose(k, k_ref, 1e-6, "k");
    }
  }
}

TEST(RopeTest, Llama3TableMatchesHandComputedValues) {
  // Llama 3.2 1B: head_dim 64, theta 500000, factor 32, low 1, high 4, original 8192.
  // Wavelength bands: < 2048 kept, > 8192 divided by 32, between interpolated.
  RopeScalingParams p;
  p.type = RopeScalingParams::Type::kLlama3;
  p.factor = 32.0f;
  p.low_freq_factor = 1.0f;
  p.high_freq_factor = 4.0f;
  p.original_max_position = 8192;
  const RopeTable t = MakeRopeTable(64, 500000.0f, p);
  ASSERT_EQ(t.head_dim, 64);
  ASSERT_EQ(t.inv_freq.size(), 32u);
  // i = 0: 500000^0 = 1, wavelength 2π: kept.
  EXPECT_FLOAT_EQ(t.inv_freq[0], 1.0f);
  // i = 10: 500000^(-20/64) = 0.0165604, wavelength 379: kept.
  EXPECT_NEAR(t.inv_freq[10], 0.016560440080994446, 1e-9);
  // i = 16: 500000^(-1/2) = 1.41421e-3, wavelength 4442.9: smooth = (8192/4442.9 - 1)/3
  // = 0.281283, (1 - smooth) * inv / 32 + smooth * inv = 4.2955680e-4.
  EXPECT_NEAR(t.inv_freq[16], 4.2955679655936815e-4, 1e-10);
  // i = 20: 500000^(-40/64) = 2.74248e-4, wavelength 22911 > 8192: divided by 32.
  EXPECT_NEAR(t.inv_freq[20], 8.570255489881478e-06, 1e-12);
  EXPECT_NEAR(t.inv_freq[31], 9.418306725434909e-08, 1e-14);

  RopeScalingParams lin;
  lin.type = RopeScalingParams::Type::kLinear;
  lin.factor = 2.0f;
  const RopeTable tl = MakeRopeTable(8, 10000.0f, lin);
  EXPECT_FLOAT_EQ(tl.inv_freq[0], 0.5f);
  EXPECT_FLOAT_EQ(tl.inv_freq[1], 0.05f);  // 10000^(-2/8) / 2
}

// longrope: the short set for plain positions, the long set for flagged ones, each
// 1 / (factor_i * theta^(2i/d)).
TEST(RopeTest, LongRopeTakesTheFlaggedSet) {
  std::mt19937 rng(33);
  auto be = backend::MakeCpuBackend();
  RopeScalingParams lr;
  lr.type = RopeScalingParams::Type::kLongRope;
  lr.short_factor = {1.0f, 1.1f, 1.3f, 2.0f};
  lr.long_factor = {1.0f, 2.0f, 4.0f, 8.0f};
  const int head_dim = 8, half = 4;
  const RopeTable table = MakeRopeTable(head_dim, 10000.0f, lr);
  ASSERT_TRUE(table.long_factors);
  ASSERT_EQ(table.inv_freq.size(), 8u);
  for (int i = 0; i < half; ++i) {
    const double base = std::pow(10000.0, 2.0 * i / head_dim);
    EXPECT_FLOAT_EQ(table.inv_freq[i], static_cast<float>(1.0 / (lr.short_factor[i] * base)));
    EXPECT_FLOAT_EQ(table.inv_freq[half + i], static_cast<float>(1.0 / (lr.long_factor[i] * base)));
  }
  RopeTable short_only, long_only;
  short_only.head_dim = long_only.head_dim = head_dim;
  short_only.inv_freq.assign(table.inv_freq.begin(), table.inv_freq.begin() + half);
  long_only.inv_freq.assign(table.inv_freq.begin() + half, table.inv_freq.end());
  const std::vector<int32_t> pos = {0, 5, 47, 48, 63, 1000};
  std::vector<int32_t> flagged = pos;
  for (size_t i = 3; i < flagged.size(); ++i) flagged[i] |= kernels::kRopeLongPosition;
  const int64_t tokens = static_cast<int64_t>(pos.size());
  Tensor q = RandomTensor({tokens, 2 * head_dim}, rng);
  Tensor k;
  const std::vector<double> x = Values(q);
  const auto ref_short = ReferenceRope(x, tokens, 2, head_dim, pos, short_only);
  const auto ref_long = ReferenceRope(x, tokens, 2, head_dim, pos, long_only);
  std::vector<double> ref(ref_short.begin(), ref_short.begin() + 3 * 2 * head_dim);
  ref.insert(ref.end(), ref_long.begin() + 3 * 2 * head_dim, ref_long.end());
  ASSERT_TRUE(be->Rope(q, k, 2, 0, backend::HostIndices(flagged), table).ok());
  ExpectClose(q, ref, 1e-6, "longrope");
}

TEST(RopeTest, QOnlyAndErrors) {
  std::mt19937 rng(32);
  auto be = backend::MakeCpuBackend();
  const RopeTable table = MakeRopeTable(16, 10000.0f, RopeScalingParams());
  std::vector<int32_t> pos = {3, 7};
  Tensor q = RandomTensor({2, 32}, rng);
  const auto ref = ReferenceRope(Values(q), 2, 2, 16, pos, table);
  Tensor no_k;
  ASSERT_TRUE(be->Rope(q, no_k, 2, 0, backend::HostIndices(pos), table).ok());
  ExpectClose(q, ref, 1e-6, "q only");

  Tensor k_bad = RandomTensor({2, 20}, rng);
  EXPECT_FALSE(be->Rope(q, k_bad, 2, 1, backend::HostIndices(pos), table).ok());
  Tensor q_odd = RandomTensor({2, 30}, rng);
  EXPECT_FALSE(be->Rope(q_odd, no_k, 2, 0, backend::HostIndices(pos), table).ok()) << "head_dim 15 != table 16";
  Tensor q3 = RandomTensor({2, 33}, rng);
  EXPECT_FALSE(be->Rope(q3, no_k, 2, 0, backend::HostIndices(pos), table).ok()) << "width not divisible";
  EXPECT_FALSE(be->Rope(q, no_k, 2, 0, Tensor(), table).ok()) << "no positions";
}

}  // namespace
}  // namespace ferry
