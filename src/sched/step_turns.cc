#include "sched/step_turns.h"

namespace ferry::sched {

StepTurns::Turn StepTurns::Take(std::chrono::microseconds& waited) {
  const auto began = std::chrono::steady_clock::now();
  std::unique_lock<std::mutex> lock(mu_);
  const uint64_t ticket = next_ticket_++;
  cv_.wait(lock, [&] { return serving_ == ticket; });
  waited = std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - began);
  return Turn(this);
}

void StepTurns::Release() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++serving_;
  }
  cv_.notify_all();
}

}  // namespace ferry::sched
