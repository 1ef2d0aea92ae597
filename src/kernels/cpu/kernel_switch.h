// A CPU kernel variant chosen at start-up: the faster one where the CPU has the instructions
// it needs, unless an environment variable names the baseline; tests and benchmarks switch it
// later to compare the two in one process.
#pragma once

#include <atomic>
#include <cstdlib>
#include <string_view>

namespace ferry::kernels::cpu {

template <typename Kernel>
class KernelSwitch {
 public:
  // `env` = `baseline_name` at start-up forces `baseline`; otherwise `fast` when has_fast().
  KernelSwitch(Kernel baseline, Kernel fast, bool (*has_fast)(), const char* env, std::string_view baseline_name)
      : baseline_(baseline), has_fast_(has_fast) {
    const char* forced = std::getenv(env);
    const bool force_baseline = forced != nullptr && std::string_view(forced) == baseline_name;
    active_.store(!force_baseline && has_fast_() ? fast : baseline, std::memory_order_relaxed);
  }
  bool Supported(Kernel kernel) const { return kernel == baseline_ || has_fast_(); }
  Kernel Active() const { return active_.load(std::memory_order_relaxed); }
  // False (and no switch) when this CPU cannot run `kernel`.
  bool Set(Kernel kernel) {
    if (!Supported(kernel)) return false;
    active_.store(kernel, std::memory_order_relaxed);
    return true;
  }

 private:
  const Kernel baseline_;
  bool (*const has_fast_)();
  std::atomic<Kernel> active_;
};

}  // namespace ferry::kernels::cpu
