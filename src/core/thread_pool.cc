#include "core/thread_pool.h"

#include <omp.h>
#include <pthread.h>

#include <algorithm>
#include <condition_variable>
#include <mutex>

namespace ferry {

void SetComputeThreads(int n) {
  if (n <= 0) n = AvailableCores();
  omp_set_num_threads(n);
}

int ComputeThreads() { return omp_get_max_threads(); }

int AvailableCores() { return omp_get_num_procs(); }

#if defined(__SANITIZE_THREAD__)
// Under ThreadSanitizer, ParallelFor forks and joins on plain threads synchronized by a mutex:
// TSan does not see libgomp's barriers, so every OpenMP region would be reported as a race
// on the captured function (a known false positive). Same split of the range, same results.
namespace {

thread_local bool in_parallel_for = false;

}  // namespace

void ParallelFor(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  const int threads = in_parallel_for ? 1 : omp_get_max_threads();
  const int64_t chunks = (n + grain - 1) / grain;
  const int64_t workers = std::min<int64_t>(threads, chunks);
  if (workers <= 1) {
    fn(0, n);
    return;
  }
  static ThreadPool& pool = *new ThreadPool(std::max(1, omp_get_num_procs() - 1), "ferry-pfor");
  const int64_t per = (chunks + workers - 1) / workers;
  std::mutex mu;
  std::condition_variable done;
  int64_t left = workers - 1;
  auto run = [&](int64_t t) {
    const int64_t begin = std::min(n, t * per * grain);
    const int64_t end = std::min(n, (t + 1) * per * grain);
    const bool outer = in_parallel_for;
    in_parallel_for = true;
    if (begin < end) fn(begin, end);
    in_parallel_for = outer;
  };
  for (int64_t t = 1; t < workers; ++t) {
    pool.Submit([&, t] {
      run(t);
      std::lock_guard<std::mutex> lock(mu);
      if (--left == 0) done.notify_one();
    });
  }
  run(0);
  std::unique_lock<std::mutex> lock(mu);
  done.wait(lock, [&] { return left == 0; });
}
#else
void ParallelFor(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  const int threads = omp_in_parallel() ? 1 : omp_get_max_threads();
  const int64_t chunks = (n + grain - 1) / grain;
  const int64_t workers = std::min<int64_t>(threads, chunks);
  if (workers <= 1) {
    fn(0, n);
    return;
  }
#pragma omp parallel num_threads(static_cast<int>(workers))
  {
    const int64_t t = omp_get_thread_num();
    const int64_t per = (chunks + workers - 1) / workers;
    const int64_t begin = std::min(n, t * per * grain);
    const int64_t end = std::min(n, (t + 1) * per * grain);
    if (begin < end) fn(begin, end);
  }
}
#endif

ThreadPool::ThreadPool(int threads, std::string name) {
  for (int i = 0; i < threads; ++i) {
    workers_.emplace_back([this, name, i] {
      SetCurrentThreadName(name + "-" + std::to_string(i));
      WorkerLoop();
    });
  }
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  for (std::thread& t : workers_) t.join();
}

void ThreadPool::Submit(std::function<void()> task) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    tasks_.push_back(std::move(task));
  }
  cv_.notify_one();
}

void ThreadPool::WorkerLoop() {
  for (;;) {
    std::function<void()> task;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return stopping_ || !tasks_.empty(); });
      if (tasks_.empty()) return;  // stopping and drained
      task = std::move(tasks_.front());
      tasks_.pop_front();
    }
    task();
  }
}

void SetCurrentThreadName(const std::string& name) {
  pthread_setname_np(pthread_self(), name.substr(0, 15).c_str());
}

SerialQueue::SerialQueue(ThreadPool& pool) : pool_(pool), state_(std::make_shared<State>()) {}

void SerialQueue::Post(std::function<void()> task) {
  bool schedule = false;
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    state_->tasks.push_back(std::move(task));
    schedule = !state_->scheduled;
    state_->scheduled = true;
  }
  if (schedule) {
    ThreadPool& pool = pool_;
    pool.Submit([&pool, state = state_] { Drain(pool, state); });
  }
}

// Runs a bounded number of tasks, then yields the thread to other queues if more are left.
void SerialQueue::Drain(ThreadPool& pool, const std::shared_ptr<State>& state) {
  constexpr int kBatch = 64;
  for (int i = 0; i < kBatch; ++i) {
    std::function<void()> task;
    {
      std::lock_guard<std::mutex> lock(state->mu);
      if (state->tasks.empty()) {
        state->scheduled = false;
        return;
      }
      task = std::move(state->tasks.front());
      state->tasks.pop_front();
    }
    task();
  }
  pool.Submit([&pool, state] { Drain(pool, state); });
}

}  // namespace ferry
