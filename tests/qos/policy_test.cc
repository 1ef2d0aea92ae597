// The policy as tables of (state, input, time) → decision, and a property test over random
// input sequences: automatic moves never come faster than the dwell time, and the ladder
// never bounces back within it.
#include "qos/policy.h"

#include <gtest/gtest.h>

#include <random>

namespace ferry::qos {
namespace {

using namespace std::chrono_literals;
using TP = PolicyClock::time_point;

const TP kT0 = TP(1000h);

PolicyOptions Options() {
  PolicyOptions o;
  o.downgrade_above = 0.85;
  o.upgrade_below = 0.70;
  o.min_dwell = 30s;
  return o;
}

PolicyInput Input(double pressure, std::vector<bool> healthy = {true, true, true}, double upgrade_cost = 1.0) {
  PolicyInput in;
  in.healthy = std::move(healthy);
  in.pressure = pressure;
  in.signal = "ttft:gold";
  in.upgrade_cost = upgrade_cost;
  return in;
}

PolicyState State(int active, std::optional<TP> last_switch = std::nullopt, std::optional<int> pin = std::nullopt) {
  PolicyState s;
  s.active = active;
  s.last_switch = last_switch;
  s.pin = pin;
  return s;
}

struct Row {
  const char* name;
  PolicyState state;
  PolicyInput input;
  TP now;
  Action action;
  int to;
  const char* code;
  bool held;
};

TEST(PolicyTest, Table) {
  const Row rows[] = {
      // Hysteresis: inside the band nothing moves, whichever rung is active.
      {"band at the top", State(0), Input(0.80), kT0, Action::kStay, 0, "steady", false},
      {"band below", State(1), Input(0.75), kT0, Action::kStay, 1, "steady", false},
      {"exactly the upper threshold stays", State(0), Input(0.85), kT0, Action::kStay, 0, "steady", false},
      {"exactly the lower threshold stays", State(1), Input(0.70), kT0, Action::kStay, 1, "steady", false},
      // One rung per move, both ways.
      {"down one rung", State(0), Input(3.0), kT0, Action::kDown, 1, "pressure_high", false},
      {"down from the middle", State(1, kT0 - 31s), Input(0.9), kT0, Action::kDown, 2, "pressure_high", false},
      {"up one rung", State(2, kT0 - 31s), Input(0.1), kT0, Action::kUp, 1, "pressure_low", false},
      {"first move needs no dwell", State(0), Input(0.9), kT0, Action::kDown, 1, "pressure_high", false},
      // Dwell time: a move is held until min_dwell after the last switch.
      {"down held by dwell", State(1, kT0 - 29s), Input(2.0), kT0, Action::kStay, 1, "dwell", true},
      {"up held by dwell", State(1, kT0 - 10s), Input(0.0), kT0, Action::kStay, 1, "dwell", true},
      {"dwell just over", State(1, kT0 - 30s), Input(0.0), kT0, Action::kUp, 0, "pressure_low", false},
      // Ends of the ladder.
      {"bottom holds", State(2, kT0 - 60s), Input(5.0), kT0, Action::kStay, 2, "bottom", true},
      {"top stays", State(0, kT0 - 60s), Input(0.0), kT0, Action::kStay, 0, "top", false},
      // Unhealthy rungs are skipped; moving past them is still one move.
      {"down skips unhealthy", State(0), Input(0.9, {true, false, true}), kT0, Action::kDown, 2, "pressure_high", false},
      {"up skips unhealthy", State(2, kT0 - 60s), Input(0.1, {true, false, true}), kT0, Action::kUp, 0, "pressure_low",
       false},
      {"no healthy rung below", State(1), Input(0.9, {true, true, false}), kT0, Action::kStay, 1, "bottom", true},
      // Projection: the rung above costs twice as much, so 0.5 would become 1.0 up there.
      {"projected up held", State(1, kT0 - 60s), Input(0.5, {true, true, true}, 2.0), kT0, Action::kStay, 1, "steady",
       false},
      {"projected up allowed", State(1, kT0 - 60s), Input(0.3, {true, true, true}, 2.0), kT0, Action::kUp, 0,
       "pressure_low", false},
      {"a cheaper rung above is not trusted", State(1, kT0 - 60s), Input(0.75, {true, true, true}, 0.5), kT0,
       Action::kStay, 1, "steady", false},
      // Rollback: off an unhealthy active variant at once, up first, dwell or not.
      {"rollback up", State(1, kT0 - 1s), Input(0.1, {true, false, true}), kT0, Action::kRollback, 0, "rollback", false},
      {"rollback down when nothing above", State(0, kT0 - 1s), Input(5.0, {false, true, true}), kT0, Action::kRollback,
       1, "rollback", false},
      {"nothing healthy", State(1), Input(0.1, {false, false, false}), kT0, Action::kStay, 1, "no_healthy_variant",
       false},
      // Pin: wins over the pressure and the dwell time, not over health.
      {"pin moves at once", State(0, kT0 - 1s, 2), Input(0.0), kT0, Action::kPin, 2, "pin", false},
      {"pinned stays under pressure", State(2, kT0 - 60s, 2), Input(9.0), kT0, Action::kStay, 2, "pinned", false},
      {"pinned stays when idle", State(2, kT0 - 60s, 2), Input(0.0), kT0, Action::kStay, 2, "pinned", false},
      {"pin to an unhealthy variant is released", State(2, kT0, 2), Input(0.0, {true, true, false}), kT0,
       Action::kRollback, 1, "pin_released", false},
  };
  for (const Row& r : rows) {
    const Decision d = Decide(Options(), r.state, r.input, r.now);
    EXPECT_EQ(d.action, r.action) << r.name << ": " << ActionName(d.action) << " (" << d.reason << ")";
    EXPECT_EQ(d.to, r.to) << r.name;
    EXPECT_EQ(d.from, std::clamp(r.state.active, 0, 2)) << r.name;
    EXPECT_EQ(d.code, r.code) << r.name << ": " << d.reason;
    EXPECT_EQ(d.held, r.held) << r.name;
    EXPECT_EQ(d.next.active, r.to) << r.name;
    EXPECT_FALSE(d.reason.empty()) << r.name;
    if (d.switched()) {
      EXPECT_EQ(d.next.last_switch, r.now) << r.name;
    } else {
      EXPECT_EQ(d.next.last_switch, r.state.last_switch) << r.name;
    }
    if (d.code == "pin_released") {
      EXPECT_FALSE(d.next.pin.has_value()) << r.name;
    }
  }
}

TEST(PolicyTest, ReasonsCarryTheNumbers) {
  Decision d = Decide(Options(), State(0), Input(0.93), kT0);
  EXPECT_EQ(d.reason, "pressure 0.93 (ttft:gold) > downgrade_above 0.85");
  d = Decide(Options(), State(1, kT0 - 12s), Input(0.2), kT0);
  EXPECT_NE(d.reason.find("18.0 s left"), std::string::npos) << d.reason;
  d = Decide(Options(), State(1, kT0 - 60s), Input(0.3, {true, true, true}, 2.0), kT0);
  EXPECT_NE(d.reason.find("0.60 projected one rung up"), std::string::npos) << d.reason;
}

TEST(PolicyTest, RoutingKeepsEachTierAtOrAboveItsFloor) {
  const std::vector<bool> all = {true, true, true};
  EXPECT_EQ(RouteVariant(2, 0, all), 0);  // gold with floor 0 under load
  EXPECT_EQ(RouteVariant(2, 1, all), 1);
  EXPECT_EQ(RouteVariant(1, 2, all), 1);  // no floor: the active variant
  EXPECT_EQ(RouteVariant(0, 2, all), 0);
  // Unhealthy: nearest healthy at or above the floor, looking up first.
  EXPECT_EQ(RouteVariant(1, 2, {true, false, true}), 0);
  EXPECT_EQ(RouteVariant(0, 2, {false, true, true}), 1);
  EXPECT_EQ(RouteVariant(2, 1, {true, false, true}), 0);  // never below the floor, even to a healthy one
  EXPECT_EQ(RouteVariant(2, 0, {false, true, true}), std::nullopt);
  EXPECT_EQ(NearestHealthy(1, {}, 0), std::nullopt);
}

// Random pressures, health flips and pins, advanced by random ticks: every automatic move
// (down/up) comes at least min_dwell after the previous switch of any kind, and a variant
// left automatically is never returned to within min_dwell.
TEST(PolicyTest, PropertyNeverSwitchesFasterThanTheDwellTime) {
  const PolicyOptions o = Options();
  for (uint32_t seed = 1; seed <= 200; ++seed) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<double> pressure(0.0, 2.0);
    std::uniform_int_distribution<int> tick_ms(1, 4000);
    std::uniform_int_distribution<int> percent(0, 99);
    const int n = 2 + static_cast<int>(seed % 3);
    std::vector<bool> healthy(static_cast<size_t>(n), true);
    PolicyState state;
    TP now = kT0;
    std::optional<TP> last_switch;
    struct Switch {
      TP at;
      int from, to;
      Action action;
    };
    std::vector<Switch> switches;
    for (int step = 0; step < 2000; ++step) {
      now += std::chrono::milliseconds(tick_ms(rng));
      // Occasionally a variant's health flips (an error burst, an administrator's clear)
      // and, more rarely, a pin is set or released.
      if (percent(rng) < 2) {
        const int v = std::uniform_int_distribution<int>(0, n - 1)(rng);
        healthy[static_cast<size_t>(v)] = !healthy[static_cast<size_t>(v)];
      }
      if (percent(rng) == 0) {
        state.pin = percent(rng) < 50 ? std::optional<int>(std::uniform_int_distribution<int>(0, n - 1)(rng))
                                      : std::nullopt;
      }
      PolicyInput in;
      in.healthy = healthy;
      in.pressure = pressure(rng);
      in.upgrade_cost = 1.0 + percent(rng) / 100.0;
      const Decision d = Decide(o, state, in, now);
      ASSERT_GE(d.to, 0);
      ASSERT_LT(d.to, n);
      if (d.switched()) {
        ASSERT_EQ(d.next.last_switch, now);
        const bool automatic = d.action == Action::kDown || d.action == Action::kUp;
        if (automatic) {
          ASSERT_EQ(std::abs(d.to - d.from) >= 1, true);
          ASSERT_TRUE(in.healthy[static_cast<size_t>(d.to)]) << "seed " << seed;
          if (last_switch) {
            ASSERT_GE(now - *last_switch, o.min_dwell) << "seed " << seed << " step " << step;
          }
          // Between from and to every rung is unhealthy: one rung per move.
          for (int k = std::min(d.from, d.to) + 1; k < std::max(d.from, d.to); ++k) {
            ASSERT_FALSE(in.healthy[static_cast<size_t>(k)]) << "seed " << seed;
          }
          // No bounce: the variant just left automatically is not returned to within the dwell.
          if (!switches.empty()) {
            const Switch& prev = switches.back();
            if (prev.to == d.from && prev.from == d.to && (prev.action == Action::kDown || prev.action == Action::kUp)) {
              ASSERT_GE(now - prev.at, o.min_dwell) << "seed " << seed;
            }
          }
        } else {
          // Only health and pins move faster than the dwell time.
          ASSERT_TRUE(d.action == Action::kRollback || d.action == Action::kPin) << ActionName(d.action);
          if (d.action == Action::kRollback) {
            const int left = d.from;
            const bool pin_gone = state.pin && !d.next.pin;
            ASSERT_TRUE(!in.healthy[static_cast<size_t>(left)] || pin_gone) << "seed " << seed;
          }
        }
        switches.push_back(Switch{now, d.from, d.to, d.action});
        last_switch = now;
      }
      state = d.next;
    }
    EXPECT_GT(switches.size(), 0u) << "seed " << seed;
  }
}

}  // namespace
}  // namespace ferry::qos
