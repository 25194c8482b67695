// Stores the loss-reporting ranks' step rows in batches: at most one transaction (one
// fsync) per `interval` (a tick, kStepWriteInterval), holding every row that arrived since
// the previous one, on a thread of its own, so neither the job manager's mutex nor a gRPC
// thread ever waits for a disk, and 100 jobs stepping every second cost ten fsyncs a
// second, not a hundred (issue 37). Durability is unchanged: a row's `done` runs only once its
// transaction has committed (or the store has queued it, RetryingJobStore), and the metrics stream
// that sent it reads its next message only then, so a step acknowledged is a step stored
// and a job's steps are stored in order.
//
//   StepWriter writer([&](const std::vector<StepRow>& rows) {
//     return store.RecordSteps(rows, NowMs());
//   });
//   writer.Write({job_id, metrics}, [](absl::Status stored) { ... });
//
// Thread-safe. `done` runs on the writer's thread, without the writer's lock held.
#ifndef MTRAIN_COORDINATOR_STEP_WRITER_H_
#define MTRAIN_COORDINATOR_STEP_WRITER_H_

#include <cstdint>
#include <functional>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/mutex.h"
#include "coordinator/job_store.h"

namespace mtrain {

// The coordinator's tick for step rows: a row waits at most this long before its
// transaction starts. Ranks do not wait for it (their stream Writes complete when gRPC has
// the message; only the next read on the coordinator's side waits).
inline constexpr absl::Duration kStepWriteInterval = absl::Milliseconds(100);

class StepWriter {
 public:
  // Stores a batch and returns the statuses by row (RetryingJobStore::RecordSteps).
  using WriteBatch = std::function<std::vector<absl::Status>(const std::vector<StepRow>&)>;
  using Done = std::function<void(absl::Status)>;

  explicit StepWriter(WriteBatch write, absl::Duration interval = kStepWriteInterval);
  // Writes what is queued (each `done` runs), then stops the thread.
  ~StepWriter();
  StepWriter(const StepWriter&) = delete;
  StepWriter& operator=(const StepWriter&) = delete;

  // Queues `row`; `done` gets its status once it is stored.
  void Write(StepRow row, Done done);

  struct Counts {
    int64_t batches = 0;  // transactions
    int64_t rows = 0;
  };
  Counts counts() const;

 private:
  void Run();

  const WriteBatch write_;
  const absl::Duration interval_;
  mutable Mutex mutex_;
  CondVar queued_;
  std::vector<std::pair<StepRow, Done>> queue_ ABSL_GUARDED_BY(mutex_);
  bool stopping_ ABSL_GUARDED_BY(mutex_) = false;
  Counts counts_ ABSL_GUARDED_BY(mutex_);
  std::thread thread_;  // last: starts once everything above exists
};

}  // namespace mtrain

#endif  // MTRAIN_COORDINATOR_STEP_WRITER_H_
