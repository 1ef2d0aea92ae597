// The controller with a fake clock: measurements recorded into its monitor, ticks at chosen
// times, and what Route() answers for each tier.
#include "qos/controller.h"

#include <gtest/gtest.h>

namespace ferry::qos {
namespace {

using namespace std::chrono_literals;

const Clock::time_point kT0 = Clock::time_point(1000h);

class FakeClock {
 public:
  Now now() const { return Now{t_, 1'700'000'000'000 + std::chrono::duration_cast<std::chrono::milliseconds>(t_ - kT0).count()}; }
  void Advance(Clock::duration d) { t_ += d; }
  Clock::time_point steady() const { return t_; }

 private:
  Clock::time_point t_ = kT0;
};

ControllerOptions Options() {
  ControllerOptions o;
  o.model = "m";
  o.variants = {"bf16", "int8-wo", "int8"};
  o.qos.window_s = 5;
  o.qos.min_dwell_s = 20;
  o.qos.min_samples = 5;
  o.qos.rollback.error_rate = 0.2;
  o.qos.rollback.min_errors = 3;
  o.tiers = {{"gold", ResolvedSlo{200, 50, 200}}, {"silver", ResolvedSlo{500, 100, 500}}};
  o.floors = {{"gold", 0}};
  return o;
}

// `n` silver requests with this TTFT, spread over the last second.
void Load(Controller& c, const FakeClock& clock, double ttft_s, int n = 20) {
  for (int i = 0; i < n; ++i) {
    c.monitor().RecordTtft("silver", ttft_s, clock.steady() - std::chrono::milliseconds(i * 1000 / n));
  }
}

// Ticks every 250 ms for `d` with the given silver TTFT, and returns the switches made.
std::vector<DecisionRecord> Drive(Controller& c, FakeClock& clock, Clock::duration d, double ttft_s) {
  std::vector<DecisionRecord> switches;
  for (Clock::duration t{0}; t < d; t += 250ms) {
    clock.Advance(250ms);
    Load(c, clock, ttft_s, 5);
    for (DecisionRecord& r : c.Tick(clock.now())) {
      if (r.kind == "switch") switches.push_back(std::move(r));
    }
  }
  return switches;
}

TEST(ControllerTest, BurstMovesDownOneRungAtATimeAndBackUpAfterTheDwell) {
  Controller c(Options());
  FakeClock clock;
  EXPECT_EQ(c.active(), 0);
  // Overload: silver TTFT twice its target. First move at once, the next after the dwell.
  std::vector<DecisionRecord> s = Drive(c, clock, 10s, 1.0);
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].from, "bf16");
  EXPECT_EQ(s[0].to, "int8-wo");
  EXPECT_EQ(s[0].code, "pressure_high");
  EXPECT_EQ(s[0].signal, "ttft:silver");
  EXPECT_GT(s[0].pressure, 1.9);
  s = Drive(c, clock, 15s, 1.0);
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].to, "int8");
  EXPECT_EQ(c.active(), 2);
  // Relief: 0.05 s is 0.1 of the target; the old samples leave the 5 s window, then the
  // dwell (20 s from the last switch) allows one rung up, and 20 s later the next.
  s = Drive(c, clock, 60s, 0.05);
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[0].to, "int8-wo");
  EXPECT_EQ(s[1].to, "bf16");
  EXPECT_EQ(s[1].code, "pressure_low");
  EXPECT_EQ(c.active(), 0);
  // The log holds the switches and one hold per held episode, not one per tick.
  const nlohmann::json j = c.ToJson(clock.now());
  int switches = 0, holds = 0;
  for (const auto& d : j["decisions"]) {
    switches += d["kind"] == "switch";
    holds += d["kind"] == "hold";
  }
  EXPECT_EQ(switches, 4);
  EXPECT_GE(holds, 1);
  EXPECT_LE(holds, 4);
  EXPECT_EQ(j["switches"], 4);
  EXPECT_EQ(j["active"], "bf16");
}

TEST(ControllerTest, TierFloorsHoldUnderLoad) {
  Controller c(Options());
  FakeClock clock;
  Drive(c, clock, 30s, 2.0);
  EXPECT_EQ(c.active(), 2);
  EXPECT_EQ(c.Route("gold"), 0);    // floor bf16
  EXPECT_EQ(c.Route("silver"), 2);  // no floor
  EXPECT_EQ(c.Route("unknown-tier"), 2);
}

TEST(ControllerTest, EngineErrorsRollBackAndOnlyAnAdministratorClears) {
  Controller c(Options());
  FakeClock clock;
  Drive(c, clock, 1s, 2.0);
  ASSERT_EQ(c.active(), 1);
  // int8-wo fails 4 of 10 sequences: unhealthy, and the controller rolls back to bf16 at
  // once, dwell or not.
  for (int i = 0; i < 10; ++i) c.monitor().RecordOutcome(1, i < 4, clock.steady());
  clock.Advance(250ms);
  std::vector<DecisionRecord> r = c.Tick(clock.now());
  ASSERT_GE(r.size(), 2u);
  EXPECT_EQ(r[0].kind, "unhealthy");
  EXPECT_EQ(r[0].from, "int8-wo");
  EXPECT_EQ(r[1].kind, "switch");
  EXPECT_EQ(r[1].code, "rollback");
  EXPECT_EQ(r[1].to, "bf16");
  EXPECT_FALSE(c.healthy(1));
  // Still overloaded: after the dwell the next move down skips the unhealthy rung...
  std::vector<DecisionRecord> s = Drive(c, clock, 25s, 2.0);
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].to, "int8");
  // ...and the errors leaving the window do not make it healthy again.
  Drive(c, clock, 30s, 2.0);
  EXPECT_FALSE(c.healthy(1));
  EXPECT_EQ(c.Route("silver"), 2);
  // A pin to it is refused until it is cleared.
  EXPECT_EQ(c.Pin("int8-wo", clock.now()).status().code(), StatusCode::kFailedPrecondition);
  Result<std::vector<DecisionRecord>> cleared = c.Clear("int8-wo", clock.now());
  ASSERT_TRUE(cleared.ok());
  ASSERT_EQ(cleared->size(), 1u);
  EXPECT_EQ((*cleared)[0].kind, "cleared");
  EXPECT_TRUE(c.healthy(1));
  EXPECT_EQ(c.Clear("fp4", clock.now()).status().code(), StatusCode::kNotFound);
}

TEST(ControllerTest, PinOverridesAndAutoHandsBack) {
  Controller c(Options());
  FakeClock clock;
  Result<std::vector<DecisionRecord>> r = c.Pin("int8", clock.now());
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->size(), 2u);
  EXPECT_EQ((*r)[0].kind, "pin");
  EXPECT_EQ((*r)[1].kind, "switch");
  EXPECT_EQ((*r)[1].code, "pin");
  EXPECT_EQ(c.active(), 2);
  EXPECT_EQ(c.Route("gold"), 0);  // the floor still holds
  // Idle pressure does not move a pinned group.
  EXPECT_TRUE(Drive(c, clock, 60s, 0.01).empty());
  EXPECT_EQ(c.ToJson(clock.now())["pin"], "int8");
  ASSERT_TRUE(c.Pin("auto", clock.now()).ok());
  EXPECT_EQ(c.ToJson(clock.now())["pin"], "auto");
  // The last switch was 60 s ago: the controller may move up at once, one rung per dwell.
  std::vector<DecisionRecord> s = Drive(c, clock, 1s, 0.01);
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].to, "int8-wo");
  EXPECT_EQ(c.Pin("fp4", clock.now()).status().code(), StatusCode::kNotFound);
}

TEST(ControllerTest, MeasuredCostsProjectTheUpwardMove) {
  ControllerOptions o = Options();
  o.floors.clear();
  Controller c(o);
  c.SetCost(0, 3.0);
  c.SetCost(1, 1.0);  // bf16 is 3x the cost of int8-wo
  FakeClock clock;
  Drive(c, clock, 1s, 2.0);
  ASSERT_EQ(c.active(), 1);
  // 0.3 of the target on int8-wo would be 0.9 on bf16: above the upper threshold, no move.
  EXPECT_TRUE(Drive(c, clock, 60s, 0.15).empty());
  EXPECT_EQ(c.active(), 1);
  // 0.2 would be 0.6 there: move up.
  std::vector<DecisionRecord> s = Drive(c, clock, 10s, 0.1);
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].to, "bf16");
  const nlohmann::json j = c.ToJson(clock.now());
  EXPECT_DOUBLE_EQ(j["variants"][1]["relative_cost"].get<double>(), 1.0 / 3.0);
}

TEST(ControllerTest, LogKeepsTheLastHundredDecisions) {
  Controller c(Options());
  FakeClock clock;
  for (int i = 0; i < 130; ++i) (void)c.Note("canary", 1, "passed", "decision " + std::to_string(i), clock.now());
  const nlohmann::json j = c.ToJson(clock.now());
  ASSERT_EQ(j["decisions"].size(), Controller::kMaxDecisions);
  EXPECT_EQ(j["decisions"][0]["reason"], "decision 30");
  EXPECT_EQ(j["decisions"][99]["reason"], "decision 129");
  EXPECT_EQ(j["decisions"][99]["unix_ms"], 1'700'000'000'000);
}

TEST(ControllerTest, JsonShowsSignalsAndState) {
  Controller c(Options());
  FakeClock clock;
  Drive(c, clock, 2s, 0.1);
  const nlohmann::json j = c.ToJson(clock.now());
  EXPECT_EQ(j["model"], "m");
  ASSERT_EQ(j["variants"].size(), 3u);
  EXPECT_TRUE(j["variants"][0]["active"].get<bool>());
  EXPECT_EQ(j["floors"]["gold"], "bf16");
  EXPECT_GT(j["signals"]["tiers"][1]["ttft"]["count"].get<int>(), 5);
  bool found = false;
  for (const auto& p : j["signals"]["pressures"]) found = found || p["signal"] == "ttft:silver";
  EXPECT_TRUE(found);
  EXPECT_EQ(j["options"]["min_dwell_s"], 20.0);
}

}  // namespace
}  // namespace ferry::qos
