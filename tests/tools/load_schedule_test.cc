#include <gtest/gtest.h>

#include <cmath>

#include "tools/load_generator.h"

namespace ferry::tools {
namespace {

TEST(LoadScheduleTest, ParsesSchedulesTiersAndTierSlos) {
  Result<std::vector<RatePhase>> s = ParseRateSchedule("60:8,60:24,30:0,60:8.5");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  ASSERT_EQ(s->size(), 4u);
  EXPECT_EQ((*s)[1].duration_s, 60);
  EXPECT_EQ((*s)[1].rate, 24);
  EXPECT_EQ((*s)[2].rate, 0);
  EXPECT_EQ((*s)[3].rate, 8.5);
  for (const char* bad : {"", "60", "60:", "60:8,", "0:8", "60:-1", "a:8", "60:8:1"}) {
    EXPECT_FALSE(ParseRateSchedule(bad).ok()) << bad;
  }
  Result<LoadTier> t = ParseLoadTier("gold:0.2:sk-a:b");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->name, "gold");
  EXPECT_EQ(t->share, 0.2);
  EXPECT_EQ(t->api_key, "sk-a:b");  // keys may hold ':'
  t = ParseLoadTier("silver:3");
  ASSERT_TRUE(t.ok());
  EXPECT_TRUE(t->api_key.empty());
  for (const char* bad : {"gold", ":1", "gold:0", "gold:x:k"}) EXPECT_FALSE(ParseLoadTier(bad).ok()) << bad;
  std::vector<LoadTier> tiers = {*ParseLoadTier("gold:1"), *ParseLoadTier("silver:3")};
  ASSERT_TRUE(ApplyTierSlo(tiers, "gold:ttft=300,tpot=40").ok());
  EXPECT_EQ(tiers[0].slo.ttft_ms, 300);
  EXPECT_EQ(tiers[0].slo.tpot_ms, 40);
  EXPECT_FALSE(tiers[0].slo.e2e_ms.has_value());
  EXPECT_FALSE(ApplyTierSlo(tiers, "bronze:ttft=1").ok());
  EXPECT_FALSE(ApplyTierSlo(tiers, "gold:latency=1").ok());
  EXPECT_FALSE(ApplyTierSlo(tiers, "gold:ttft=-1").ok());
}

TEST(LoadScheduleTest, EachPhaseArrivesAtItsOwnRate) {
  const std::vector<RatePhase> schedule = {{100, 8}, {100, 24}, {100, 8}};
  std::vector<int> phases;
  const std::vector<double> offsets = ScheduleOffsets(schedule, 1.0, 11, &phases);
  ASSERT_EQ(offsets.size(), phases.size());
  int count[3] = {0, 0, 0};
  for (size_t i = 0; i < offsets.size(); ++i) {
    if (i > 0) {
      EXPECT_GE(offsets[i], offsets[i - 1]);
    }
    const int p = phases[i];
    ASSERT_GE(p, 0);
    ASSERT_LT(p, 3);
    EXPECT_GE(offsets[i], p * 100.0);
    EXPECT_LT(offsets[i], (p + 1) * 100.0);
    ++count[p];
  }
  // Poisson counts: mean rate x duration, standard deviation its square root (5 sigma).
  EXPECT_NEAR(count[0], 800, 5 * std::sqrt(800.0));
  EXPECT_NEAR(count[1], 2400, 5 * std::sqrt(2400.0));
  EXPECT_NEAR(count[2], 800, 5 * std::sqrt(800.0));
  EXPECT_EQ(ScheduleOffsets(schedule, 1.0, 11, nullptr), offsets);  // reproducible
  EXPECT_NE(ScheduleOffsets(schedule, 1.0, 12, nullptr), offsets);
  EXPECT_TRUE(ScheduleOffsets({{10, 0}}, 1.0, 1, nullptr).empty());
}

TEST(LoadScheduleTest, TiersAreDrawnByShare) {
  const std::vector<LoadTier> tiers = {{"gold", 1, "", {}}, {"silver", 3, "", {}}};
  const std::vector<int> t = AssignTiers(20000, tiers, 5);
  int gold = 0;
  for (int x : t) gold += x == 0;
  EXPECT_NEAR(gold, 5000, 5 * std::sqrt(20000 * 0.25 * 0.75));
  EXPECT_EQ(AssignTiers(20000, tiers, 5), t);
  EXPECT_EQ(AssignTiers(3, {}, 5), std::vector<int>(3, 0));
}

TEST(LoadScheduleTest, TierReportsJudgeEachTierAgainstItsOwnSlo) {
  LoadOptions o;
  o.rate_schedule = {{10, 1}, {10, 3}};
  o.tiers = {{"gold", 1, "", {}}, {"silver", 1, "", {}}};
  o.tiers[0].slo.ttft_ms = 100;
  o.slo.ttft_ms = 50;  // silver's
  std::vector<RequestRecord> records;
  auto add = [&](const char* tier, int phase, bool success, double ttft, const char* variant, int tokens) {
    RequestRecord r;
    r.index = static_cast<int>(records.size());
    r.tier = tier;
    r.phase = phase;
    r.success = success;
    r.ttft_ms = ttft;
    r.e2e_ms = ttft;
    r.variant = variant;
    r.output_tokens = tokens;
    records.push_back(r);
  };
  add("gold", 0, true, 80, "bf16", 10);    // good for gold (100), would miss silver's 50
  add("gold", 1, true, 120, "bf16", 10);   // misses
  add("gold", 1, false, 0, "", 0);         // failed: misses
  add("silver", 0, true, 40, "bf16", 30);  // good
  add("silver", 1, true, 40, "int8", 10);  // good
  add("silver", 1, true, 60, "int8", 20);  // misses
  const std::vector<TierReport> r = SummarizeTiers(o, records, 20);
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0].slo.ttft_ms, 100);
  EXPECT_EQ(r[0].summary.good_requests, 1);
  EXPECT_NEAR(r[0].slo_attainment, 1.0 / 3, 1e-12);
  EXPECT_EQ(r[0].phases[1].requests, 2);
  EXPECT_EQ(r[0].phases[1].good, 0);
  EXPECT_EQ(r[1].slo.ttft_ms, 50);
  EXPECT_EQ(r[1].summary.good_requests, 2);
  EXPECT_NEAR(r[1].phases[1].slo_attainment, 0.5, 1e-12);
  EXPECT_NEAR(r[1].phases[1].goodput, 0.1, 1e-12);
  EXPECT_EQ(r[1].variants.at("int8").requests, 2);
  EXPECT_NEAR(r[1].variants.at("int8").token_share, 0.5, 1e-12);
  EXPECT_NEAR(r[1].variants.at("bf16").token_share, 0.5, 1e-12);
  ASSERT_TRUE(r[1].summary.goodput.has_value());
  EXPECT_NEAR(*r[1].summary.goodput, 2.0 / 20, 1e-12);
}

}  // namespace
}  // namespace ferry::tools
