#include "sched/core_share.h"

#include <algorithm>

namespace ferry::sched {

CoreShare::CoreShare(int cores) : cores_(std::max(1, cores)) {}

int CoreShare::Join(int max_threads) {
  std::lock_guard<std::mutex> lock(mu_);
  busy_.push_back(false);
  caps_.push_back(std::max(0, max_threads));
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
  const int share = std::max(1, base + (rank < extra ? 1 : 0));
  const int cap = caps_[static_cast<size_t>(member)];
  return cap > 0 ? std::min(share, cap) : share;
}

void CoreShare::Idle(int member) {
  std::lock_guard<std::mutex> lock(mu_);
  busy_.at(static_cast<size_t>(member)) = false;
}

}  // namespace ferry::sched
