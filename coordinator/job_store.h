// The coordinator's durable job state in one SQLite file: jobs (spec, state, generation,
// restarts, latest progress), an append-only event log per job, and a per-step metric
// summary. Everything a user can list survives the coordinator's own restart (even
// SIGKILL: each mutation is one committed transaction, journal in WAL mode).
//
// The job state machine (proto/coordinator.proto):
//
//   PENDING --> PLACING --> RUNNING --> SUCCEEDED
//      |           |           |  \--> FAILED
//      |           |           |
//      +-----------+-----------+-----> CANCELLED
//                  ^           |
//                  +-----------+  (failure with restarts left: re-place)
//   PLACING --> PENDING (workers lost before the generation started), PLACING --> FAILED,
//   PENDING --> FAILED (a job that can never be placed: its spec cannot be planned).
// Terminal states (SUCCEEDED, FAILED, CANCELLED) never change again.
//
//   ASSIGN_OR_RETURN(std::unique_ptr<JobStore> store, JobStore::Open(dir + "/jobs.sqlite"));
//   ASSIGN_OR_RETURN(std::string id, store->CreateJob(spec, now_ms));
//   RETURN_IF_ERROR(store->Transition(id, JOB_STATE_PLACING, "placed on 4 workers", now_ms));
//
// Thread-safe (one internal mutex; SQLite calls are short).
#ifndef MTRAIN_COORDINATOR_JOB_STORE_H_
#define MTRAIN_COORDINATOR_JOB_STORE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "proto/coordinator.pb.h"
#include "proto/job_spec.pb.h"

namespace mtrain {

// Whether the state machine above allows from -> to (from != to).
bool IsAllowedJobTransition(JobState from, JobState to);
bool IsTerminalJobState(JobState state);

// Events are proto/coordinator.proto's JobEvent: unix_ms, kind (e.g. "submitted",
// "state", "placed", "generation_failed"), message (human-readable detail).

class JobStore {
 public:
  // Opens or creates the database (schema created or checked; a newer schema version is
  // FAILED_PRECONDITION). INVALID_ARGUMENT if the path cannot be opened; DATA_LOSS if the
  // file is not a database of ours.
  static absl::StatusOr<std::unique_ptr<JobStore>> Open(const std::string& path);
  ~JobStore();

  // A new PENDING job with a fresh id "job-N" (N counts up and is never reused, across
  // restarts too); records a "submitted" event. The spec is stored as given.
  absl::StatusOr<std::string> CreateJob(const JobSpec& spec, int64_t now_ms);

  // NOT_FOUND for an unknown id.
  absl::StatusOr<JobStatus> GetJob(const std::string& job_id) const;
  // Every job, oldest first.
  absl::StatusOr<std::vector<JobStatus>> ListJobs() const;

  // Moves a job to `to`, records a "state" event "FROM -> TO: message", and for FAILED or
  // CANCELLED keeps `message` as JobStatus.message. FAILED_PRECONDITION (naming both
  // states) if the state machine forbids it; NOT_FOUND for an unknown id.
  absl::Status Transition(const std::string& job_id, JobState to, const std::string& message,
                          int64_t now_ms);

  // Records the generation now placed, the restarts so far and its workers (by rank).
  absl::Status SetPlacement(const std::string& job_id, int64_t generation, int32_t restarts,
                            const std::vector<std::string>& workers, int64_t now_ms);

  // Records one step's metrics from the loss-reporting rank: the job's latest step, loss,
  // tokens/s and JobStatus.latest, and one summary row per step (a repeated step, after a
  // restart, replaces its row).
  absl::Status RecordStep(const std::string& job_id, const StepMetrics& metrics, int64_t now_ms);
  // The per-step rows with step > `after_step`, in step order, at most `limit` of them
  // (all when limit < 0). Steps are numbered from 1, so the defaults give every row.
  absl::StatusOr<std::vector<StepMetrics>> Steps(const std::string& job_id, int64_t after_step = 0,
                                                 int64_t limit = -1) const;

  absl::Status AppendEvent(const std::string& job_id, const std::string& kind,
                           const std::string& message, int64_t now_ms);
  // In the order appended.
  absl::StatusOr<std::vector<JobEvent>> Events(const std::string& job_id) const;

 private:
  struct Impl;
  explicit JobStore(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace mtrain

#endif  // MTRAIN_COORDINATOR_JOB_STORE_H_
