#pragma once

#include <mutex>
#include <vector>

namespace ferry::sched {

// The cores of one CPU split among the engine loops that share them (the decoder variants of
// a QoS group on the CPU). A loop with work asks for its share before each step and gets
// cores / k compute threads while k loops have work (the remainder to the lowest members, at
// least one each); alone it gets every core. A member never gets more than its own cap. Without the split each variant runs a team of
// all the cores' threads, two teams oversubscribe the cores, and every barrier of a step waits
// for a thread the other team has preempted (measured on the demo ladder, 2 cores: silver's
// goodput in the burst 3.1 req/s with 2 + 2 threads, 33.5 req/s with 1 + 1). Any thread.
class CoreShare {
 public:
  explicit CoreShare(int cores);

  // A new member (a loop) that runs at most `max_threads` threads (0: no cap of its own);
  // its id for Busy and Idle.
  int Join(int max_threads = 0);
  // Marks `member` as having work and returns the compute threads for its next step.
  int Busy(int member);
  // Marks `member` as having no work (its loop waits for a request).
  void Idle(int member);
  int cores() const { return cores_; }

 private:
  const int cores_;
  std::mutex mu_;
  std::vector<bool> busy_;  // GUARDED_BY(mu_)
  std::vector<int> caps_;   // GUARDED_BY(mu_): per member, 0 = none
};

}  // namespace ferry::sched
