// Work distribution helpers on top of ferry::ParallelFor (the OpenMP runtime oneDNN uses).
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <functional>

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

// Splits `rows` rows of `cost_per_row` work units into ParallelFor ranges, running inline
// when the whole job is too small to be worth waking a second thread (~64K units).
inline void ParallelRows(int64_t rows, int64_t cost_per_row, const std::function<void(int64_t, int64_t)>& fn) {
  constexpr int64_t kMinUnitsPerThread = 1 << 16;
  const int64_t grain = std::max<int64_t>(1, kMinUnitsPerThread / std::max<int64_t>(cost_per_row, 1));
  ParallelFor(rows, grain, fn);
}

}  // namespace ferry::kernels::cpu
