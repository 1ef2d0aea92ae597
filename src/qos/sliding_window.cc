#include "qos/sliding_window.h"

#include <algorithm>
#include <cmath>

namespace ferry::qos {

namespace {

Clock::duration SlotWidth(Clock::duration window, int slots) {
  const Clock::duration w = window / std::max(1, slots);
  return std::max(w, Clock::duration(1));
}

int64_t EpochOf(Clock::time_point t, Clock::duration slot_width) {
  const auto ticks = t.time_since_epoch().count();
  const auto width = slot_width.count();
  // Floor division, so time points before the clock's epoch (fake clocks) still order.
  return ticks >= 0 ? ticks / width : -((-ticks + width - 1) / width);
}

// Whether a slot stamped `slot_epoch` lies in the window ending in slot `now_epoch`.
bool Live(int64_t slot_epoch, int64_t now_epoch, size_t slots) {
  return slot_epoch != kEmptySlot && slot_epoch <= now_epoch && now_epoch - slot_epoch < static_cast<int64_t>(slots);
}

size_t Index(int64_t epoch, size_t slots) {
  const int64_t n = static_cast<int64_t>(slots);
  return static_cast<size_t>(((epoch % n) + n) % n);
}

}  // namespace

// ---- WindowedStats -----------------------------------------------------------------------

WindowedStats::WindowedStats(Clock::duration window, int slots)
    : window_(window), slot_width_(SlotWidth(window, slots)), slots_(static_cast<size_t>(std::max(1, slots))) {}

int64_t WindowedStats::Epoch(Clock::time_point t) const { return EpochOf(t, slot_width_); }

void WindowedStats::Add(Clock::time_point now, double value) {
  if (std::isnan(value)) return;
  const int64_t e = Epoch(now);
  std::lock_guard<std::mutex> lock(mu_);
  Slot& slot = slots_[Index(e, slots_.size())];
  if (slot.epoch != e) {
    if (slot.epoch != kEmptySlot && slot.epoch > e) return;  // a sample older than the slot's current slice: out of the window
    slot = Slot{e, {}};
  }
  slot.s.max = slot.s.count == 0 ? value : std::max(slot.s.max, value);
  slot.s.count += 1;
  slot.s.sum += value;
}

WindowedStats::Summary WindowedStats::Read(Clock::time_point now) const {
  const int64_t e = Epoch(now);
  Summary out;
  std::lock_guard<std::mutex> lock(mu_);
  for (const Slot& slot : slots_) {
    if (!Live(slot.epoch, e, slots_.size()) || slot.s.count == 0) continue;
    out.max = out.count == 0 ? slot.s.max : std::max(out.max, slot.s.max);
    out.count += slot.s.count;
    out.sum += slot.s.sum;
  }
  return out;
}

void WindowedStats::Clear() {
  std::lock_guard<std::mutex> lock(mu_);
  for (Slot& slot : slots_) slot = Slot{};
}

// ---- WindowedQuantiles -------------------------------------------------------------------

WindowedQuantiles::WindowedQuantiles(Clock::duration window, int slots)
    : slot_width_(SlotWidth(window, slots)), slots_(static_cast<size_t>(std::max(1, slots))) {}

int64_t WindowedQuantiles::Epoch(Clock::time_point t) const { return EpochOf(t, slot_width_); }

int WindowedQuantiles::BinOf(double value) {
  if (!(value >= kMinValue)) return 0;
  const int b = 1 + static_cast<int>(std::floor(std::log2(value / kMinValue) * kBinsPerDoubling));
  return std::min(b, kBins - 1);
}

double WindowedQuantiles::BinValue(int bin) {
  if (bin <= 0) return kMinValue / 2;
  // Bin b covers [min * 2^((b-1)/k), min * 2^(b/k)); its geometric middle.
  return kMinValue * std::exp2((static_cast<double>(bin) - 0.5) / kBinsPerDoubling);
}

void WindowedQuantiles::Add(Clock::time_point now, double value) {
  if (!(value >= 0)) return;
  const int64_t e = Epoch(now);
  const int bin = BinOf(value);
  std::lock_guard<std::mutex> lock(mu_);
  Slot& slot = slots_[Index(e, slots_.size())];
  if (slot.epoch != e) {
    if (slot.epoch != kEmptySlot && slot.epoch > e) return;
    slot.epoch = e;
    slot.count = 0;
    slot.max = 0;
    slot.bins.fill(0);
  }
  slot.bins[static_cast<size_t>(bin)] += 1;
  slot.count += 1;
  slot.max = std::max(slot.max, value);
}

WindowedQuantiles::Summary WindowedQuantiles::Read(Clock::time_point now) const {
  const int64_t e = Epoch(now);
  std::array<uint64_t, kBins> merged{};
  Summary out;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const Slot& slot : slots_) {
      if (!Live(slot.epoch, e, slots_.size()) || slot.count == 0) continue;
      for (int b = 0; b < kBins; ++b) merged[static_cast<size_t>(b)] += slot.bins[static_cast<size_t>(b)];
      out.count += slot.count;
      out.max = std::max(out.max, slot.max);
    }
  }
  if (out.count == 0) return out;
  // The smallest bin whose cumulative count reaches rank ceil(q * count) (nearest rank).
  auto quantile = [&](double q) {
    const uint64_t rank = std::max<uint64_t>(1, static_cast<uint64_t>(std::ceil(q * static_cast<double>(out.count))));
    uint64_t seen = 0;
    for (int b = 0; b < kBins; ++b) {
      seen += merged[static_cast<size_t>(b)];
      if (seen >= rank) return std::min(BinValue(b), out.max);
    }
    return out.max;
  };
  out.p50 = quantile(0.50);
  out.p95 = quantile(0.95);
  out.p99 = quantile(0.99);
  return out;
}

void WindowedQuantiles::Clear() {
  std::lock_guard<std::mutex> lock(mu_);
  for (Slot& slot : slots_) {
    slot.epoch = kEmptySlot;
    slot.count = 0;
    slot.max = 0;
    slot.bins.fill(0);
  }
}

}  // namespace ferry::qos
