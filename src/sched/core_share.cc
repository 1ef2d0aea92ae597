#include "sched/core_share.h"

#include <algorithm>

namespace ferry::sched {

CoreShare::CoreShare(int cores) : cores_(std::max(1, cores)) {}

int CoreShare::Join() {
  std::lock_guard<std::mutex> lock(mu_);
  busy_.push_back(false);
  return static_cast<int>(busy_.size()) - 1;
}

int CoreShare::Busy(int member) {
  std::lock_guard<std::mutex> lock(mu_);
  busy_.at(static_cast<size_t>(member)) = true;
  int busy = 0, rank = 0;
  for (size_t i = 0; i < busy_.size(); ++i) {
    if (!busy_[i]) continue;
    if (static_cast<int>(i) < member) ++rank;
    ++busy;
  }
  const int base = cores_ / busy, extra = cores_ % busy;
  return std::max(1, base + (rank < extra ? 1 : 0));
}

void CoreShare::Idle(int member) {
  std::lock_guard<std::mutex> lock(mu_);
  busy_.at(static_cast<size_t>(member)) = false;
}

}  // namespace ferry::sched
