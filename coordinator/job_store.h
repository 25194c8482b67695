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
// Thread-safe (one internal mutex; SQLite calls are short). The operations are virtual so
// that tests can put a store that refuses on demand in its place, as LevelDB's tests do
// with its Env.
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

// Listing pages (ListJobs RPC, /api/jobs): the size a page has when the caller names none,
// and the most it may have; enough for a screen or a script, small enough that one page
// holds the store's lock only briefly.
inline constexpr int64_t kDefaultJobPageSize = 100;
inline constexpr int64_t kMaxJobPageSize = 1000;
// A page stops before its jobs' encoded size passes this, so it stays well inside gRPC's
// default 4 MB message limit with room for the envelope.
inline constexpr int64_t kMaxJobPageBytes = 2 << 20;
// A job whose encoded status alone passes this (a spec with megabytes of strings) is
// listed shortened (JobStatus.listing_shortened): spec reduced to its name, and the name
// and message cut to kShortenedTextBytes. GetJob still returns all of it.
inline constexpr int64_t kMaxListedJobBytes = 256 << 10;
inline constexpr size_t kShortenedTextBytes = 1024;

// Which jobs JobStore::ListJobs returns: those matching every filter, in job-number order,
// after `after_job`. The defaults list every job.
struct JobListQuery {
  // Any of these states; empty means every state.
  std::vector<JobState> states;
  // spec.name starts with this (bytes compared; an equal name matches); empty: any name.
  std::string name_prefix;
  // Only jobs numbered above this (the N of "job-N"): where the previous page ended.
  int64_t after_job = 0;
  // At most this many jobs; < 0 for no limit.
  int64_t max_jobs = -1;
  // Stop before a job that would take the page's encoded size past this (a page holds at
  // least one job); < 0 for no limit. Jobs over kMaxListedJobBytes are shortened when set.
  int64_t max_bytes = -1;
  // A job whose stored record does not parse is listed with only its id, its state and
  // why (in `message`, listing_shortened set) instead of failing the page with DATA_LOSS.
  // Listings for users set it, so one damaged row does not hide every job; the job
  // manager's own reads do not: they act on what they read.
  bool list_damaged = false;
  // Each job's workers (JobStatus.workers, one row per rank in the store). The job
  // manager's periodic reads of unfinished jobs need only ids and states: at 4,096 ranks
  // the workers were most of the coordinator's SQLite time, five times a second.
  bool with_workers = true;
};

// Event pages (ListJobEvents): a job restarting or checkpointing often collects many.
inline constexpr int64_t kDefaultEventPageSize = 1000;
inline constexpr int64_t kMaxEventPageSize = 10000;

struct JobEventPage {
  std::vector<JobEvent> events;
  // > 0 when more events may follow: ask again with after_event = next_after_event.
  int64_t next_after_event = 0;
};

struct JobListPage {
  std::vector<JobStatus> jobs;
  // > 0 when more jobs may match: query again with after_job = next_after_job.
  int64_t next_after_job = 0;
};

// One row of JobStore::RecordSteps.
struct StepRow {
  std::string job_id;
  StepMetrics metrics;
};

class JobStore {
 public:
  // Opens or creates the database (schema created or checked; a newer schema version is
  // FAILED_PRECONDITION). INVALID_ARGUMENT if the path cannot be opened; DATA_LOSS if the
  // file is not a database of ours.
  static absl::StatusOr<std::unique_ptr<JobStore>> Open(const std::string& path);
  virtual ~JobStore();

  // A new PENDING job with a fresh id "job-N" (N counts up and is never reused, across
  // restarts too); records a "submitted" event. The spec is stored as given.
  virtual absl::StatusOr<std::string> CreateJob(const JobSpec& spec, int64_t now_ms);

  // NOT_FOUND for an unknown id.
  virtual absl::StatusOr<JobStatus> GetJob(const std::string& job_id) const;
  // Every job, oldest first.
  virtual absl::StatusOr<std::vector<JobStatus>> ListJobs() const;
  // One page of the jobs `query` selects, oldest first, read in SQL through the state and
  // name indexes (never every job). INVALID_ARGUMENT for a state outside the enum.
  virtual absl::StatusOr<JobListPage> ListJobs(const JobListQuery& query) const;

  // Deletes an ended job with its events, steps and workers in one transaction; its number
  // is never handed out again. NOT_FOUND; FAILED_PRECONDITION if it has not ended.
  virtual absl::Status DeleteJob(const std::string& job_id);
  // Ended jobs whose end (JobStatus.ended_unix_ms) is at or before `unix_ms`, the longest
  // ended first, at most `limit`.
  virtual absl::StatusOr<std::vector<std::string>> JobsEndedBy(int64_t unix_ms,
                                                               int64_t limit) const;

  // Moves a job to `to`, records a "state" event "FROM -> TO: message", and for FAILED or
  // CANCELLED keeps `message` as JobStatus.message. A terminal `to` records the end time
  // (JobStatus.ended_unix_ms = now_ms). FAILED_PRECONDITION (naming both
  // states) if the state machine forbids it; NOT_FOUND for an unknown id.
  virtual absl::Status Transition(const std::string& job_id, JobState to,
                                  const std::string& message, int64_t now_ms);

  // Records the generation now placed, the restarts so far and its workers (by rank).
  virtual absl::Status SetPlacement(const std::string& job_id, int64_t generation, int32_t restarts,
                                    const std::vector<std::string>& workers, int64_t now_ms);

  // Records one step's metrics from the loss-reporting rank: the job's latest step, loss,
  // tokens/s and JobStatus.latest, and one summary row per step (a repeated step, after a
  // restart, replaces its row).
  virtual absl::Status RecordStep(const std::string& job_id, const StepMetrics& metrics,
                                  int64_t now_ms);
  // RecordStep for many rows in one transaction, so one fsync stores them all: their
  // statuses by row. A row of an unknown job is NOT_FOUND and the others are stored; a
  // failure of the database itself (a full disk) fails every row, none stored. A test
  // double without a database gets one RecordStep call per row instead.
  std::vector<absl::Status> RecordSteps(const std::vector<StepRow>& rows, int64_t now_ms);
  // The per-step rows with step > `after_step`, in step order, at most `limit` of them
  // (all when limit < 0). Steps are numbered from 1, so the defaults give every row.
  virtual absl::StatusOr<std::vector<StepMetrics>> Steps(const std::string& job_id,
                                                         int64_t after_step = 0,
                                                         int64_t limit = -1) const;

  virtual absl::Status AppendEvent(const std::string& job_id, const std::string& kind,
                                   const std::string& message, int64_t now_ms);
  // In the order appended.
  virtual absl::StatusOr<std::vector<JobEvent>> Events(const std::string& job_id) const;
  // A page of them: those appended after position `after_event` (0: from the first), at
  // most `max_events` (< 0: no limit), stopping before `max_bytes` of encoded events
  // (< 0: no limit; a page holds at least one). NOT_FOUND for an unknown job.
  virtual absl::StatusOr<JobEventPage> Events(const std::string& job_id, int64_t after_event,
                                              int64_t max_events, int64_t max_bytes) const;

 protected:
  // For test doubles (a store that fails on demand) that override every operation; such
  // an object has no database.
  JobStore();

 private:
  struct Impl;
  explicit JobStore(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace mtrain

#endif  // MTRAIN_COORDINATOR_JOB_STORE_H_
