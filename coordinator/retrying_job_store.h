// The job manager's view of the JobStore when the state dir may refuse writes (a full disk,
// an I/O error, a database another process holds locked): the state the manager decided
// stays authoritative in memory, and the store is caught up when writes succeed again.
//
// Without it, a write the store refused (SQLITE_FULL) left the manager's in-memory state
// and the stored state disagreeing: a failed generation whose "-> PENDING" transition was
// refused stayed RUNNING in the store, which is what admission reads, so the job sat at
// its step with no process until the coordinator restarted.
//
// How: a write (Transition, SetPlacement, RecordStep, AppendEvent) goes straight to the
// store while the job has nothing queued. If the store refuses it for a reason other than
// the request itself (NOT_FOUND, INVALID_ARGUMENT, a forbidden transition), the write is
// queued for its job, applied to an in-memory copy of the job's row, counted (metrics) and
// reported as done; later writes of that job queue behind it, so the store sees them in
// order. Reads (GetJob, ListJobs, Events, Steps) return the store's rows with the queued
// writes applied, and a job with queued writes says so in JobStatus.message. Flush()
// retries the queues, oldest write first, with exponential backoff; a job's queue that
// drains records a "state_dir_recovered" event (and the "state_dir_write_failed" event
// queued first, with the first error, lands then too).
//
// Queued writes live in this process only: a coordinator that stops before they land
// restarts from the older stored state, which is consistent (each write was one
// transaction) and which recovery already handles (a job stored RUNNING is queued again).
//
// Bounds: state writes (Transition, SetPlacement) are never dropped (a handful per
// generation); queued events and step rows beyond kMaxQueuedRecordsPerJob are dropped,
// oldest first, and the recovery event says how many.
//
//   RetryingJobStore store(&sqlite_store, clock, metrics);
//   RETURN_IF_ERROR(store.Transition(id, JOB_STATE_PENDING, "restart 1", now_ms));  // OK even
//   store.Flush();  // on a timer, outside the caller's locks          // on a full disk
//
// Thread-safe. CreateJob is passed through: a job that cannot be stored is refused to its
// submitter (RESOURCE_EXHAUSTED on a full disk) rather than kept in memory only.
#ifndef MTRAIN_COORDINATOR_RETRYING_JOB_STORE_H_
#define MTRAIN_COORDINATOR_RETRYING_JOB_STORE_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/mutex.h"
#include "coordinator/coordinator_metrics.h"
#include "coordinator/job_store.h"
#include "proto/coordinator.pb.h"

namespace mtrain {

// Retry backoff: the first retry after kStoreRetryInitialBackoff, doubling up to
// kStoreRetryMaxBackoff. A full disk is freed by a person, so seconds between tries cost
// nothing, while a retry storm of failing fsyncs would load a machine already in trouble.
inline constexpr absl::Duration kStoreRetryInitialBackoff = absl::Milliseconds(200);
inline constexpr absl::Duration kStoreRetryMaxBackoff = absl::Seconds(5);
// Queued events and step rows kept per job while the store refuses writes (about 1 KB
// each): enough for minutes of a job's history, bounded for a disk that stays full.
inline constexpr int kMaxQueuedRecordsPerJob = 2000;

class RetryingJobStore {
 public:
  // `store` and `clock` must outlive this object; `metrics` may be null.
  RetryingJobStore(JobStore* store, const Clock* clock, CoordinatorMetrics* metrics,
                   int max_queued_records_per_job = kMaxQueuedRecordsPerJob);

  // Passed through (see JobStore).
  absl::StatusOr<std::string> CreateJob(const JobSpec& spec, int64_t now_ms);

  // JobStore's reads, with queued writes applied.
  absl::StatusOr<JobStatus> GetJob(const std::string& job_id) const;
  absl::StatusOr<std::vector<JobStatus>> ListJobs() const;
  // A page as JobStore gives it, with each job holding queued writes listed as they leave
  // it: such a job leaves a page whose filter its stored row matches but its queued state
  // does not, and joins one it now matches (admission reads PENDING jobs this way: a job
  // whose "-> PENDING" is queued must still be placed).
  absl::StatusOr<JobListPage> ListJobs(const JobListQuery& query) const;
  absl::StatusOr<std::vector<JobEvent>> Events(const std::string& job_id) const;
  // A page of stored events; the last page ends with the job's queued events.
  absl::StatusOr<JobEventPage> Events(const std::string& job_id, int64_t after_event,
                                      int64_t max_events, int64_t max_bytes) const;
  // Passed through (see JobStore). DeleteJob also forgets the job's queued writes (a job
  // whose end is still queued has not ended in the store, which refuses it).
  absl::Status DeleteJob(const std::string& job_id);
  absl::StatusOr<std::vector<std::string>> JobsEndedBy(int64_t unix_ms, int64_t limit) const;
  absl::StatusOr<std::vector<StepMetrics>> Steps(const std::string& job_id, int64_t after_step = 0,
                                                 int64_t limit = -1) const;

  // JobStore's writes. Errors only for the request itself (NOT_FOUND, INVALID_ARGUMENT, a
  // transition the state machine forbids: FAILED_PRECONDITION); a write the store could
  // not make is queued and OK is returned. (When the job's row cannot even be read, the
  // store's error is returned.)
  absl::Status Transition(const std::string& job_id, JobState to, const std::string& message,
                          int64_t now_ms);
  absl::Status SetPlacement(const std::string& job_id, int64_t generation, int32_t restarts,
                            const std::vector<std::string>& workers, int64_t now_ms);
  absl::Status RecordStep(const std::string& job_id, const StepMetrics& metrics, int64_t now_ms);
  // RecordStep for many rows, by row: the rows of jobs without queued writes go to the
  // store in one transaction (JobStore::RecordSteps), and a row the storage refused is
  // queued as RecordStep would queue it.
  std::vector<absl::Status> RecordSteps(const std::vector<StepRow>& rows, int64_t now_ms);
  absl::Status AppendEvent(const std::string& job_id, const std::string& kind,
                           const std::string& message, int64_t now_ms);

  // Retries queued writes whose backoff has passed, oldest first per job; stops at a job's
  // first write that fails again. Returns the jobs whose queues drained (their stored state
  // changed). Cheap when nothing is queued.
  std::vector<std::string> Flush();

  // Writes queued over all jobs.
  int64_t QueuedWrites() const;

 private:
  // One write the store refused, kept to be made again in order.
  struct QueuedWrite {
    std::function<absl::Status(JobStore*)> apply;
    bool record = false;  // an event or a step row: may be dropped under the bound
    JobEvent event;       // set for events (Transition's "state" event too), for Events()
    bool has_step = false;
    StepMetrics step;  // set for RecordStep, for Steps()
  };
  // A job whose writes are queued.
  struct Backlog {
    JobStatus row;  // the job as the queued writes leave it
    std::deque<QueuedWrite> writes;
    absl::Status first_error;
    absl::Time first_failure;
    absl::Time next_try;
    absl::Duration backoff = kStoreRetryInitialBackoff;
    int64_t failed_attempts = 0;
    int64_t queued_records = 0;  // entries of `writes` with `record` set
    int64_t dropped_records = 0;
  };

  // Whether `status` (from a store write) is about the request rather than the storage.
  static bool IsRequestError(const absl::Status& status);

  // Makes the write: at once if the job has no backlog and the store takes
  // it, else queued (creating the backlog from the stored row). `mutate` applies the write
  // to a row; `check` (may be empty) refuses a request against the current row.
  absl::Status WriteLocked(const std::string& job_id, QueuedWrite write,
                           const std::function<absl::Status(const JobStatus&)>& check,
                           const std::function<void(JobStatus*, QueuedWrite*)>& mutate)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // WriteLocked's second half: `write`, which the store refused with `written`, becomes the
  // first of a new backlog of its job.
  absl::Status QueueRefusedLocked(const std::string& job_id, QueuedWrite write,
                                  const absl::Status& written,
                                  const std::function<absl::Status(const JobStatus&)>& check,
                                  const std::function<void(JobStatus*, QueuedWrite*)>& mutate)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // One step row: queued behind its job's backlog, written alone, or (`refused` set: the
  // store refused it in a batch) queued as a new backlog.
  absl::Status RecordStepLocked(const StepRow& row, int64_t now_ms, const absl::Status* refused)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  void NoteFailureLocked(Backlog* backlog, const absl::Status& status)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  void EnqueueLocked(Backlog* backlog, QueuedWrite write) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // JobStatus.message of a job with a backlog: what it would be, plus why it is not saved.
  static void DescribeBacklog(const Backlog& backlog, JobStatus* row);
  void PublishLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);

  JobStore* const store_;
  const Clock* const clock_;
  CoordinatorMetrics* const metrics_;
  const int max_queued_records_;

  mutable Mutex mutex_;
  std::map<std::string, Backlog> backlogs_ ABSL_GUARDED_BY(mutex_);  // by job
};

}  // namespace mtrain

#endif  // MTRAIN_COORDINATOR_RETRYING_JOB_STORE_H_
