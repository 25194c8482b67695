// The watchdog on its own: members are GroupWatchdog objects on threads of this process,
// reporting to one DirectoryStore; no transport is involved (gloo_communicator_test.cc
// covers the watchdog behind real Gloo groups).
#include "worker/parallel/group_watchdog.h"

#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "worker/parallel/communicator.h"
#include "worker/parallel/key_value_store.h"

namespace mtrain {
namespace {

constexpr absl::Duration kWait = absl::Milliseconds(300);

bool Contains(const absl::Status& status, const std::string& text) {
  return status.message().find(text) != absl::string_view::npos;
}

// Global ranks 5, 6, 7 (so that group and global ranks differ), group "data-1".
GroupSpec Spec(int rank, absl::Duration wait = kWait) {
  GroupSpec spec;
  spec.name = "data-1";
  spec.members = {5, 6, 7};
  spec.global_rank = spec.members[rank];
  spec.timeout = absl::Seconds(5);
  spec.watchdog_wait = wait;
  return spec;
}

absl::Status Timeout(const GroupOperation& op) {
  return absl::DeadlineExceededError(
      absl::StrCat(op.Text(), " in group data-1 (ranks 5,6,7) did not complete within 5s"));
}

absl::Status TransportFailed(const GroupOperation& op) {
  return absl::UnavailableError(absl::StrCat(op.Text(), " in group data-1: transport failed"));
}

// Fails on demand, to stand for a coordinator that cannot be reached.
class FailingStore : public KeyValueStore {
 public:
  explicit FailingStore(KeyValueStore* inner) : inner_(inner) {}
  absl::Status Set(const std::string& key, const std::string& value) override {
    if (fail_sets) return absl::UnavailableError("store down");
    return inner_->Set(key, value);
  }
  absl::StatusOr<std::string> Get(const std::string& key) override {
    if (fail_reads) return absl::UnavailableError("store down");
    return inner_->Get(key);
  }
  absl::Status Wait(const std::vector<std::string>& keys, absl::Duration timeout) override {
    if (fail_reads) return absl::UnavailableError("store down");
    return inner_->Wait(keys, timeout);
  }
  bool fail_sets = false;
  bool fail_reads = false;

 private:
  KeyValueStore* inner_;
};

class GroupWatchdogTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* root = std::getenv("TEST_TMPDIR");
    const std::string directory = absl::StrCat(
        root != nullptr ? root : "/tmp", "/watchdog-",
        ::testing::UnitTest::GetInstance()->current_test_info()->name(), "-", ::getpid());
    absl::StatusOr<std::unique_ptr<DirectoryStore>> store = DirectoryStore::Open(directory);
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = std::move(*store);
  }

  std::unique_ptr<DirectoryStore> store_;
};

TEST_F(GroupWatchdogTest, NumbersCollectivesInCallOrderAndMessagesPerPeerAndDirection) {
  GroupWatchdog watchdog(store_.get(), Spec(0), 0);
  EXPECT_EQ(watchdog.NextCollective("AllReduce").Text(), "AllReduce #1");
  EXPECT_EQ(watchdog.NextCollective("Broadcast", " from group rank 2").Text(),
            "Broadcast #2 from group rank 2");
  EXPECT_EQ(watchdog.NextSend(1, 9).Text(), "Send #1 to group rank 1 (global rank 6) with tag 9");
  EXPECT_EQ(watchdog.NextSend(1, 9).Text(), "Send #2 to group rank 1 (global rank 6) with tag 9");
  EXPECT_EQ(watchdog.NextSend(2, 9).Text(), "Send #1 to group rank 2 (global rank 7) with tag 9");
  EXPECT_EQ(watchdog.NextRecv(1, 3).Text(), "Recv #1 from group rank 1 (global rank 6) with tag 3");
  EXPECT_EQ(watchdog.NextCollective("Barrier").Text(), "Barrier #3");
  EXPECT_FALSE(watchdog.NextRecv(2, 0).collective());
}

// Members 0 and 1 are stuck in AllReduce #2; member 2 never got there.
TEST_F(GroupWatchdogTest, MembersStuckInACollectiveNameTheOneThatNeverArrived) {
  std::vector<absl::Status> results(2);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < 2; ++rank) {
    threads.emplace_back([&, rank] {
      GroupWatchdog watchdog(store_.get(), Spec(rank), rank);
      watchdog.NextCollective("AllReduce");
      const GroupOperation op = watchdog.NextCollective("AllReduce");
      results[rank] = watchdog.Explain(op, Timeout(op), "Gloo: timed out", nullptr);
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_EQ(results[rank].code(), absl::StatusCode::kDeadlineExceeded) << results[rank];
    EXPECT_EQ(results[rank].message(),
              "AllReduce #2 in group data-1 (ranks 5,6,7) did not complete within 5s; did not "
              "arrive: global rank 7 (group rank 2): no watchdog report within 300ms (hung, "
              "dead or behind); Gloo: timed out");
  }
  // The documented layout: one key per member, five lines.
  absl::StatusOr<std::string> value = store_->Get("data-1/watchdog/0");
  ASSERT_TRUE(value.ok()) << value.status();
  EXPECT_EQ(*value, "4\nAllReduce\n2\n-1\n");
}

TEST_F(GroupWatchdogTest, EveryMemberArrivingBlamesTheTransport) {
  std::vector<absl::Status> results(3);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < 3; ++rank) {
    threads.emplace_back([&, rank] {
      GroupWatchdog watchdog(store_.get(), Spec(rank, absl::Seconds(10)), rank);
      const GroupOperation op = watchdog.NextCollective("Barrier");
      const absl::Time start = absl::Now();
      results[rank] = watchdog.Explain(op, Timeout(op), "", nullptr);
      // Nobody waits out the watchdog wait once every report is in.
      EXPECT_LT(absl::Now() - start, absl::Seconds(5));
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (const absl::Status& result : results) {
    EXPECT_EQ(result.code(), absl::StatusCode::kDeadlineExceeded) << result;
    EXPECT_TRUE(Contains(result, "every member reached it (the watchdog heard from all 3)"))
        << result;
    EXPECT_FALSE(Contains(result, "did not arrive")) << result;
  }
}

// The first member to time out closes its connections; the others see UNAVAILABLE, but
// the operation really timed out, and they say so.
TEST_F(GroupWatchdogTest, APeerTimingOutInTheSameCollectiveMakesTransportFailuresTimeouts) {
  absl::Status timed_out, cascaded;
  std::thread first([&] {
    GroupWatchdog watchdog(store_.get(), Spec(0), 0);
    const GroupOperation op = watchdog.NextCollective("AllReduce");
    timed_out = watchdog.Explain(op, Timeout(op), "", nullptr);
  });
  std::thread second([&] {
    GroupWatchdog watchdog(store_.get(), Spec(1), 1);
    const GroupOperation op = watchdog.NextCollective("AllReduce");
    cascaded =
        watchdog.Explain(op, TransportFailed(op), "Gloo: Connection closed by peer", nullptr);
  });
  first.join();
  second.join();
  EXPECT_EQ(timed_out.code(), absl::StatusCode::kDeadlineExceeded) << timed_out;
  EXPECT_EQ(cascaded.code(), absl::StatusCode::kDeadlineExceeded) << cascaded;
  EXPECT_EQ(cascaded.message(),
            "AllReduce #1 in group data-1 (ranks 5,6,7) did not complete within 5s: global rank "
            "5 (group rank 0) timed out in it and closed its connections; did not arrive: global "
            "rank 7 (group rank 2): no watchdog report within 300ms (hung, dead or behind); "
            "Gloo: Connection closed by peer");
}

TEST_F(GroupWatchdogTest, APeerThatFailedElsewhereIsNamedWithItsOperation) {
  {
    GroupWatchdog member2(store_.get(), Spec(2), 2);
    const GroupOperation recv = member2.NextRecv(0, 4);
    // A refused message is published without waiting.
    const absl::Time start = absl::Now();
    const absl::Status refused = absl::InvalidArgumentError("size mismatch");
    EXPECT_EQ(member2.Explain(recv, refused, "", nullptr), refused);
    EXPECT_LT(absl::Now() - start, kWait);
  }
  {
    GroupWatchdog member1(store_.get(), Spec(1), 1);
    member1.NextCollective("AllReduce");
    const GroupOperation other = member1.NextCollective("AllGather");
    EXPECT_EQ(member1.Explain(other, Timeout(other), "", nullptr).code(),
              absl::StatusCode::kDeadlineExceeded);
  }
  GroupWatchdog member0(store_.get(), Spec(0), 0);
  member0.NextCollective("AllReduce");
  const GroupOperation op = member0.NextCollective("AllReduce");
  const absl::Status status = member0.Explain(op, Timeout(op), "", nullptr);
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_TRUE(Contains(status,
                       "did not arrive: global rank 6 (group rank 1): timed out in AllGather #2 "
                       "(members called different collectives as #2); global rank 7 (group rank "
                       "2): failed in Recv #1 from group rank 0 (global rank 5) with tag 4 "
                       "(INVALID_ARGUMENT)"))
      << status;
}

TEST_F(GroupWatchdogTest, PointToPointWaitsForThePeerOnly) {
  // Members 0 and 1 each wait to receive from the other (a deadlock); member 2 is silent,
  // but a message between 0 and 1 does not need it.
  std::vector<absl::Status> results(2);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < 2; ++rank) {
    threads.emplace_back([&, rank] {
      GroupWatchdog watchdog(store_.get(), Spec(rank, absl::Seconds(10)), rank);
      const GroupOperation op = watchdog.NextRecv(1 - rank, 7);
      const absl::Time start = absl::Now();
      results[rank] = watchdog.Explain(op, Timeout(op), "", nullptr);
      EXPECT_LT(absl::Now() - start, absl::Seconds(5));  // did not wait for member 2
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_TRUE(Contains(results[0],
                       "the peer reported: global rank 6 (group rank 1): timed out in Recv #1 "
                       "from group rank 0 (global rank 5) with tag 7"))
      << results[0];
  EXPECT_TRUE(Contains(results[1],
                       "the peer reported: global rank 5 (group rank 0): timed out in Recv #1 "
                       "from group rank 1 (global rank 6) with tag 7"))
      << results[1];
  EXPECT_FALSE(Contains(results[0], "global rank 7")) << results[0];
}

TEST_F(GroupWatchdogTest, SilentPeerOfAMessageIsNamed) {
  GroupWatchdog watchdog(store_.get(), Spec(0), 0);
  const GroupOperation op = watchdog.NextRecv(2, 11);
  const absl::Status status = watchdog.Explain(op, Timeout(op), "", nullptr);
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(status.message(),
            "Recv #1 from group rank 2 (global rank 7) with tag 11 in group data-1 (ranks 5,6,7) "
            "did not complete within 5s; did not arrive: global rank 7 (group rank 2): no "
            "watchdog report within 300ms (hung, dead or behind)");
}

TEST_F(GroupWatchdogTest, OnlyTheFirstFailureIsReportedAndExplained) {
  GroupWatchdog watchdog(store_.get(), Spec(0), 0);
  const GroupOperation op = watchdog.NextCollective("AllReduce");
  EXPECT_TRUE(Contains(watchdog.Explain(op, Timeout(op), "", nullptr), "did not arrive"));
  const GroupOperation later = watchdog.NextCollective("Barrier");
  const absl::Time start = absl::Now();
  const absl::Status again = watchdog.Explain(later, TransportFailed(later), "Gloo: x", nullptr);
  EXPECT_LT(absl::Now() - start, kWait);
  EXPECT_EQ(again, absl::UnavailableError("Barrier #2 in group data-1: transport failed; Gloo: x"));
  // The report still names the first failure.
  absl::StatusOr<std::string> value = store_->Get("data-1/watchdog/0");
  ASSERT_TRUE(value.ok());
  EXPECT_EQ(*value, "4\nAllReduce\n1\n-1\n");
}

TEST_F(GroupWatchdogTest, AFailingStoreStillReturnsTheFailureAndSaysWhy) {
  FailingStore store(store_.get());
  store.fail_sets = true;
  GroupWatchdog watchdog(&store, Spec(0), 0);
  const GroupOperation op = watchdog.NextCollective("AllReduce");
  const absl::Status status = watchdog.Explain(op, Timeout(op), "", nullptr);
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(status.message(),
            "AllReduce #1 in group data-1 (ranks 5,6,7) did not complete within 5s; the watchdog "
            "could not tell who is missing: publishing this member's report failed: store down");

  FailingStore reads(store_.get());
  reads.fail_reads = true;
  GroupWatchdog other(&reads, Spec(1), 1);
  const GroupOperation op1 = other.NextCollective("AllReduce");
  const absl::Status status1 = other.Explain(op1, Timeout(op1), "", nullptr);
  EXPECT_EQ(status1.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_TRUE(Contains(status1, "the watchdog could not tell who is missing: store down"))
      << status1;
}

TEST_F(GroupWatchdogTest, WithoutAStoreOrAWaitFailuresAreExplainedFromThisSideOnly) {
  for (const bool no_store : {true, false}) {
    GroupWatchdog watchdog(no_store ? nullptr : store_.get(),
                           Spec(0, no_store ? kWait : absl::ZeroDuration()), 0);
    const GroupOperation op = watchdog.NextCollective("AllReduce");
    const absl::Time start = absl::Now();
    const absl::Status status = watchdog.Explain(op, Timeout(op), "Gloo: timed out", nullptr);
    EXPECT_LT(absl::Now() - start, kWait);
    EXPECT_EQ(status.message(),
              "AllReduce #1 in group data-1 (ranks 5,6,7) did not complete within 5s; Gloo: "
              "timed out");
  }
  EXPECT_EQ(store_->Get("data-1/watchdog/0").status().code(), absl::StatusCode::kNotFound);
}

TEST_F(GroupWatchdogTest, AbortCutsTheWaitShort) {
  std::atomic<bool> aborted{false};
  std::thread aborter([&] {
    absl::SleepFor(absl::Milliseconds(200));
    aborted = true;
  });
  GroupWatchdog watchdog(store_.get(), Spec(0, absl::Seconds(30)), 0);
  const GroupOperation op = watchdog.NextCollective("AllReduce");
  const absl::Time start = absl::Now();
  const absl::Status status =
      watchdog.Explain(op, Timeout(op), "", [&aborted] { return aborted.load(); });
  aborter.join();
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
  EXPECT_TRUE(Contains(status, "no watchdog report before the group was aborted")) << status;
}

TEST_F(GroupWatchdogTest, AnUnreadableReportIsNotTakenForAnArrival) {
  ASSERT_TRUE(store_->Set("data-1/watchdog/1", "garbage").ok());
  ASSERT_TRUE(store_->Set("data-1/watchdog/2", "4\nAllReduce\n1\n-1\n").ok());
  GroupWatchdog watchdog(store_.get(), Spec(0), 0);
  const GroupOperation op = watchdog.NextCollective("AllReduce");
  const absl::Status status = watchdog.Explain(op, Timeout(op), "", nullptr);
  EXPECT_TRUE(
      Contains(status, "did not arrive: global rank 6 (group rank 1): unreadable watchdog report"))
      << status;
  EXPECT_FALSE(Contains(status, "global rank 7")) << status;
}

}  // namespace
}  // namespace mtrain
