#include "coordinator/metrics_read_ahead.h"

#include <atomic>
#include <deque>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "common/mutex.h"
#include "gtest/gtest.h"

namespace mtrain {
namespace {

using Next = MetricsReadAhead::Next;

TEST(MetricsReadAheadTest, AStoreAnswerWhileTheBufferHoldsAMessageStartsNoRead) {
  MetricsReadAhead flow(32);
  ASSERT_EQ(flow.Start(), Next::kRead);
  EXPECT_EQ(flow.Read(), Next::kNothing);  // step 1 in the buffer
  EXPECT_EQ(flow.HandedOn(), Next::kRead);
  EXPECT_EQ(flow.Read(), Next::kNothing);  // step 2 in the buffer, not yet copied
  // The step writer stores step 1 now, from its own thread: a read started here would
  // overwrite step 2 before the job manager copied it.
  EXPECT_EQ(flow.Stored(absl::OkStatus()), Next::kNothing);
  EXPECT_EQ(flow.HandedOn(), Next::kRead);  // step 2 copied: now the next read
}

TEST(MetricsReadAheadTest, ReadsAheadOfTheStoreUpToTheLimit) {
  MetricsReadAhead flow(3);
  ASSERT_EQ(flow.Start(), Next::kRead);
  for (int i = 0; i < 2; ++i) {
    flow.Read();
    EXPECT_EQ(flow.HandedOn(), Next::kRead) << i;
  }
  flow.Read();
  EXPECT_EQ(flow.HandedOn(), Next::kNothing);  // 3 unanswered: wait for the store
  EXPECT_EQ(flow.Stored(absl::OkStatus()), Next::kRead);
  EXPECT_EQ(flow.Stored(absl::OkStatus()), Next::kNothing);  // a read is outstanding already
}

TEST(MetricsReadAheadTest, AClosedStreamEndsOnlyOnceEveryRowIsStored) {
  MetricsReadAhead flow(32);
  ASSERT_EQ(flow.Start(), Next::kRead);
  flow.Read();
  ASSERT_EQ(flow.HandedOn(), Next::kRead);
  flow.Read();
  ASSERT_EQ(flow.HandedOn(), Next::kRead);
  EXPECT_EQ(flow.Closed(), Next::kNothing);  // two rows still with the store
  EXPECT_EQ(flow.Stored(absl::OkStatus()), Next::kNothing);
  EXPECT_EQ(flow.Stored(absl::OkStatus()), Next::kFinish);
  EXPECT_TRUE(flow.error().ok());
  EXPECT_EQ(flow.Stored(absl::OkStatus()), Next::kNothing);  // finished once
}

TEST(MetricsReadAheadTest, ARefusedRowEndsTheStreamWithItsErrorAfterTheRestAreAnswered) {
  MetricsReadAhead flow(32);
  ASSERT_EQ(flow.Start(), Next::kRead);
  flow.Read();
  ASSERT_EQ(flow.HandedOn(), Next::kRead);
  flow.Read();
  ASSERT_EQ(flow.HandedOn(), Next::kRead);
  const absl::Status stale = absl::FailedPreconditionError("generation 1 is not running");
  EXPECT_EQ(flow.Stored(stale), Next::kNothing);  // one row still with the store
  // The last answer ends the stream; Finish also ends the outstanding read.
  EXPECT_EQ(flow.Stored(absl::OkStatus()), Next::kFinish);
  EXPECT_EQ(flow.Closed(), Next::kNothing);  // that read's OnReadDone(false)
  EXPECT_EQ(flow.error(), stale);
}

TEST(MetricsReadAheadTest, ARefusalAnsweredBeforeTheHandOnFinishesAtTheHandOn) {
  // The job manager refuses a stale generation inline, inside OnMetrics.
  MetricsReadAhead flow(32);
  ASSERT_EQ(flow.Start(), Next::kRead);
  flow.Read();
  EXPECT_EQ(flow.Stored(absl::FailedPreconditionError("stale")), Next::kNothing);
  EXPECT_EQ(flow.HandedOn(), Next::kFinish);
  EXPECT_FALSE(flow.error().ok());
}

// Two threads as in the coordinator: gRPC's completes reads and hands each message on, the
// writer's answers them. No read may start while one is outstanding or while the buffer
// holds a message not yet handed on; every message is handed on once, in order.
TEST(MetricsReadAheadTest, NoReadStartsIntoAHeldBufferUnderTwoThreads) {
  constexpr int kMessages = 20000;
  MetricsReadAhead flow(4);
  Mutex mutex;
  CondVar changed;
  int reads_started = 0;       // reads asked for
  int delivered = 0;           // reads completed by the gRPC thread
  std::deque<int> with_store;  // handed on, not yet answered
  bool finished = false;
  std::atomic<bool> buffer_held{false};
  std::atomic<int> violations{0};
  std::vector<int> handed_on;
  int buffer = 0;

  const auto act = [&](Next next) {
    MutexLock lock(&mutex);
    if (next == Next::kRead) {
      if (buffer_held.load() || reads_started != delivered) ++violations;
      ++reads_started;
    }
    if (next == Next::kFinish) finished = true;
    changed.SignalAll();
  };
  std::thread grpc([&] {
    int next_message = 1;
    while (true) {
      {
        MutexLock lock(&mutex);
        while (!finished && reads_started <= delivered) changed.Wait(&mutex);
        if (finished) return;
        ++delivered;
      }
      if (next_message > kMessages) {
        act(flow.Closed());
        return;
      }
      buffer = next_message++;
      buffer_held = true;
      flow.Read();
      const int copy = buffer;  // the job manager's copy
      {
        MutexLock lock(&mutex);
        handed_on.push_back(copy);
        with_store.push_back(copy);
        changed.SignalAll();
      }
      buffer_held = false;
      act(flow.HandedOn());
    }
  });
  std::thread writer([&] {
    while (true) {
      {
        MutexLock lock(&mutex);
        while (!finished && with_store.empty()) changed.Wait(&mutex);
        if (with_store.empty()) return;
        with_store.pop_front();
      }
      act(flow.Stored(absl::OkStatus()));
    }
  });
  act(flow.Start());
  grpc.join();
  writer.join();
  EXPECT_TRUE(finished);
  EXPECT_EQ(violations.load(), 0);
  ASSERT_EQ(handed_on.size(), static_cast<size_t>(kMessages));
  for (int i = 0; i < kMessages; ++i) ASSERT_EQ(handed_on[i], i + 1);
}

}  // namespace
}  // namespace mtrain
