#include "kernels/int4_groups.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

namespace ferry::kernels {
namespace {

std::vector<float> Random(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = u(rng);
  return v;
}

TEST(Int4GroupsTest, DefaultGroupSizes) {
  EXPECT_EQ(DefaultInt4GroupSize(4096), 128);
  EXPECT_EQ(DefaultInt4GroupSize(96), 96);  // one group of the whole row
  EXPECT_EQ(DefaultInt4GroupSize(100), 0);  // no width the kernels take
  EXPECT_EQ(DefaultInt4GroupSize(0), 0);
}

// Round to nearest: every value within half a step of its group's grid, each group's extremes
// on it, and zero exactly representable.
TEST(Int4GroupsTest, QuantizeIsWithinHalfAStepAndDequantizeInverts) {
  const int64_t out = 6, in = 256, group = 128;
  std::vector<float> w = Random(out * in, 1);
  w[3] = 0.0f;
  auto g = QuantizeInt4(w.data(), out, in, group);
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  ASSERT_EQ(g->groups(), 2);
  std::vector<float> back(w.size());
  DequantizeInt4(*g, back.data());
  for (int64_t o = 0; o < out; ++o) {
    for (int64_t i = 0; i < in; ++i) {
      const float step = g->scales[static_cast<size_t>(o * 2 + i / group)];
      ASSERT_LE(std::fabs(back[o * in + i] - w[o * in + i]), 0.5f * step + 1e-6f) << o << " " << i;
      ASSERT_LE(g->q[static_cast<size_t>(o * in + i)], 15);
    }
  }
  EXPECT_EQ(back[3], 0.0f);
  // Values already on a grid come back exactly.
  auto again = QuantizeInt4(back.data(), out, in, group);
  ASSERT_TRUE(again.ok());
  std::vector<float> twice(w.size());
  DequantizeInt4(*again, twice.data());
  for (size_t i = 0; i < w.size(); ++i) ASSERT_NEAR(twice[i], back[i], 1e-6f) << i;
}

TEST(Int4GroupsTest, BadGroupSizesAreErrors) {
  std::vector<float> w(64, 1.0f);
  EXPECT_FALSE(QuantizeInt4(w.data(), 1, 64, 48).ok());
  EXPECT_FALSE(QuantizeInt4(w.data(), 1, 64, 0).ok());
  EXPECT_TRUE(QuantizeInt4(w.data(), 1, 64, 64).ok());
}

// Input column 8j + b of a row sits in bits 4b..4b+3 of word j.
TEST(Int4GroupsTest, PackPutsColumnsInNibbleOrder) {
  Int4Groups g;
  g.out = 2;
  g.in = 16;
  g.group_size = 16;
  g.q = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 15, 0, 0, 0, 0, 0, 0, 1, 2, 2, 2, 2, 2, 2, 2, 2};
  g.scales = {1.0f, 1.0f};
  g.zeros = {0, 0};
  const std::vector<uint32_t> p = PackInt4Rows(g);
  ASSERT_EQ(p.size(), 4u);
  EXPECT_EQ(p[0], 0x76543210u);
  EXPECT_EQ(p[1], 0xfedcba98u);
  EXPECT_EQ(p[2], 0x1000000fu);
  EXPECT_EQ(p[3], 0x22222222u);
}

TEST(Int4GroupsTest, ConcatStacksRowsAndRefusesMixedGroups) {
  std::vector<float> a = Random(2 * 64, 2), b = Random(3 * 64, 3);
  auto ga = QuantizeInt4(a.data(), 2, 64, 32);
  auto gb = QuantizeInt4(b.data(), 3, 64, 32);
  ASSERT_TRUE(ga.ok() && gb.ok());
  auto all = ConcatInt4Rows({*ga, *gb});
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->out, 5);
  std::vector<float> got(5 * 64), wa(2 * 64), wb(3 * 64);
  DequantizeInt4(*all, got.data());
  DequantizeInt4(*ga, wa.data());
  DequantizeInt4(*gb, wb.data());
  for (size_t i = 0; i < wa.size(); ++i) EXPECT_EQ(got[i], wa[i]);
  for (size_t i = 0; i < wb.size(); ++i) EXPECT_EQ(got[wa.size() + i], wb[i]);
  auto gc = QuantizeInt4(b.data(), 3, 64, 64);
  ASSERT_TRUE(gc.ok());
  EXPECT_FALSE(ConcatInt4Rows({*ga, *gc}).ok());
}

}  // namespace
}  // namespace ferry::kernels
