#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>

namespace ferry::sched {

// Turns on one device for the engine loops of several models (the decoder variants of a
// QoS group on one GPU): a loop takes a turn for each step and gives it back when the
// step's results are on the host, so the steps of two models run one after the other at
// their own speed instead of interleaving their kernels. First come, first served: a loop
// that asks while another steps goes next, so neither can hold the device through a series
// of steps. Any thread.
class StepTurns {
 public:
  // A held turn; given back when it goes out of scope.
  class Turn {
   public:
    Turn(Turn&& other) noexcept : turns_(other.turns_) { other.turns_ = nullptr; }
    Turn& operator=(Turn&&) = delete;
    Turn(const Turn&) = delete;
    ~Turn() {
      if (turns_ != nullptr) turns_->Release();
    }

   private:
    friend class StepTurns;
    explicit Turn(StepTurns* turns) : turns_(turns) {}
    StepTurns* turns_ = nullptr;
  };

  // Blocks until every loop that asked earlier has had its turn. `waited` gets the time
  // spent blocked.
  Turn Take(std::chrono::microseconds& waited);

 private:
  void Release();

  std::mutex mu_;
  std::condition_variable cv_;
  uint64_t next_ticket_ = 0;  // GUARDED_BY(mu_)
  uint64_t serving_ = 0;      // GUARDED_BY(mu_)
};

}  // namespace ferry::sched
