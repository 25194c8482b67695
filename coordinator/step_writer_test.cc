#include "coordinator/step_writer.h"

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/mutex.h"
#include "common/notification.h"
#include "gtest/gtest.h"

namespace mtrain {
namespace {

StepRow Row(const std::string& job, int64_t step) {
  StepRow row;
  row.job_id = job;
  row.metrics.set_step(step);
  return row;
}

// A store whose first batch waits at a gate, so that the rows written meanwhile queue.
class GatedStore {
 public:
  std::vector<absl::Status> Write(const std::vector<StepRow>& rows) {
    {
      MutexLock lock(&mutex_);
      batches_.push_back(rows.size());
    }
    if (first_.exchange(false)) gate_.WaitForNotification();
    std::vector<absl::Status> statuses;
    for (const StepRow& row : rows) {
      statuses.push_back(row.job_id == "gone" ? absl::NotFoundError("gone") : absl::OkStatus());
    }
    return statuses;
  }
  void Open() { gate_.Notify(); }
  std::vector<size_t> batches() const {
    MutexLock lock(&mutex_);
    return batches_;
  }

 private:
  std::atomic<bool> first_{true};
  Notification gate_;
  mutable Mutex mutex_;
  std::vector<size_t> batches_ ABSL_GUARDED_BY(mutex_);
};

TEST(StepWriterTest, RowsThatArriveDuringAWriteShareTheNextTransaction) {
  GatedStore store;
  StepWriter writer([&](const std::vector<StepRow>& rows) { return store.Write(rows); });
  Mutex mutex;
  std::vector<std::string> done;  // in the order the callbacks ran
  absl::Status gone_status;
  const auto record = [&](std::string what) {
    return [&, what](absl::Status status) {
      MutexLock lock(&mutex);
      if (what == "gone-1") gone_status = status;
      done.push_back(status.ok() ? what : what + " " + std::string(status.message()));
    };
  };
  writer.Write(Row("job-1", 1), record("job-1-1"));
  // The first batch is now held at the gate (once the writer took it).
  for (int i = 0; i < 200 && store.batches().empty(); ++i) absl::SleepFor(absl::Milliseconds(5));
  ASSERT_EQ(store.batches().size(), 1u);
  writer.Write(Row("job-2", 1), record("job-2-1"));
  writer.Write(Row("gone", 1), record("gone-1"));
  writer.Write(Row("job-1", 2), record("job-1-2"));
  {
    MutexLock lock(&mutex);
    EXPECT_TRUE(done.empty()) << "nothing is acknowledged before it is stored";
  }
  store.Open();
  for (int i = 0; i < 400; ++i) {
    {
      MutexLock lock(&mutex);
      if (done.size() == 4) break;
    }
    absl::SleepFor(absl::Milliseconds(5));
  }
  MutexLock lock(&mutex);
  EXPECT_EQ(done, (std::vector<std::string>{"job-1-1", "job-2-1", "gone-1 gone", "job-1-2"}));
  EXPECT_EQ(gone_status.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(store.batches(), (std::vector<size_t>{1, 3}));
  EXPECT_EQ(writer.counts().batches, 2);
  EXPECT_EQ(writer.counts().rows, 4);
}

TEST(StepWriterTest, AtMostOneTransactionATick) {
  // Rows written every millisecond for 600 ms with a 100 ms tick: about six transactions,
  // never one per row, and each row acknowledged.
  std::atomic<int> transactions{0};
  std::atomic<int> acknowledged{0};
  {
    StepWriter writer(
        [&](const std::vector<StepRow>& rows) {
          ++transactions;
          return std::vector<absl::Status>(rows.size());
        },
        absl::Milliseconds(100));
    for (int step = 1; step <= 600; ++step) {
      writer.Write(Row("job-1", step), [&](absl::Status) { ++acknowledged; });
      absl::SleepFor(absl::Milliseconds(1));
    }
  }
  EXPECT_EQ(acknowledged.load(), 600);
  EXPECT_GE(transactions.load(), 3);
  EXPECT_LE(transactions.load(), 12);
}

TEST(StepWriterTest, StoppingStoresWhatIsQueued) {
  std::atomic<int> stored{0};
  std::atomic<int> acknowledged{0};
  {
    StepWriter writer([&](const std::vector<StepRow>& rows) {
      absl::SleepFor(absl::Milliseconds(20));
      stored += static_cast<int>(rows.size());
      return std::vector<absl::Status>(rows.size());
    });
    for (int step = 1; step <= 50; ++step) {
      writer.Write(Row("job-1", step), [&](absl::Status status) {
        EXPECT_TRUE(status.ok());
        ++acknowledged;
      });
    }
  }
  EXPECT_EQ(stored.load(), 50);
  EXPECT_EQ(acknowledged.load(), 50);
}

TEST(StepWriterTest, AStoreThatAnswersForTooFewRowsFailsTheRest) {
  StepWriter writer([](const std::vector<StepRow>&) { return std::vector<absl::Status>{}; });
  Notification done;
  absl::Status outcome;
  writer.Write(Row("job-1", 1), [&](absl::Status status) {
    outcome = status;
    done.Notify();
  });
  done.WaitForNotification();
  EXPECT_EQ(outcome.code(), absl::StatusCode::kInternal);
}

}  // namespace
}  // namespace mtrain
