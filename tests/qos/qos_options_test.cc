#include "qos/qos_options.h"

#include <gtest/gtest.h>

namespace ferry::qos {
namespace {

TEST(QosOptionsTest, DefaultsAreValid) {
  QosOptions o;
  EXPECT_TRUE(o.Validate().ok());
  EXPECT_EQ(o.window_s, 10);
  EXPECT_EQ(o.min_dwell_s, 30);
  EXPECT_DOUBLE_EQ(o.downgrade_above, 0.85);
  EXPECT_DOUBLE_EQ(o.upgrade_below, 0.70);
}

TEST(QosOptionsTest, RejectsThresholdsWithoutHysteresisAndBadRanges) {
  struct Case {
    const char* name;
    void (*edit)(QosOptions&);
    const char* message;
  };
  const Case cases[] = {
      {"no band", [](QosOptions& o) { o.upgrade_below = 0.9; }, "upgrade_below"},
      {"equal", [](QosOptions& o) { o.upgrade_below = o.downgrade_above; }, "upgrade_below"},
      {"window", [](QosOptions& o) { o.window_s = 0; }, "window_s"},
      {"dwell", [](QosOptions& o) { o.min_dwell_s = -1; }, "min_dwell_s"},
      {"tick", [](QosOptions& o) { o.tick_ms = 1; }, "tick_ms"},
      {"signals", [](QosOptions& o) { o.signals.clear(); }, "signals"},
      {"error rate", [](QosOptions& o) { o.rollback.error_rate = 0; }, "rollback.error_rate"},
      {"agreement", [](QosOptions& o) { o.rollback.canary_min_agreement = 1.5; }, "canary_min_agreement"},
      {"slo", [](QosOptions& o) { o.slo.ttft_ms = -5; }, "slo.ttft_ms"},
      {"tier slo", [](QosOptions& o) { o.tiers["gold"].slo.tpot_ms = 0; }, "tiers.gold.slo.tpot_ms"},
      {"pace", [](QosOptions& o) { o.inactive_step = {InactivePacing::Mode::kFixed, 0}; }, "inactive_step_ms"},
      {"long pace", [](QosOptions& o) { o.inactive_step = {InactivePacing::Mode::kFixed, 60000}; }, "inactive_step_ms"},
  };
  for (const Case& c : cases) {
    QosOptions o;
    c.edit(o);
    const Status st = o.Validate();
    EXPECT_FALSE(st.ok()) << c.name;
    EXPECT_NE(st.message().find(c.message), std::string::npos) << c.name << ": " << st.message();
  }
}

TEST(QosOptionsTest, EffectiveSloFallsBackFieldByField) {
  SloTargets group;
  group.ttft_ms = 500;
  SloTargets tier;
  tier.tpot_ms = 40;
  ResolvedSlo r = EffectiveSlo(group, tier);
  EXPECT_EQ(r.ttft_ms, 500);
  EXPECT_EQ(r.tpot_ms, 40);
  EXPECT_EQ(r.queue_ms, 500);  // the TTFT target
  tier.ttft_ms = 200;
  group.queue_ms = 100;
  r = EffectiveSlo(group, tier);
  EXPECT_EQ(r.ttft_ms, 200);
  EXPECT_EQ(r.queue_ms, 100);
  r = EffectiveSlo({}, {});
  EXPECT_EQ(r.ttft_ms, kDefaultTtftMs);
  EXPECT_EQ(r.tpot_ms, kDefaultTpotMs);
}

TEST(QosOptionsTest, SignalNamesRoundTrip) {
  for (Signal s : {Signal::kQueueWait, Signal::kTtft, Signal::kTpot, Signal::kKvUsage, Signal::kWaiting,
                   Signal::kWaitingTokens, Signal::kUtilization}) {
    Result<Signal> back = ParseSignal(SignalName(s));
    ASSERT_TRUE(back.ok());
    EXPECT_EQ(*back, s);
  }
  EXPECT_FALSE(ParseSignal("latency").ok());
}

// The pacing of the variants not active: auto is 0.5 of the smallest TPOT target set in the
// config, lowered only where a rung's cost would project that past 3/4 of upgrade_below.
TEST(QosOptionsTest, InactiveStepAutoOffAndFixed) {
  QosOptions o;
  EXPECT_EQ(o.inactive_step.mode, InactivePacing::Mode::kAuto);
  EXPECT_DOUBLE_EQ(InactiveStepMs(o, {100, 40}, 1.0), 20.0);
  EXPECT_DOUBLE_EQ(InactiveStepMs(o, {40}, 1.6), 40 * 0.75 * 0.70 / 1.6);  // 0.5 * 1.6 = 0.8 > 0.75 * 0.70: lowered
  EXPECT_DOUBLE_EQ(InactiveStepMs(o, {40}, 0.5), 20.0);  // a cost below 1 projects nothing
  EXPECT_DOUBLE_EQ(InactiveStepMs(o, {40}, 2.5), 40 * 0.75 * 0.70 / 2.5);
  EXPECT_EQ(InactiveStepMs(o, {}, 1.0), 0.0);  // no TPOT target: off
  o.upgrade_below = 0.3;
  EXPECT_DOUBLE_EQ(InactiveStepMs(o, {100}, 1.0), 100 * 0.75 * 0.3);
  o.inactive_step = {InactivePacing::Mode::kOff, 0};
  EXPECT_EQ(InactiveStepMs(o, {40}, 1.0), 0.0);
  o.inactive_step = {InactivePacing::Mode::kFixed, 7.5};
  EXPECT_TRUE(o.Validate().ok());
  EXPECT_EQ(InactiveStepMs(o, {40}, 3.0), 7.5);
  EXPECT_EQ(InactiveStepMs(o, {}, 1.0), 7.5);
}

}  // namespace
}  // namespace ferry::qos
