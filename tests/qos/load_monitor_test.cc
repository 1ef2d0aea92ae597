#include "qos/load_monitor.h"

#include <gtest/gtest.h>

namespace ferry::qos {
namespace {

using namespace std::chrono_literals;

const Clock::time_point kT0 = Clock::time_point(1000h);

LoadMonitorOptions Options() {
  LoadMonitorOptions o;
  o.window = 10s;
  o.min_samples = 5;
  o.drive = {Signal::kQueueWait, Signal::kTtft, Signal::kTpot, Signal::kKvUsage};
  o.variants = {"bf16", "int8"};
  ResolvedSlo gold{200, 50, 100};
  ResolvedSlo silver{1000, 100, 1000};
  o.tiers = {{"gold", gold}, {"silver", silver}};
  o.waiting_capacity = 16;
  o.waiting_tokens_capacity = 512;
  return o;
}

const Pressure* Find(const Signals& s, const std::string& name) {
  for (const Pressure& p : s.pressures) {
    if (p.signal == name) return &p;
  }
  return nullptr;
}

TEST(LoadMonitorTest, LatencyPressuresAreP95OverTheTierTarget) {
  LoadMonitor m(Options());
  for (int i = 0; i < 20; ++i) {
    m.RecordTtft("gold", 0.150, kT0 + std::chrono::milliseconds(100 * i));  // 0.75 of 200 ms
    m.RecordTtft("silver", 0.150, kT0 + std::chrono::milliseconds(100 * i));
    m.RecordTpot("gold", 0.060, kT0);  // 1.2 of 50 ms
  }
  const Signals s = m.Snapshot(kT0 + 2s);
  const Pressure* ttft_gold = Find(s, "ttft:gold");
  ASSERT_NE(ttft_gold, nullptr);
  EXPECT_NEAR(ttft_gold->value, 0.75, 0.75 * 0.05);
  EXPECT_EQ(ttft_gold->samples, 20);
  EXPECT_TRUE(ttft_gold->drives);
  EXPECT_NEAR(Find(s, "ttft:silver")->value, 0.15, 0.01);
  EXPECT_NEAR(Find(s, "tpot:gold")->value, 1.2, 0.06);
  EXPECT_EQ(s.pressure_signal, "tpot:gold");
  EXPECT_NEAR(s.pressure, 1.2, 0.06);
  ASSERT_EQ(s.tiers.size(), 2u);
  EXPECT_EQ(s.tiers[0].ttft_s.count, 20);
}

TEST(LoadMonitorTest, TooFewSamplesDoNotDrive) {
  LoadMonitor m(Options());
  for (int i = 0; i < 4; ++i) m.RecordQueueWait("gold", 5.0, kT0);  // 50x the target, but 4 < min_samples
  Signals s = m.Snapshot(kT0);
  EXPECT_GT(Find(s, "queue_wait:gold")->value, 40);
  EXPECT_FALSE(Find(s, "queue_wait:gold")->drives);
  EXPECT_EQ(s.pressure, 0.0);
  m.RecordQueueWait("gold", 5.0, kT0);
  s = m.Snapshot(kT0);
  EXPECT_TRUE(Find(s, "queue_wait:gold")->drives);
  EXPECT_EQ(s.pressure_signal, "queue_wait:gold");
  // Gone with the window: the pressure falls back to nothing.
  EXPECT_EQ(m.Snapshot(kT0 + 11s).pressure, 0.0);
}

TEST(LoadMonitorTest, GaugesAndUtilization) {
  LoadMonitorOptions o = Options();
  o.drive = {Signal::kWaiting, Signal::kUtilization};
  LoadMonitor m(o);
  for (int i = 0; i < 10; ++i) {
    const Clock::time_point t = kT0 + std::chrono::milliseconds(500 * i);
    m.RecordLoad(0, 8, 16, 256, 0.5, t);
    m.RecordLoad(1, 4, 8, 0, 0.9, t);
    m.RecordBusy(0, 0.4, t);
    m.RecordBusy(1, 0.2, t);
  }
  const Signals s = m.Snapshot(kT0 + 5s);
  EXPECT_NEAR(Find(s, "kv_usage")->value, 0.9, 1e-9);  // the fullest cache
  EXPECT_FALSE(Find(s, "kv_usage")->drives);           // not in this drive list
  EXPECT_NEAR(Find(s, "waiting")->value, 24.0 / 16, 1e-9);
  EXPECT_NEAR(Find(s, "waiting_tokens")->value, 256.0 / 512, 1e-9);
  EXPECT_NEAR(Find(s, "utilization")->value, 6.0 / 10, 1e-9);
  EXPECT_EQ(s.pressure_signal, "waiting");
  ASSERT_EQ(s.variants.size(), 2u);
  EXPECT_NEAR(s.variants[0].running, 8, 1e-9);
  EXPECT_NEAR(s.variants[1].busy_s, 2.0, 1e-9);
}

TEST(LoadMonitorTest, ErrorRatesPerVariantAndUnknownNamesIgnored) {
  LoadMonitor m(Options());
  for (int i = 0; i < 10; ++i) m.RecordOutcome(1, i < 3, kT0);
  m.RecordOutcome(0, false, kT0);
  m.RecordOutcome(7, true, kT0);         // no such variant
  m.RecordTtft("platinum", 100.0, kT0);  // no such tier
  Signals s = m.Snapshot(kT0);
  EXPECT_EQ(s.variants[1].sequences, 10);
  EXPECT_EQ(s.variants[1].errors, 3);
  EXPECT_NEAR(s.variants[1].error_rate, 0.3, 1e-9);
  EXPECT_EQ(s.variants[0].errors, 0);
  EXPECT_EQ(s.pressure, 0.0);
  m.ClearOutcomes(1);
  s = m.Snapshot(kT0);
  EXPECT_EQ(s.variants[1].sequences, 0);
}

}  // namespace
}  // namespace ferry::qos
