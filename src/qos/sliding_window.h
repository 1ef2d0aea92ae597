// Sliding windows of measurements: the last `window` of time split into a ring of slots,
// each slot the aggregate of the samples that fell into its slice of time. Recording is
// O(1) (one short critical section, no allocation); reading merges the live slots. A slot
// is reused when its slice has left the window, so the memory is fixed and the window
// covers between (slots - 1) / slots and all of `window`.
//
// Time is passed in (steady clock points), so tests drive the windows with a fake clock.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <limits>
#include <mutex>
#include <vector>

namespace ferry::qos {

using Clock = std::chrono::steady_clock;

// The epoch of a slot that holds nothing.
inline constexpr int64_t kEmptySlot = std::numeric_limits<int64_t>::min();

// Thread-safe. Count, sum and maximum of the samples in the window.
class WindowedStats {
 public:
  struct Summary {
    int64_t count = 0;
    double sum = 0;
    double max = 0;
    double mean() const { return count > 0 ? sum / static_cast<double>(count) : 0.0; }
  };

  explicit WindowedStats(Clock::duration window, int slots = 20);

  void Add(Clock::time_point now, double value);
  Summary Read(Clock::time_point now) const;
  void Clear();
  Clock::duration window() const { return window_; }

 private:
  struct Slot {
    int64_t epoch = kEmptySlot;
    Summary s;
  };
  int64_t Epoch(Clock::time_point t) const;

  const Clock::duration window_;
  const Clock::duration slot_width_;
  mutable std::mutex mu_;
  std::vector<Slot> slots_;  // GUARDED_BY(mu_)
};

// Thread-safe. Quantiles of non-negative values (latencies in seconds) over the window,
// from log-spaced bins: 8 per doubling from 10 µs to about 3 hours, so an estimate is
// within 4.5 % of a sample's true value (clamped to the window's maximum).
class WindowedQuantiles {
 public:
  static constexpr double kMinValue = 1e-5;
  static constexpr int kBinsPerDoubling = 8;
  static constexpr int kBins = 2 + 30 * kBinsPerDoubling;  // [0, kMinValue), log bins, overflow

  struct Summary {
    int64_t count = 0;
    double p50 = 0;
    double p95 = 0;
    double p99 = 0;
    double max = 0;
  };

  explicit WindowedQuantiles(Clock::duration window, int slots = 20);

  // NaN and negative values are ignored.
  void Add(Clock::time_point now, double value);
  Summary Read(Clock::time_point now) const;
  void Clear();

  // The bin of a value and the value a bin stands for (its geometric middle); public for tests.
  static int BinOf(double value);
  static double BinValue(int bin);

 private:
  struct Slot {
    int64_t epoch = kEmptySlot;
    int64_t count = 0;
    double max = 0;
    std::array<uint32_t, kBins> bins{};
  };
  int64_t Epoch(Clock::time_point t) const;

  const Clock::duration slot_width_;
  mutable std::mutex mu_;
  std::vector<Slot> slots_;  // GUARDED_BY(mu_)
};

}  // namespace ferry::qos
