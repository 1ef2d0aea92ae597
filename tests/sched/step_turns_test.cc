#include "sched/step_turns.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

namespace ferry::sched {
namespace {

using namespace std::chrono_literals;

// Four loops, each taking 200 turns: never two inside at once, and every turn given back.
TEST(StepTurnsTest, OneLoopStepsAtATime) {
  StepTurns turns;
  std::atomic<int> inside{0};
  std::atomic<int> most{0};
  int total = 0;  // written only inside a turn
  std::vector<std::thread> loops;
  for (int t = 0; t < 4; ++t) {
    loops.emplace_back([&] {
      for (int i = 0; i < 200; ++i) {
        std::chrono::microseconds waited{0};
        const StepTurns::Turn turn = turns.Take(waited);
        const int now = ++inside;
        int seen = most.load();
        while (now > seen && !most.compare_exchange_weak(seen, now)) {
        }
        total += 1;
        --inside;
      }
    });
  }
  for (std::thread& t : loops) t.join();
  EXPECT_EQ(most.load(), 1);
  EXPECT_EQ(total, 800);
  std::chrono::microseconds waited{-1us};
  const StepTurns::Turn free_turn = turns.Take(waited);  // nobody holds one: no wait
  EXPECT_LT(waited, 50ms);
}

// First come, first served: a loop that asks while another holds the turn goes before a
// loop that asks later, and the waiter is told how long it waited.
TEST(StepTurnsTest, TurnsGoInTheOrderAsked) {
  StepTurns turns;
  std::vector<int> order;  // written only inside a turn
  std::chrono::microseconds first_wait{0};
  std::thread second;
  std::thread third;
  {
    std::chrono::microseconds waited{0};
    const StepTurns::Turn held = turns.Take(waited);
    second = std::thread([&] {
      const StepTurns::Turn turn = turns.Take(first_wait);
      order.push_back(2);
    });
    std::this_thread::sleep_for(50ms);  // the second loop is waiting by now
    third = std::thread([&] {
      std::chrono::microseconds w{0};
      const StepTurns::Turn turn = turns.Take(w);
      order.push_back(3);
    });
    std::this_thread::sleep_for(50ms);
    order.push_back(1);
  }
  second.join();
  third.join();
  EXPECT_EQ(order, (std::vector<int>{1, 2, 3}));
  EXPECT_GE(first_wait, 90ms);
}

}  // namespace
}  // namespace ferry::sched
