// Work distribution helpers on top of ferry::ParallelFor (the OpenMP runtime oneDNN uses).
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <string_view>

#include "core/thread_pool.h"

namespace ferry::kernels::cpu {

// Calls fn(i) for every i in [0, n), handing indices out one at a time so that items of
// uneven cost (causal attention tiles, ragged spans) balance across the compute threads.
// List expensive items first for the best balance.
inline void ParallelForDynamic(int64_t n, const std::function<void(int64_t)>& fn) {
  if (n <= 0) return;
  std::atomic<int64_t> next{0};
  const int64_t workers = std::min<int64_t>(n, ComputeThreads());
  ParallelFor(workers, 1, [&](int64_t, int64_t) {
    for (int64_t i = next.fetch_add(1, std::memory_order_relaxed); i < n;
         i = next.fetch_add(1, std::memory_order_relaxed)) {
      fn(i);
    }
  });
}

// Calls fn(begin, end) over [0, n) in contiguous chunks that the threads claim as they finish
// the last one: each claim takes about 1 / (2 * threads) of what is left (a multiple of
// `grain`, at least one grain), so the first chunks are long and the last short. For work
// bound by memory on cores whose speed varies (a shared machine, a neighbour on the other
// hyperthread), the thread that runs ahead takes more instead of waiting for the other at the
// end. Which thread runs a chunk is not fixed: fn must give the same bytes whichever does.
inline void ParallelForClaimed(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  const int64_t workers = std::min<int64_t>((n + grain - 1) / grain, ComputeThreads());
  if (workers <= 1) {
    fn(0, n);
    return;
  }
  std::atomic<int64_t> next{0};
  ParallelFor(workers, 1, [&](int64_t, int64_t) {
    int64_t begin = next.load(std::memory_order_relaxed);
    while (begin < n) {
      const int64_t size = std::max<int64_t>(grain, (n - begin) / (2 * workers) / grain * grain);
      const int64_t end = std::min(n, begin + size);
      if (!next.compare_exchange_weak(begin, end, std::memory_order_relaxed)) continue;  // begin reloaded
      fn(begin, end);
      begin = next.load(std::memory_order_relaxed);
    }
  });
}

// How the decode kernels (GEMV, int8 GEMV) share a weight's panels among the threads: claimed
// as they go (ParallelForClaimed), or equal contiguous shares up front (ParallelFor) with
// FERRY_DECODE_SPLIT=static, for measuring one against the other. An output column is one
// thread's sums in a fixed order either way, so the bytes do not depend on it.
inline void ParallelForDecodePanels(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  static const bool claimed = [] {
    const char* v = std::getenv("FERRY_DECODE_SPLIT");
    return v == nullptr || std::string_view(v) != "static";
  }();
  if (claimed) {
    ParallelForClaimed(n, grain, fn);
  } else {
    ParallelFor(n, grain, fn);
  }
}

// Splits `rows` rows of `cost_per_row` work units into ParallelFor ranges, running inline
// when the whole job is too small to be worth waking a second thread (~64K units).
inline void ParallelRows(int64_t rows, int64_t cost_per_row, const std::function<void(int64_t, int64_t)>& fn) {
  constexpr int64_t kMinUnitsPerThread = 1 << 16;
  const int64_t grain = std::max<int64_t>(1, kMinUnitsPerThread / std::max<int64_t>(cost_per_row, 1));
  ParallelFor(rows, grain, fn);
}

}  // namespace ferry::kernels::cpu
