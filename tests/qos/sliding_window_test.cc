#include "qos/sliding_window.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <thread>
#include <vector>

namespace ferry::qos {
namespace {

using namespace std::chrono_literals;

// A fake clock far from the steady clock's epoch, as a real one would be.
const Clock::time_point kT0 = Clock::time_point(1000h);

TEST(WindowedStatsTest, SumsWhatIsInTheWindowAndForgetsTheRest) {
  WindowedStats w(10s, 10);  // 1 s slots
  w.Add(kT0, 1.0);
  w.Add(kT0 + 500ms, 3.0);
  w.Add(kT0 + 4s, 2.0);
  WindowedStats::Summary s = w.Read(kT0 + 5s);
  EXPECT_EQ(s.count, 3);
  EXPECT_DOUBLE_EQ(s.sum, 6.0);
  EXPECT_DOUBLE_EQ(s.max, 3.0);
  EXPECT_DOUBLE_EQ(s.mean(), 2.0);
  // The first slot (kT0 .. kT0 + 1 s) leaves the window once the clock is 10 slots on.
  s = w.Read(kT0 + 10s);
  EXPECT_EQ(s.count, 1);
  EXPECT_DOUBLE_EQ(s.sum, 2.0);
  EXPECT_EQ(w.Read(kT0 + 15s).count, 0);
}

TEST(WindowedStatsTest, ReusesASlotOnlyForANewSlice) {
  WindowedStats w(10s, 10);
  w.Add(kT0, 5.0);
  w.Add(kT0 + 10s, 7.0);  // same ring slot, next lap: the old sample is gone
  WindowedStats::Summary s = w.Read(kT0 + 10s);
  EXPECT_EQ(s.count, 1);
  EXPECT_DOUBLE_EQ(s.sum, 7.0);
  // A late sample for the lap that slot no longer holds is dropped, not mixed in.
  w.Add(kT0 + 100ms, 100.0);
  EXPECT_DOUBLE_EQ(w.Read(kT0 + 10s).sum, 7.0);
  w.Clear();
  EXPECT_EQ(w.Read(kT0 + 10s).count, 0);
}

TEST(WindowedQuantilesTest, BinsBracketTheirValues) {
  for (double v : {2e-5, 1e-4, 0.001, 0.0123, 0.5, 1.0, 7.5, 60.0, 3000.0}) {
    const int b = WindowedQuantiles::BinOf(v);
    const double mid = WindowedQuantiles::BinValue(b);
    EXPECT_LT(std::fabs(mid - v) / v, 0.045) << v;
  }
  EXPECT_EQ(WindowedQuantiles::BinOf(0.0), 0);
  EXPECT_EQ(WindowedQuantiles::BinOf(1e9), WindowedQuantiles::kBins - 1);
}

TEST(WindowedQuantilesTest, PercentilesMatchTheExactOnesWithinTheBinWidth) {
  WindowedQuantiles w(10s);
  std::mt19937 rng(7);
  std::lognormal_distribution<double> latency(std::log(0.05), 0.8);
  std::vector<double> values;
  for (int i = 0; i < 5000; ++i) {
    const double v = latency(rng);
    values.push_back(v);
    w.Add(kT0 + std::chrono::milliseconds(i), v);  // 5 s of samples
  }
  std::sort(values.begin(), values.end());
  auto exact = [&](double q) { return values[static_cast<size_t>(std::ceil(q * values.size())) - 1]; };
  const WindowedQuantiles::Summary s = w.Read(kT0 + 5s);
  EXPECT_EQ(s.count, 5000);
  EXPECT_NEAR(s.p50, exact(0.50), exact(0.50) * 0.05);
  EXPECT_NEAR(s.p95, exact(0.95), exact(0.95) * 0.05);
  EXPECT_NEAR(s.p99, exact(0.99), exact(0.99) * 0.05);
  EXPECT_DOUBLE_EQ(s.max, values.back());
}

TEST(WindowedQuantilesTest, OldSamplesLeaveTheWindow) {
  WindowedQuantiles w(2s, 4);
  for (int i = 0; i < 100; ++i) w.Add(kT0, 5.0);  // a slow burst
  for (int i = 0; i < 100; ++i) w.Add(kT0 + 2500ms, 0.01);
  const WindowedQuantiles::Summary s = w.Read(kT0 + 2500ms);
  EXPECT_EQ(s.count, 100);
  EXPECT_NEAR(s.p99, 0.01, 0.001);
  EXPECT_EQ(w.Read(kT0 + 10s).count, 0);
  w.Add(kT0 + 10s, -1.0);  // ignored
  w.Add(kT0 + 10s, std::nan(""));
  EXPECT_EQ(w.Read(kT0 + 10s).count, 0);
}

TEST(WindowedQuantilesTest, ConcurrentWritersLoseNothing) {
  WindowedQuantiles q(60s);
  WindowedStats s(60s);
  constexpr int kThreads = 8;
  constexpr int kEach = 20000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kEach; ++i) {
        const Clock::time_point now = kT0 + std::chrono::microseconds(i * 100);  // within 2 s
        q.Add(now, 0.001 * (t + 1));
        s.Add(now, 1.0);
        if (i % 1000 == 0) (void)q.Read(now);  // readers interleave
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(q.Read(kT0 + 3s).count, kThreads * kEach);
  EXPECT_DOUBLE_EQ(s.Read(kT0 + 3s).sum, kThreads * kEach);
}

}  // namespace
}  // namespace ferry::qos
