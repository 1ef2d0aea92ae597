// The QoS policy as pure functions: (options, state, the window's pressure and the
// variants' health, the time) → a named Decision with its reason and the next state; and
// the routing rule that keeps a tier at or above its floor. No clocks, no locks, no I/O:
// tests drive them with tables and a fake clock.
//
// The ladder is ordered most accurate first: index 0 is the top, "down" means a larger
// index (a faster, less accurate variant).
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

namespace ferry::qos {

using PolicyClock = std::chrono::steady_clock;

struct PolicyOptions {
  double downgrade_above = 0.85;
  double upgrade_below = 0.70;
  PolicyClock::duration min_dwell = std::chrono::seconds(30);
};

// What the controller remembers between decisions. Value type.
struct PolicyState {
  int active = 0;                                    // where new requests go (before tier floors)
  std::optional<int> pin;                            // an administrator's override
  std::optional<PolicyClock::time_point> last_switch;  // none before the first switch
};

struct PolicyInput {
  std::vector<bool> healthy;   // per variant, ladder order
  double pressure = 0;         // the window's pressure (max over the driving signals)
  std::string signal;          // the signal that gave it, for the reason
  // The rung above's cost relative to the active variant (its measured time for the same
  // work); an upward move is judged on pressure × max(1, upgrade_cost). 1: not projected.
  double upgrade_cost = 1.0;
};

enum class Action {
  kStay,      // nothing changes (held, when a move was wanted but not allowed)
  kDown,      // one rung down: the pressure exceeded downgrade_above
  kUp,        // one rung up: the (projected) pressure fell below upgrade_below
  kPin,       // to the pinned variant (an administrator's override; ignores the dwell time)
  kRollback,  // off an unhealthy variant to the nearest healthy one (ignores the dwell time)
};
const char* ActionName(Action action);  // "stay", "down", "up", "pin", "rollback"

struct Decision {
  Action action = Action::kStay;
  int from = 0;
  int to = 0;
  // Short, fixed: the metrics label ("pressure_high", "pressure_low", "pin", "rollback",
  // "pin_released" for a rollback off an unhealthy pinned variant; for kStay: "steady",
  // "dwell", "bottom", "top", "pinned", "no_healthy_variant").
  std::string code;
  std::string reason;  // for people: the numbers behind it
  bool held = false;   // kStay although the pressure asked for a move (dwell, end of the ladder)
  PolicyState next;
  bool switched() const { return from != to; }
};

Decision Decide(const PolicyOptions& options, const PolicyState& state, const PolicyInput& input,
                PolicyClock::time_point now);

// The nearest healthy variant to `from`, looking up (more accurate) first, then down, within
// [0, limit]; nullopt when none.
std::optional<int> NearestHealthy(int from, const std::vector<bool>& healthy, int limit);

// The variant a new request of a tier is admitted to: the active variant, but never below
// the tier's floor (`floor`: the lowest rung it may use, the ladder's last without one); an
// unhealthy choice moves to the nearest healthy variant at or above the floor. nullopt when
// no healthy variant is at or above the floor.
std::optional<int> RouteVariant(int active, int floor, const std::vector<bool>& healthy);

}  // namespace ferry::qos
