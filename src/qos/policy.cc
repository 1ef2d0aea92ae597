#include "qos/policy.h"

#include <algorithm>
#include <cstdio>

namespace ferry::qos {

namespace {

std::string Fixed(double v, int digits = 2) {
  char buf[48];
  std::snprintf(buf, sizeof(buf), "%.*f", digits, v);
  return buf;
}

std::string PressureText(const PolicyInput& in) {
  return "pressure " + Fixed(in.pressure) + (in.signal.empty() ? "" : " (" + in.signal + ")");
}

Decision Stay(const PolicyState& state, std::string code, std::string reason, bool held = false) {
  Decision d;
  d.action = Action::kStay;
  d.from = d.to = state.active;
  d.code = std::move(code);
  d.reason = std::move(reason);
  d.held = held;
  d.next = state;
  return d;
}

Decision Move(const PolicyState& state, Action action, int to, std::string code, std::string reason,
              PolicyClock::time_point now) {
  Decision d;
  d.action = action;
  d.from = state.active;
  d.to = to;
  d.code = std::move(code);
  d.reason = std::move(reason);
  d.next = state;
  d.next.active = to;
  d.next.last_switch = now;
  return d;
}

bool Healthy(const std::vector<bool>& healthy, int i) {
  return i >= 0 && i < static_cast<int>(healthy.size()) && healthy[static_cast<size_t>(i)];
}

}  // namespace

const char* ActionName(Action action) {
  switch (action) {
    case Action::kStay: return "stay";
    case Action::kDown: return "down";
    case Action::kUp: return "up";
    case Action::kPin: return "pin";
    case Action::kRollback: return "rollback";
  }
  return "unknown";
}

std::optional<int> NearestHealthy(int from, const std::vector<bool>& healthy, int limit) {
  limit = std::min(limit, static_cast<int>(healthy.size()) - 1);
  from = std::clamp(from, 0, std::max(0, limit));
  if (Healthy(healthy, from) && from <= limit) return from;
  for (int i = from - 1; i >= 0; --i) {
    if (Healthy(healthy, i)) return i;
  }
  for (int i = from + 1; i <= limit; ++i) {
    if (Healthy(healthy, i)) return i;
  }
  return std::nullopt;
}

std::optional<int> RouteVariant(int active, int floor, const std::vector<bool>& healthy) {
  return NearestHealthy(std::min(active, floor), healthy, floor);
}

Decision Decide(const PolicyOptions& o, const PolicyState& state, const PolicyInput& in, PolicyClock::time_point now) {
  const int n = static_cast<int>(in.healthy.size());
  const int last = n - 1;
  PolicyState s = state;
  s.active = std::clamp(s.active, 0, std::max(0, last));
  if (s.pin && (*s.pin < 0 || *s.pin > last)) s.pin.reset();

  // 1. An administrator's pin wins over the pressure, but not over health.
  if (s.pin) {
    const int pin = *s.pin;
    if (!Healthy(in.healthy, pin)) {
      PolicyState released = s;
      released.pin.reset();
      const std::optional<int> to = NearestHealthy(pin, in.healthy, last);
      if (!to) return Stay(released, "no_healthy_variant", "the pinned variant is unhealthy and no variant is healthy");
      if (*to == s.active) {
        return Stay(released, "pin_released", "the pinned variant is unhealthy; the pin is released");
      }
      return Move(released, Action::kRollback, *to, "pin_released",
                  "the pinned variant is unhealthy; the pin is released", now);
    }
    if (pin != s.active) return Move(s, Action::kPin, pin, "pin", "pinned by an administrator", now);
    return Stay(s, "pinned", "pinned by an administrator");
  }

  // 2. Leave an unhealthy variant at once, whatever the dwell time says.
  if (!Healthy(in.healthy, s.active)) {
    const std::optional<int> to = NearestHealthy(s.active, in.healthy, last);
    if (!to) return Stay(s, "no_healthy_variant", "the active variant is unhealthy and no variant is healthy");
    return Move(s, Action::kRollback, *to, "rollback", "the active variant is unhealthy", now);
  }

  // 3. What the pressure asks for.
  const double projected = in.pressure * std::max(1.0, in.upgrade_cost);
  Action want = Action::kStay;
  if (in.pressure > o.downgrade_above) {
    want = Action::kDown;
  } else if (projected < o.upgrade_below) {
    want = Action::kUp;
  }
  if (want == Action::kStay) {
    return Stay(s, "steady",
                PressureText(in) + " within [" + Fixed(o.upgrade_below) + ", " + Fixed(o.downgrade_above) + "]" +
                    (projected != in.pressure ? ", " + Fixed(projected) + " projected one rung up" : ""));
  }
  std::optional<int> to;
  if (want == Action::kDown) {
    for (int i = s.active + 1; i <= last && !to; ++i) {
      if (Healthy(in.healthy, i)) to = i;
    }
  } else {
    for (int i = s.active - 1; i >= 0 && !to; --i) {
      if (Healthy(in.healthy, i)) to = i;
    }
  }
  const std::string why =
      want == Action::kDown
          ? PressureText(in) + " > downgrade_above " + Fixed(o.downgrade_above)
          : PressureText(in) + (projected != in.pressure ? " (" + Fixed(projected) + " projected one rung up)" : "") +
                " < upgrade_below " + Fixed(o.upgrade_below);
  if (!to) {
    if (want == Action::kDown) return Stay(s, "bottom", why + "; no healthy variant below", /*held=*/true);
    return Stay(s, "top", why + "; already at the top healthy variant", /*held=*/false);
  }
  if (s.last_switch && now - *s.last_switch < o.min_dwell) {
    const double left = std::chrono::duration<double>(o.min_dwell - (now - *s.last_switch)).count();
    return Stay(s, "dwell", why + "; held by min_dwell_s (" + Fixed(left, 1) + " s left)", /*held=*/true);
  }
  if (want == Action::kDown) return Move(s, Action::kDown, *to, "pressure_high", why, now);
  return Move(s, Action::kUp, *to, "pressure_low", why, now);
}

}  // namespace ferry::qos
