#include "coordinator/job_watchers.h"

#include <atomic>
#include <functional>
#include <thread>

#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace mtrain {
namespace {

bool Eventually(const std::function<bool()>& condition) {
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (absl::Now() < deadline) {
    if (condition()) return true;
    absl::SleepFor(absl::Milliseconds(2));
  }
  return condition();
}

TEST(JobWatchersTest, ANotifyCallsThatJobsWatchersOnTheWatchersThread) {
  JobWatchers watchers;
  std::atomic<int> a{0}, b{0};
  std::atomic<bool> on_caller_thread{false};
  const std::thread::id caller = std::this_thread::get_id();
  watchers.Add("job-a", [&] {
    if (std::this_thread::get_id() == caller) on_caller_thread = true;
    ++a;
  });
  watchers.Add("job-b", [&] { ++b; });
  EXPECT_EQ(watchers.size(), 2u);
  watchers.Notify("job-a");
  ASSERT_TRUE(Eventually([&] { return a.load() == 1; }));
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_EQ(a.load(), 1);
  EXPECT_EQ(b.load(), 0) << "another job's watcher is not called";
  EXPECT_FALSE(on_caller_thread.load());
}

TEST(JobWatchersTest, AfterRemoveAWatcherIsNeitherRunningNorCalledAgain) {
  JobWatchers watchers;
  std::atomic<bool> running{false};
  std::atomic<int> calls{0};
  const uint64_t ticket = watchers.Add("job", [&] {
    running = true;
    absl::SleepFor(absl::Milliseconds(100));  // Remove must wait for this call
    ++calls;
    running = false;
  });
  watchers.Notify("job");
  ASSERT_TRUE(Eventually([&] { return running.load(); }));
  watchers.Remove(ticket);
  EXPECT_FALSE(running.load());
  EXPECT_EQ(calls.load(), 1);
  watchers.Notify("job");
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_EQ(calls.load(), 1);
  EXPECT_EQ(watchers.size(), 0u);
}

// Notifications that arrive while the thread is busy coalesce into one more call: a
// watcher reads the job's state itself, so it never misses the last change.
TEST(JobWatchersTest, NotificationsDuringACallCoalesceIntoOneMore) {
  JobWatchers watchers;
  std::atomic<bool> release{false};
  std::atomic<int> calls{0};
  watchers.Add("job", [&] {
    if (calls.fetch_add(1) == 0) {
      while (!release.load()) absl::SleepFor(absl::Milliseconds(1));
    }
  });
  watchers.Notify("job");
  ASSERT_TRUE(Eventually([&] { return calls.load() == 1; }));
  for (int i = 0; i < 100; ++i) watchers.Notify("job");
  release = true;
  ASSERT_TRUE(Eventually([&] { return calls.load() == 2; }));
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_EQ(calls.load(), 2);
}

}  // namespace
}  // namespace mtrain
