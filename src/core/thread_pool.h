// Threading. Kernels use ParallelFor, which runs on the OpenMP runtime that oneDNN also
// uses, so the two never oversubscribe the cores. ThreadPool runs independent tasks
// (request handling, background work) on named std::threads.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace ferry {

// Sets the number of compute threads for kernels (and oneDNN). 0 = all cores.
void SetComputeThreads(int n);
int ComputeThreads();
// The cores this process may run on (what SetComputeThreads(0) uses).
int AvailableCores();

// Calls fn(begin, end) over [0, n) split into contiguous ranges, one per thread; ranges are
// multiples of `grain` except the last. Runs inline when n is small or inside a parallel region.
void ParallelFor(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

// Thread-safe. A fixed set of named worker threads executing queued tasks in FIFO order.
class ThreadPool {
 public:
  ThreadPool(int threads, std::string name);
  ~ThreadPool();  // drains queued tasks, then joins
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  void Submit(std::function<void()> task);
  int size() const { return static_cast<int>(workers_.size()); }

 private:
  void WorkerLoop();

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> tasks_;  // GUARDED_BY(mu_)
  bool stopping_ = false;                    // GUARDED_BY(mu_)
  std::vector<std::thread> workers_;
};

// Thread-safe. Runs the tasks posted to it one at a time, in order, on a ThreadPool's
// threads: one request's work stays serialized while many requests share the pool.
// Tasks still queued when it is destroyed run anyway (they keep its state alive).
class SerialQueue {
 public:
  explicit SerialQueue(ThreadPool& pool);
  void Post(std::function<void()> task);

 private:
  struct State {
    std::mutex mu;
    std::deque<std::function<void()>> tasks;  // GUARDED_BY(mu)
    bool scheduled = false;                   // GUARDED_BY(mu): a drain is queued or running
  };
  static void Drain(ThreadPool& pool, const std::shared_ptr<State>& state);

  ThreadPool& pool_;
  std::shared_ptr<State> state_;
};

// Names the calling thread (visible in top/gdb); truncated to 15 characters.
void SetCurrentThreadName(const std::string& name);

}  // namespace ferry
