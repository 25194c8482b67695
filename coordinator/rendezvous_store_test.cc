#include "coordinator/rendezvous_store.h"

#include <atomic>
#include <thread>

#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace mtrain {
namespace {

TEST(RendezvousStoreTest, SetThenGet) {
  RendezvousStore store;
  ASSERT_TRUE(store.Set("a", "1").ok());
  absl::StatusOr<std::string> value = store.Get("a");
  ASSERT_TRUE(value.ok());
  EXPECT_EQ(*value, "1");
  EXPECT_EQ(store.Get("b").status().code(), absl::StatusCode::kNotFound);
}

TEST(RendezvousStoreTest, WaitReturnsOnceAllKeysAreSetByAnotherThread) {
  RendezvousStore store;
  ASSERT_TRUE(store.Set("rank0", "x").ok());
  std::thread setter([&store] {
    absl::SleepFor(absl::Milliseconds(50));
    ASSERT_TRUE(store.Set("rank1", "y").ok());
  });
  EXPECT_TRUE(store.Wait({"rank0", "rank1"}, absl::Seconds(10)).ok());
  setter.join();
}

TEST(RendezvousStoreTest, WaitTimesOutNamingMissingKeys) {
  RendezvousStore store;
  ASSERT_TRUE(store.Set("rank0", "x").ok());
  absl::Status status = store.Wait({"rank0", "rank1", "rank2"}, absl::Milliseconds(20));
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(status.message().find("rank1, rank2"), absl::string_view::npos) << status;
  EXPECT_EQ(status.message().find("rank0"), absl::string_view::npos) << status;
}

TEST(RendezvousStoreTest, ACancelledWaitEndsWithinACheck) {
  RendezvousStore store;
  std::atomic<bool> cancel{false};
  std::thread canceller([&] {
    absl::SleepFor(absl::Milliseconds(200));
    cancel = true;
  });
  const absl::Time start = absl::Now();
  const absl::Status status =
      store.Wait({"never"}, absl::Seconds(30), [&] { return cancel.load(); });
  canceller.join();
  EXPECT_EQ(status.code(), absl::StatusCode::kCancelled) << status;
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  // Not cancelled: the timeout, naming the missing key, and keys set meanwhile are seen.
  EXPECT_EQ(store.Wait({"never"}, absl::Milliseconds(250), [] { return false; }).code(),
            absl::StatusCode::kDeadlineExceeded);
  std::thread setter([&] {
    absl::SleepFor(absl::Milliseconds(150));
    ASSERT_TRUE(store.Set("late", "v").ok());
  });
  EXPECT_TRUE(store.Wait({"late"}, absl::Seconds(30), [] { return false; }).ok());
  setter.join();
}

TEST(RendezvousStoreTest, BadKeysAreRejected) {
  RendezvousStore store;
  EXPECT_EQ(store.Set("", "x").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store.Wait({}, absl::Seconds(1)).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store.Wait({"a", ""}, absl::Seconds(1)).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store.Set("k", std::string(kMaxRendezvousValueBytes + 1, 'x')).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(RendezvousStoreTest, ErasePrefixRemovesOnlyThatGeneration) {
  RendezvousStore store;
  ASSERT_TRUE(store.Set("job/gen-1/a", "1").ok());
  ASSERT_TRUE(store.Set("job/gen-1/b", "1").ok());
  ASSERT_TRUE(store.Set("job/gen-2/a", "2").ok());
  store.ErasePrefix("job/gen-1/");
  EXPECT_FALSE(store.Get("job/gen-1/a").ok());
  EXPECT_FALSE(store.Get("job/gen-1/b").ok());
  EXPECT_TRUE(store.Get("job/gen-2/a").ok());
}

}  // namespace
}  // namespace mtrain
