#include "common/mutex.h"

#include <chrono>
#include <thread>
#include <vector>

#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace mtrain {
namespace {

TEST(MutexTest, MutexLockExcludesOtherThreads) {
  Mutex mutex;
  int64_t count = 0;  // guarded by mutex (a local: the annotation needs a member)
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 10000; ++i) {
        MutexLock lock(&mutex);
        ++count;
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(count, 40000);
}

TEST(MutexTest, WaitReturnsWithTheLockHeldOnceSignalled) {
  Mutex mutex;
  CondVar changed;
  bool ready = false;
  int seen_by_waiter = 0;
  std::thread waiter([&] {
    MutexLock lock(&mutex);
    while (!ready) changed.Wait(&mutex);
    ++seen_by_waiter;  // under the lock again
  });
  {
    MutexLock lock(&mutex);
    ready = true;
    changed.SignalAll();
  }
  waiter.join();
  MutexLock lock(&mutex);
  EXPECT_EQ(seen_by_waiter, 1);
}

TEST(MutexTest, WaitUntilAPassedDeadlineTimesOut) {
  Mutex mutex;
  CondVar changed;
  MutexLock lock(&mutex);
  EXPECT_TRUE(changed.WaitUntil(&mutex, std::chrono::steady_clock::now()));
  EXPECT_TRUE(changed.WaitUntil(&mutex, SteadyDeadlineIn(absl::ZeroDuration())));
}

TEST(MutexTest, SteadyDeadlineInSaturatesInsteadOfOverflowing) {
  EXPECT_EQ(SteadyDeadlineIn(absl::InfiniteDuration()),
            std::chrono::steady_clock::time_point::max());
  const auto before = std::chrono::steady_clock::now();
  const auto deadline = SteadyDeadlineIn(absl::Seconds(10));
  EXPECT_GE(deadline, before + std::chrono::seconds(10));
  EXPECT_LT(deadline, std::chrono::steady_clock::time_point::max());
  EXPECT_LE(SteadyDeadlineIn(-absl::Seconds(1)), std::chrono::steady_clock::now());
}

}  // namespace
}  // namespace mtrain
