#include "coordinator/rendezvous_store.h"

#include <atomic>
#include <cstdio>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/mutex.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace mtrain {
namespace {

using ::testing::HasSubstr;

// A store with the generation "job/gen-1/" open (limit: a world of 2).
class RendezvousStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(store_.OpenGeneration("job/gen-1/", RendezvousGenerationByteLimit(2)).ok());
  }
  RendezvousStore store_;
};

TEST_F(RendezvousStoreTest, SetThenGet) {
  ASSERT_TRUE(store_.Set("job/gen-1/a", "1").ok());
  absl::StatusOr<std::string> value = store_.Get("job/gen-1/a");
  ASSERT_TRUE(value.ok());
  EXPECT_EQ(*value, "1");
  EXPECT_EQ(store_.Get("job/gen-1/b").status().code(), absl::StatusCode::kNotFound);
}

TEST_F(RendezvousStoreTest, WaitReturnsOnceAllKeysAreSetByAnotherThread) {
  ASSERT_TRUE(store_.Set("job/gen-1/rank0", "x").ok());
  std::thread setter([this] {
    absl::SleepFor(absl::Milliseconds(50));
    ASSERT_TRUE(store_.Set("job/gen-1/rank1", "y").ok());
  });
  EXPECT_TRUE(store_.Wait({"job/gen-1/rank0", "job/gen-1/rank1"}, absl::Seconds(10)).ok());
  setter.join();
}

TEST_F(RendezvousStoreTest, WaitTimesOutNamingMissingKeys) {
  ASSERT_TRUE(store_.Set("job/gen-1/rank0", "x").ok());
  absl::Status status = store_.Wait({"job/gen-1/rank0", "job/gen-1/rank1", "job/gen-1/rank2"},
                                    absl::Milliseconds(20));
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(status.message(), HasSubstr("job/gen-1/rank1, job/gen-1/rank2"));
  EXPECT_THAT(status.message(), ::testing::Not(HasSubstr("rank0")));
}

TEST_F(RendezvousStoreTest, ACancelledWaitEndsWithinACheck) {
  std::atomic<bool> cancel{false};
  std::thread canceller([&] {
    absl::SleepFor(absl::Milliseconds(200));
    cancel = true;
  });
  const absl::Time start = absl::Now();
  const absl::Status status =
      store_.Wait({"job/gen-1/never"}, absl::Seconds(30), [&] { return cancel.load(); });
  canceller.join();
  EXPECT_EQ(status.code(), absl::StatusCode::kCancelled) << status;
  EXPECT_LT(absl::Now() - start, absl::Seconds(20));
  // Not cancelled: the timeout, naming the missing key, and keys set meanwhile are seen.
  EXPECT_EQ(store_.Wait({"job/gen-1/never"}, absl::Milliseconds(250), [] { return false; }).code(),
            absl::StatusCode::kDeadlineExceeded);
  std::thread setter([&] {
    absl::SleepFor(absl::Milliseconds(150));
    ASSERT_TRUE(store_.Set("job/gen-1/late", "v").ok());
  });
  EXPECT_TRUE(store_.Wait({"job/gen-1/late"}, absl::Seconds(30), [] { return false; }).ok());
  setter.join();
}

// WaitAsync's answers, as the callbacks record them (any thread).
class Answers {
 public:
  RendezvousStore::WaitDone Record() {
    return [this](absl::Status status) {
      MutexLock lock(&mutex_);
      statuses_.push_back(std::move(status));
    };
  }
  std::vector<absl::Status> Take() {
    MutexLock lock(&mutex_);
    return std::exchange(statuses_, {});
  }
  // Waits up to `timeout` for `n` answers in all.
  bool AwaitCount(size_t n, absl::Duration timeout) {
    const absl::Time deadline = absl::Now() + timeout;
    while (absl::Now() < deadline) {
      {
        MutexLock lock(&mutex_);
        if (statuses_.size() >= n) return true;
      }
      absl::SleepFor(absl::Milliseconds(5));
    }
    return false;
  }

 private:
  Mutex mutex_;
  std::vector<absl::Status> statuses_ ABSL_GUARDED_BY(mutex_);
};

TEST_F(RendezvousStoreTest, AnAsyncWaitEndsWithTheSetOfItsLastKeyAndHoldsNoThread) {
  Answers answers;
  ASSERT_TRUE(store_.Set("job/gen-1/rank0", "x").ok());
  const uint64_t ticket =
      store_.WaitAsync({"job/gen-1/rank0", "job/gen-1/rank1", "job/gen-1/rank1"}, absl::Seconds(30),
                       answers.Record());
  EXPECT_NE(ticket, 0u);
  EXPECT_EQ(store_.PendingWaits(), 1u);
  EXPECT_TRUE(answers.Take().empty()) << "nothing answered before the last key";
  ASSERT_TRUE(store_.Set("job/gen-1/other", "z").ok());
  EXPECT_TRUE(answers.Take().empty()) << "a key nobody waits for answers nobody";
  ASSERT_TRUE(store_.Set("job/gen-1/rank1", "y").ok());
  // The Set that completes the keys answers on its own thread, before it returns.
  std::vector<absl::Status> got = answers.Take();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_TRUE(got[0].ok()) << got[0];
  EXPECT_EQ(store_.PendingWaits(), 0u);
  store_.CancelWait(ticket);  // already answered: nothing more
  EXPECT_TRUE(answers.Take().empty());
}

TEST_F(RendezvousStoreTest, AnAsyncWaitKnownAtOnceIsAnsweredOnTheCallersThread) {
  Answers answers;
  ASSERT_TRUE(store_.Set("job/gen-1/a", "1").ok());
  EXPECT_EQ(store_.WaitAsync({"job/gen-1/a"}, absl::Seconds(30), answers.Record()), 0u);
  EXPECT_EQ(store_.WaitAsync({}, absl::Seconds(30), answers.Record()), 0u);
  EXPECT_EQ(store_.WaitAsync({"job/gen-9/a"}, absl::Seconds(30), answers.Record()), 0u);
  std::vector<absl::Status> got = answers.Take();
  ASSERT_EQ(got.size(), 3u);
  EXPECT_TRUE(got[0].ok());
  EXPECT_EQ(got[1].code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(got[2].code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(got[2].message(), HasSubstr("job/gen-9/a"));
  EXPECT_EQ(store_.PendingWaits(), 0u);
}

TEST_F(RendezvousStoreTest, AnAsyncWaitTimesOutNamingTheMissingKeys) {
  Answers answers;
  ASSERT_TRUE(store_.Set("job/gen-1/here", "1").ok());
  store_.WaitAsync({"job/gen-1/here", "job/gen-1/absent"}, absl::Milliseconds(100),
                   answers.Record());
  const absl::Time start = absl::Now();
  ASSERT_TRUE(answers.AwaitCount(1, absl::Seconds(10)));
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(80));
  std::vector<absl::Status> got = answers.Take();
  EXPECT_EQ(got[0].code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(got[0].message(), HasSubstr("job/gen-1/absent"));
  EXPECT_THAT(got[0].message(), ::testing::Not(HasSubstr("job/gen-1/here")));
  EXPECT_EQ(store_.PendingWaits(), 0u);
  // A later Set of the key answers nobody.
  ASSERT_TRUE(store_.Set("job/gen-1/absent", "2").ok());
  EXPECT_TRUE(answers.Take().empty());
}

TEST_F(RendezvousStoreTest, AnAsyncWaitEndsWhenCancelledOrItsGenerationCloses) {
  Answers answers;
  ASSERT_TRUE(store_.OpenGeneration("job/gen-2/", RendezvousGenerationByteLimit(2)).ok());
  const uint64_t cancelled = store_.WaitAsync({"job/gen-1/x"}, absl::Minutes(5), answers.Record());
  store_.WaitAsync({"job/gen-2/y"}, absl::Minutes(5), answers.Record());
  const uint64_t left = store_.WaitAsync({"job/gen-1/z"}, absl::Minutes(5), answers.Record());
  store_.CancelWait(cancelled);
  std::vector<absl::Status> got = answers.Take();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].code(), absl::StatusCode::kCancelled);
  store_.CloseGeneration("job/gen-2/");
  got = answers.Take();
  ASSERT_EQ(got.size(), 1u) << "only the closed generation's wait ends";
  EXPECT_EQ(got[0].code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(got[0].message(), HasSubstr("job/gen-2/y"));
  EXPECT_EQ(store_.PendingWaits(), 1u);
  store_.CancelWait(left);  // before `answers` goes: the store outlives this body
  EXPECT_EQ(answers.Take().size(), 1u);
}

TEST(RendezvousAsyncTest, StoppingTheStoreEndsItsPendingWaits) {
  Answers answers;
  {
    RendezvousStore store;
    ASSERT_TRUE(store.OpenGeneration("job/gen-1/", RendezvousGenerationByteLimit(2)).ok());
    store.WaitAsync({"job/gen-1/never"}, absl::Minutes(5), answers.Record());
  }
  std::vector<absl::Status> got = answers.Take();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].code(), absl::StatusCode::kCancelled);
}

// A large world's rendezvous: every rank waits for all the others' keys, with no thread
// per wait; each Set looks only at the waits on its key.
TEST(RendezvousAsyncTest, AThousandRanksWaitingOnEachOtherAllFinish) {
  constexpr int kRanks = 1000;
  RendezvousStore store;
  ASSERT_TRUE(store.OpenGeneration("job/gen-1/", RendezvousGenerationByteLimit(kRanks)).ok());
  std::vector<std::string> keys;
  for (int r = 0; r < kRanks; ++r) keys.push_back(absl::StrCat("job/gen-1/rank-", r));
  Answers answers;
  for (int r = 0; r < kRanks; ++r) store.WaitAsync(keys, absl::Minutes(1), answers.Record());
  EXPECT_EQ(store.PendingWaits(), static_cast<size_t>(kRanks));
  const absl::Time start = absl::Now();
  for (int r = 0; r < kRanks; ++r) ASSERT_TRUE(store.Set(keys[r], "address").ok());
  const absl::Duration took = absl::Now() - start;
  std::vector<absl::Status> got = answers.Take();
  ASSERT_EQ(got.size(), static_cast<size_t>(kRanks));
  for (const absl::Status& status : got) EXPECT_TRUE(status.ok()) << status;
  EXPECT_EQ(store.PendingWaits(), 0u);
  std::printf("%d ranks' async rendezvous: %d sets in %s\n", kRanks, kRanks,
              absl::FormatDuration(took).c_str());
}

TEST_F(RendezvousStoreTest, BadKeysAndValuesAreRejected) {
  EXPECT_EQ(store_.Set("", "x").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store_.Wait({}, absl::Seconds(1)).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store_.Wait({"job/gen-1/a", ""}, absl::Seconds(1)).code(),
            absl::StatusCode::kInvalidArgument);
  const std::string long_key = "job/gen-1/" + std::string(kMaxRendezvousKeyBytes, 'k');
  const absl::Status too_long = store_.Set(long_key, "x");
  EXPECT_EQ(too_long.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(too_long.message(), HasSubstr("bytes per key"));
  EXPECT_EQ(store_.Get(long_key).status().code(), absl::StatusCode::kInvalidArgument);
  const absl::Status too_big =
      store_.Set("job/gen-1/k", std::string(kMaxRendezvousValueBytes + 1, 'x'));
  EXPECT_EQ(too_big.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(too_big.message(), HasSubstr("value: "));
  EXPECT_EQ(store_.TotalBytes(), 0u);
}

TEST_F(RendezvousStoreTest, KeysOutsideALiveGenerationAreRefusedNamingKeyAndRule) {
  for (const std::string key : {"anything", "job/gen-2/a", "job/gen-10/a", "job/gen-", "jo"}) {
    const absl::Status set = store_.Set(key, "x");
    EXPECT_EQ(set.code(), absl::StatusCode::kFailedPrecondition) << key;
    EXPECT_THAT(set.message(), HasSubstr(absl::StrCat("'", key, "'")));
    EXPECT_THAT(set.message(), HasSubstr("rule: rendezvous keys start with the JOB/gen-N/"));
    EXPECT_EQ(store_.Get(key).status().code(), absl::StatusCode::kFailedPrecondition) << key;
    EXPECT_EQ(store_.Wait({"job/gen-1/a", key}, absl::Seconds(30)).code(),
              absl::StatusCode::kFailedPrecondition)
        << key;
  }
  EXPECT_EQ(store_.TotalBytes(), 0u);
}

TEST_F(RendezvousStoreTest, ClosingAGenerationDeletesOnlyItsKeysAndRefusesLaterWrites) {
  ASSERT_TRUE(store_.OpenGeneration("job/gen-2/", 1000).ok());
  ASSERT_TRUE(store_.Set("job/gen-1/a", "1").ok());
  ASSERT_TRUE(store_.Set("job/gen-1/b", "1").ok());
  ASSERT_TRUE(store_.Set("job/gen-2/a", "22").ok());
  EXPECT_EQ(store_.GenerationBytes("job/gen-1/"), 2 * (11 + 1));
  EXPECT_EQ(store_.TotalBytes(), 2 * (11 + 1) + 11 + 2);
  store_.CloseGeneration("job/gen-1/");
  EXPECT_EQ(store_.GenerationBytes("job/gen-1/"), 0u);
  EXPECT_EQ(store_.TotalBytes(), 11u + 2);
  // A late rank of the ended generation cannot bring its keys back.
  EXPECT_EQ(store_.Set("job/gen-1/a", "1").code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(store_.Get("job/gen-1/b").status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(*store_.Get("job/gen-2/a"), "22");
  store_.CloseGeneration("job/gen-1/");  // twice: no-op
  store_.CloseGeneration("job/gen-2/");
  EXPECT_EQ(store_.TotalBytes(), 0u);
}

TEST_F(RendezvousStoreTest, AWaitEndsWhenItsGenerationCloses) {
  std::thread closer([this] {
    absl::SleepFor(absl::Milliseconds(100));
    store_.CloseGeneration("job/gen-1/");
  });
  const absl::Time start = absl::Now();
  const absl::Status status = store_.Wait({"job/gen-1/never"}, absl::Seconds(60));
  closer.join();
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition) << status;
  EXPECT_THAT(status.message(), HasSubstr("job/gen-1/never"));
  EXPECT_LT(absl::Now() - start, absl::Seconds(30));
}

TEST_F(RendezvousStoreTest, OverlappingOrMalformedPrefixesAreRefused) {
  EXPECT_EQ(store_.OpenGeneration("job/", 10).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store_.OpenGeneration("job/gen-1/x/", 10).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store_.OpenGeneration("job/gen-1/", 10).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store_.OpenGeneration("", 10).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store_.OpenGeneration("job/gen-3", 10).code(), absl::StatusCode::kInvalidArgument);
  // A sibling whose name extends this one's without the slash is a different generation.
  EXPECT_TRUE(store_.OpenGeneration("job/gen-10/", 100).ok());
  ASSERT_TRUE(store_.Set("job/gen-10/a", "1").ok());
  EXPECT_EQ(store_.GenerationBytes("job/gen-10/"), 13u);
  EXPECT_EQ(store_.GenerationBytes("job/gen-1/"), 0u);
}

TEST(RendezvousLimitsTest, AGenerationStopsAtItsLimitAndOverwritesAreCountedOnce) {
  RendezvousStore store;
  ASSERT_TRUE(store.OpenGeneration("g/", 100).ok());
  ASSERT_TRUE(store.Set("g/a", std::string(90, 'x')).ok());  // 3 + 90 bytes
  const absl::Status over = store.Set("g/b", std::string(10, 'x'));
  EXPECT_EQ(over.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(over.message(), HasSubstr("over its limit of 100"));
  EXPECT_THAT(over.message(), HasSubstr("per-generation limit"));
  EXPECT_EQ(store.Get("g/b").status().code(), absl::StatusCode::kNotFound);
  // Replacing a value frees the old one: the same key may be rewritten at full size.
  ASSERT_TRUE(store.Set("g/a", std::string(97, 'y')).ok());
  EXPECT_EQ(store.GenerationBytes("g/"), 100u);
  ASSERT_TRUE(store.Set("g/a", "z").ok());
  EXPECT_EQ(store.GenerationBytes("g/"), 4u);
  EXPECT_TRUE(store.Set("g/b", std::string(10, 'x')).ok());
}

TEST(RendezvousLimitsTest, AllGenerationsTogetherStopAtTheTotalLimit) {
  RendezvousStore store(/*total_byte_limit=*/150);
  ASSERT_TRUE(store.OpenGeneration("g1/", 100).ok());
  ASSERT_TRUE(store.OpenGeneration("g2/", 100).ok());
  ASSERT_TRUE(store.Set("g1/a", std::string(90, 'x')).ok());
  const absl::Status over = store.Set("g2/a", std::string(90, 'x'));
  EXPECT_EQ(over.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(over.message(), HasSubstr("total limit of 150"));
  EXPECT_THAT(over.message(), HasSubstr("--rendezvous_max_bytes"));
  EXPECT_EQ(store.TotalBytes(), 94u);
  store.CloseGeneration("g1/");
  EXPECT_TRUE(store.Set("g2/a", std::string(90, 'x')).ok());
}

// What the issue saw: 600 values of 1 MiB under arbitrary names grew the coordinator by
// 500 MB. Now arbitrary names are refused, and a live generation's names stop at its limit.
TEST(RendezvousLimitsTest, AFloodOfLargeValuesIsBounded) {
  RendezvousStore store;
  ASSERT_TRUE(store.OpenGeneration("job-1/gen-1/", RendezvousGenerationByteLimit(2)).ok());
  const std::string mib(kMaxRendezvousValueBytes, 'x');
  int refused_outside = 0, exhausted = 0;
  for (int i = 0; i < 600; ++i) {
    refused_outside +=
        store.Set(absl::StrCat("flood-", i), mib).code() == absl::StatusCode::kFailedPrecondition;
    exhausted += store.Set(absl::StrCat("job-1/gen-1/flood-", i), mib).code() ==
                 absl::StatusCode::kResourceExhausted;
  }
  EXPECT_EQ(refused_outside, 600);
  EXPECT_EQ(exhausted, 600);  // a world of 2 may hold 134 KiB
  EXPECT_LE(store.TotalBytes(), RendezvousGenerationByteLimit(2));
}

TEST(RendezvousLimitsTest, TheGenerationLimitGrowsWithTheWorldWithoutOverflow) {
  EXPECT_EQ(RendezvousGenerationByteLimit(1),
            kRendezvousBytesPerRank + kRendezvousGroupKinds * kRendezvousBytesPerPair);
  EXPECT_EQ(RendezvousGenerationByteLimit(0), RendezvousGenerationByteLimit(1));
  uint64_t previous = 0;
  for (int world : {1, 2, 8, 64, 512, 4096}) {
    const uint64_t limit = RendezvousGenerationByteLimit(world);
    EXPECT_GT(limit, previous) << world;
    // Room for a Gloo full mesh of the whole world (136-byte addresses) plus small keys.
    EXPECT_GE(limit, uint64_t{136} * world * (world - 1) + uint64_t{4096} * world) << world;
    previous = limit;
  }
  EXPECT_EQ(RendezvousGenerationByteLimit(4096),
            uint64_t{4096} * kRendezvousBytesPerRank +
                kRendezvousGroupKinds * uint64_t{4096} * 4096 * kRendezvousBytesPerPair);
}

}  // namespace
}  // namespace mtrain
