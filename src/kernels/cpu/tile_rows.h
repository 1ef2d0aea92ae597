// From a run-time row count to a register tile's compile-time rows.
#pragma once

#include <type_traits>
#include <utility>

namespace ferry::kernels::cpu {

// Calls f(std::integral_constant<int, R>{}) with R = rows clamped to [kMin, kMax], for tile
// kernels templated on their row count (the last tile of a range is shorter).
template <int kMin, int kMax, typename F>
inline void WithTileRows(int rows, F&& f) {
  static_assert(kMin <= kMax);
  if constexpr (kMin == kMax) {
    f(std::integral_constant<int, kMin>{});
  } else if (rows <= kMin) {
    f(std::integral_constant<int, kMin>{});
  } else {
    WithTileRows<kMin + 1, kMax>(rows, std::forward<F>(f));
  }
}

}  // namespace ferry::kernels::cpu
