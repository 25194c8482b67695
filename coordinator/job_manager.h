// The coordinator's job logic, independent of gRPC: admission, placement, generations,
// the commands workers receive with their heartbeats, progress and results from ranks,
// failure handling and cancellation. Durable state lives in the JobStore; time comes
// from an injected Clock, so every timeout is testable without sleeping.
//
// One job, one generation at a time:
//   Submit -> PENDING. Tick() admits jobs in submission order (the oldest waiting job
//   first; a job that does not fit blocks the ones behind it, so big jobs are not
//   starved): it picks free alive workers, keeping each tensor-parallel group on one host
//   (the policy is plan/placement.h), plans every rank (plan/assignment_plan.h) with
//   generation + 1, and queues an `assign` command per worker -> PLACING. The first step
//   reported -> RUNNING. Every rank reporting OK -> SUCCEEDED.
//   A rank reporting an error, a worker dying or restarting, or a worker found idle that
//   should be running its rank, fails the generation: its surviving workers are told to
//   abort, its rendezvous keys are dropped (a placement opens its generation's prefix in
//   the RendezvousStore; every end closes it), and the job is re-placed while
//   train.max_restarts allows (-> PLACING, or PENDING until workers are free), else FAILED.
//   Cancel aborts the generation -> CANCELLED.
//   Every placement resumes from the newest checkpoint in the CheckpointStore that passes
//   its checksums (damaged ones are moved aside, with an event); a job with
//   train.init_from waits in PENDING until its initial weights (step 0) are uploaded.
//   A coordinator that restarts finds jobs it was running in the store: it re-queues them
//   (their workers re-register and are told to abort what they ran).
//
// The manager's decisions hold even when the state dir refuses writes (a full disk): the
// store is reached through a RetryingJobStore, which keeps refused writes in memory (reads
// see them), retries them from Tick() and says so in the job's status, an event and the
// mtrain_state_dir_* metrics. So a failed generation always leaves RUNNING. A generation
// that failed because the state dir could not store its checkpoint spends no restart:
// the job waits in PENDING ("waiting for room in the state dir") until the checkpoint
// store's file system has at least the bytes that checkpoint had stored when it failed,
// then is placed as usual.
//
// A write the RetryingJobStore cannot hold either (the store refuses the request, or
// cannot read the job) is never dropped: it is logged, counted
// (mtrain_coordinator_store_write_failures_total{operation}), and a lost state change is
// not applied in memory: the operation stops there and returns the error (see
// TransitionLocked). Lost events are only logged and counted.
//
// Thread-safe: every method may be called from any gRPC thread.
#ifndef MTRAIN_COORDINATOR_JOB_MANAGER_H_
#define MTRAIN_COORDINATOR_JOB_MANAGER_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/mutex.h"
#include "coordinator/checkpoint_store.h"
#include "coordinator/coordinator_metrics.h"
#include "coordinator/job_store.h"
#include "coordinator/job_watchers.h"
#include "coordinator/rendezvous_store.h"
#include "coordinator/retrying_job_store.h"
#include "coordinator/step_writer.h"
#include "coordinator/worker_registry.h"
#include "plan/assignment_plan.h"
#include "plan/layout_search.h"
#include "proto/assignment.pb.h"
#include "proto/coordinator.pb.h"

namespace mtrain {

struct JobManagerOptions {
  // A worker that heartbeats IDLE this long after being given a rank it has not finished
  // lost its rank (its training process died without reporting).
  absl::Duration lost_rank_grace = absl::Seconds(10);
  // A job waiting to restart after a failure gets this long for a replacement worker;
  // then, if parallel.min_data allows, it runs with fewer data-parallel replicas (the
  // same global batch, more microbatches per replica).
  absl::Duration shrink_grace = absl::Seconds(30);
  // Handed to every rank: bound on its rendezvous and on each collective or message.
  absl::Duration collective_timeout = absl::Minutes(5);
  // A rank whose own worker daemon reports its process stopped by a signal (SIGSTOP) this
  // long fails its generation at once, instead of its peers waiting out
  // collective_timeout and then naming it (worker/parallel/group_watchdog.h). Safe: a
  // stopped process makes no progress and its daemon sees it directly (a debugger's stop
  // is not reported), so no healthy rank is blamed; the grace lets a brief stop pass.
  // Applies only when shorter than collective_timeout (else the peers' timeout comes
  // first, with the watchdog's verdict). Hangs of a running process (a deadlock, a
  // stuck device) still end at collective_timeout: from outside, a rank busy in a long
  // step looks the same.
  absl::Duration stopped_rank_grace = absl::Seconds(10);
  // Ended jobs are deleted (with their events, steps and checkpoints) by Tick once they
  // ended this long ago. Infinite (the default) keeps every job until `trainctl delete`:
  // a job's history and trained weights are the user's, not ours to drop unasked.
  absl::Duration job_retention = absl::InfiniteDuration();
  // Admission is first come, first served with backfill: a job behind the oldest waiting
  // job of its kind of worker (the head) starts ahead of it if it fits, until the head has
  // waited this long; then nothing behind the head starts until it fits (so it cannot
  // starve). Zero: strict first come, first served.
  absl::Duration backfill_window = absl::Minutes(5);
  // The step writer's tick (step_writer.h): at most one transaction of step rows per tick.
  // A job's stored step trails its ranks by up to this much.
  absl::Duration step_write_interval = kStepWriteInterval;
};

// Ended jobs Tick deletes for retention at most per call, so that a backlog (a retention
// shortened across a restart) does not hold the manager's lock for long at once.
inline constexpr int64_t kMaxExpiredJobsPerTick = 100;

class JobManager {
 public:
  // All pointers must outlive the manager; `metrics` and `checkpoints` may be null (no
  // checkpoints: every placement starts from step 0). Re-queues jobs a previous
  // coordinator left PLACING or RUNNING; fails, with the reason, unfinished jobs whose
  // stored spec no longer validates (never plans them).
  static absl::StatusOr<std::unique_ptr<JobManager>> Create(
      const Clock* clock, WorkerRegistry* workers, JobStore* store, RendezvousStore* rendezvous,
      CoordinatorMetrics* metrics, JobManagerOptions options,
      CheckpointStore* checkpoints = nullptr);
  ~JobManager();

  // Validates (defaults applied) and stores a PENDING job. INVALID_ARGUMENT naming the
  // field and rule, or when the job needs more workers than are registered and alive, or
  // more memory per rank (rank_memory_estimate.h) than the largest of them has.
  absl::StatusOr<std::string> Submit(const JobSpec& spec);
  // NOT_FOUND for an unknown job.
  absl::StatusOr<JobStatus> Get(const std::string& job_id) const;
  absl::StatusOr<std::vector<JobStatus>> List() const;
  // One page of jobs (JobStore::ListJobs). INVALID_ARGUMENT for a state outside the enum.
  absl::StatusOr<JobListPage> List(const JobListQuery& query) const;
  // NOT_FOUND; FAILED_PRECONDITION if the job already ended.
  absl::Status Cancel(const std::string& job_id);
  // Deletes an ended job: its record, events, steps, metrics and checkpoints. NOT_FOUND;
  // FAILED_PRECONDITION if it has not ended (cancel it first); INTERNAL naming the path
  // if its checkpoints could not be removed (the job itself is gone by then).
  absl::Status Delete(const std::string& job_id);

  // Blocks until the job's status differs from version `seen` (0 = return at once) or
  // `timeout` passes; returns the status and its version. NOT_FOUND for an unknown job.
  // The callback form of WaitForChange for streams that hold no thread: the job's watchers
  // are called (on JobWatchers' thread, no lock held) after each change; they read the
  // job with WaitForChange(job_id, seen, zero).
  JobWatchers& watchers() { return *watchers_; }
  absl::StatusOr<std::pair<JobStatus, int64_t>> WaitForChange(const std::string& job_id,
                                                              int64_t seen, absl::Duration timeout);

  // The job's event log, oldest first. NOT_FOUND for an unknown job.
  absl::StatusOr<std::vector<JobEvent>> Events(const std::string& job_id) const;
  // One page of it (JobStore::Events).
  absl::StatusOr<JobEventPage> Events(const std::string& job_id, int64_t after_event,
                                      int64_t max_events, int64_t max_bytes) const;

  // The recorded per-step metrics of the job's reporting rank, in step order: those after
  // step `after_step`, at most `limit` (all when negative). NOT_FOUND for an unknown job.
  absl::StatusOr<std::vector<StepMetrics>> Steps(const std::string& job_id, int64_t after_step = 0,
                                                 int64_t limit = -1) const;

  // A worker heartbeat (already accepted by the registry): the commands for it.
  std::vector<WorkerCommand> OnHeartbeat(const HeartbeatRequest& request);
  // A worker registered again under a new incarnation: what it ran is lost.
  void OnWorkerRestarted(const std::string& worker_id);
  // A rank's step. NOT_FOUND (unknown job); FAILED_PRECONDITION (stale generation: the
  // rank should stop). The loss-reporting rank's row is stored by the step writer, in a
  // batch with other jobs' rows (step_writer.h), off the manager's mutex and the caller's
  // thread: `done` gets the outcome once the row is stored (at once for other ranks and
  // refusals), on the writer's thread or the caller's.
  void OnMetrics(const StepMetrics& metrics, std::function<void(absl::Status)> done);
  // The same, waiting for the outcome.
  absl::Status OnMetrics(const StepMetrics& metrics);
  // Step rows stored so far, and in how many transactions.
  StepWriter::Counts StepWrites() const { return step_writer_->counts(); }
  // A rank's end. Same errors as OnMetrics.
  absl::Status OnRankResult(const RankResult& result);

  // Whether `generation` may upload a checkpoint of `step` now: the live generation of a
  // running job, or generation 0 with step 0 for a PENDING job whose train.init_from
  // weights are awaited. NOT_FOUND (job); FAILED_PRECONDITION otherwise.
  absl::Status CheckCheckpointUpload(const std::string& job_id, int64_t generation,
                                     int64_t step) const;
  // A checkpoint was committed: logged as an event; initial weights let the job start.
  void OnCheckpointCommitted(const std::string& job_id, const CheckpointInfo& info);

  // Admission, placement, failure detection and retention; call periodically (and it is
  // called after events that may let a job start).
  void Tick();

 private:
  // A job with a live generation (PLACING or RUNNING).
  struct ActiveJob {
    JobSpec spec;
    int64_t generation = 0;
    int restarts = 0;
    // The generation's shared plan: every rank's Assignment comes out of it when the
    // rank's worker collects it, so a generation costs O(pipeline stages) here, not
    // O(world) Assignments.
    std::shared_ptr<const GenerationPlan> plan;
    std::vector<std::string> workers;  // by global rank
    std::set<int> finished;            // ranks that reported OK
    bool running = false;              // a step was reported
    absl::Time placed_at;
    // The registry's removal count (WorkerRegistry::Census::removals) when every rank's
    // worker was last found registered; -1 before the first look.
    int64_t checked_removals = -1;
  };

  JobManager(const Clock* clock, WorkerRegistry* workers, JobStore* store,
             RendezvousStore* rendezvous, CoordinatorMetrics* metrics, JobManagerOptions options,
             CheckpointStore* checkpoints);
  absl::Status Recover();
  // INVALID_ARGUMENT naming both numbers when the spec's per-rank memory estimate exceeds
  // every live worker of `kinds` (workers reporting 0 bytes are not counted).
  // parallel.auto: the layouts the cost model predicts for `spec` on `workers` (their
  // measured profiles; the first eligible kind that has any), fastest first. With
  // `keep_micro_batch`, only layouts with the spec's micro_batch_size: a running job keeps
  // it, since dropout masks are drawn per microbatch and its losses must continue.
  static absl::StatusOr<LayoutSearch> PlanOnWorkers(const JobSpec& spec,
                                                    const std::vector<WorkerStatus>& workers,
                                                    bool keep_micro_batch = false);
  absl::Status CheckMemoryOfLiveWorkers(const JobSpec& spec,
                                        const std::vector<DeviceKind>& kinds) const;

  void AdmitLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // parallel.replan_on_join_gain: called when a checkpoint of step `step` of the job's live
  // generation has landed. When the layout the planner picks for the job's workers plus
  // the free ones is predicted faster than the running one by at least the gain, ends the
  // generation (no restart spent) and records that layout for the next placement, which
  // resumes from this checkpoint.
  void MaybeGrowLocked(const std::string& job_id, int64_t step)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // Places `job_id` if enough workers are free; false (nothing changed) otherwise. With
  // `allow_shrink`, tries fewer data-parallel replicas (down to min_data) when the full
  // job does not fit. An error when the store refused the placement (nothing applied in
  // memory; the job stays where the store has it).
  absl::StatusOr<bool> TryPlaceLocked(const std::string& job_id, const JobSpec& spec,
                                      int64_t generation, int restarts, bool allow_shrink = false)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // A job that waits for something other than workers says so in its message (not
  // stored: it holds only while the wait lasts).
  void ExplainWaitLocked(JobStatus* job) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // Places exactly `spec` (already shrunk, if it is); false if the workers are not there.
  // Errors as TryPlaceLocked.
  absl::StatusOr<bool> PlaceLocked(const std::string& job_id, const JobSpec& spec,
                                   int64_t generation, int restarts)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // Ends the job's generation after a failure and restarts it within its restart budget;
  // `retry` false (a failure the same spec repeats anywhere) fails the job at once.
  // `cause` is the failing rank's status code, where a rank reported one: DATA_LOSS (a
  // damaged checkpoint file) has every checkpoint file read again before the restart.
  // The generation always ends in memory; an error says the store refused the job's next
  // state (logged and counted already), which stops the restart there.
  absl::Status FailGenerationLocked(const std::string& job_id, const std::string& reason,
                                    bool retry = true,
                                    absl::StatusCode cause = absl::StatusCode::kUnknown)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  void EndGenerationLocked(const std::string& job_id, const std::string& reason)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // The store writes of job state. A failure (the RetryingJobStore holds writes a full
  // disk refused, so these are refusals: the store contradicts the manager or cannot read
  // the job) is logged, counted and returned: the caller does not apply the change.
  absl::Status TransitionLocked(const std::string& job_id, JobState to, const std::string& message)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  absl::Status SetPlacementLocked(const std::string& job_id, int64_t generation, int restarts,
                                  const std::vector<std::string>& workers)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // Appends an event to the job's log. Best effort: an event records a decision already
  // taken, and losing the record (logged and counted) must not undo the decision.
  void AppendEventLocked(const std::string& job_id, const std::string& kind,
                         const std::string& message) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // Logs a lost store write on stderr and counts it by `operation` (one of
  // kStoreWriteOperations).
  void NoteStoreWriteFailure(const char* operation, const std::string& job_id,
                             const absl::Status& status) const;
  // Logs a failed read of `what` whose caller goes on without it (each caller says why).
  void LogStoreReadFailure(const std::string& what, const absl::Status& status) const;
  // Deletes the job's record and in-memory traces; its checkpoints are the caller's to
  // remove, outside the lock (DeleteCheckpoints).
  absl::Status DeleteLocked(const std::string& job_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  absl::Status DeleteCheckpoints(const std::string& job_id);
  // Deletes ended jobs older than options_.job_retention.
  void ExpireEndedJobs();
  void DetectLostRanksLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // Fails the generation of a rank its daemon reports stopped (see stopped_rank_grace).
  void FailStoppedRankLocked(const HeartbeatRequest& request) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // Whether a job with train.init_from still lacks its uploaded initial weights.
  bool AwaitsInitialWeightsLocked(const JobStatus& job) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // The checkpoint a new generation resumes from: the newest usable one no newer than the
  // job's last recorded step (damaged ones reported as events).
  std::optional<CheckpointInfo> ResumePointLocked(const std::string& job_id)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  std::vector<std::string> FreeWorkersLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // Idle, alive and not holding a rank.
  bool IsFreeLocked(const WorkerStatus& w) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // The registry's workers: AdmitLocked's snapshot during admission, else read into
  // `fetched`.
  const std::vector<WorkerStatus>& WorkersLocked(std::vector<WorkerStatus>* fetched) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  void BumpLocked(const std::string& job_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // OnMetrics' checks and bookkeeping under the mutex (generation, rank, the RUNNING
  // transition, the engine event, Prometheus); true if this rank's steps are the job's
  // stored ones.
  // The job's status without its workers' list (for refusals that name its state).
  absl::StatusOr<JobStatus> JobSummaryLocked(const std::string& job_id) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  absl::StatusOr<bool> ObserveMetricsLocked(const StepMetrics& metrics)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  int64_t NowMs() const;

  const Clock* const clock_;
  WorkerRegistry* const workers_;
  // Every read and write of job state goes through it (never the JobStore directly), so
  // that writes the state dir refused are seen, in order, by every reader.
  const std::unique_ptr<RetryingJobStore> store_;
  RendezvousStore* const rendezvous_;
  CoordinatorMetrics* const metrics_;
  const JobManagerOptions options_;
  CheckpointStore* const checkpoints_;

  mutable Mutex mutex_;
  CondVar changed_;  // signalled by BumpLocked and when a job is deleted
  std::map<std::string, ActiveJob> active_ ABSL_GUARDED_BY(mutex_);
  // A command waiting for a worker's next heartbeat. An assignment is kept as its plan and
  // rank and made into an Assignment only then, outside the mutex (OnHeartbeat).
  struct QueuedCommand {
    WorkerCommand command;                       // when plan is null
    std::shared_ptr<const GenerationPlan> plan;  // an assignment of rank `rank`
    int rank = -1;
  };
  // By worker.
  std::map<std::string, std::vector<QueuedCommand>> outbox_ ABSL_GUARDED_BY(mutex_);
  // Busy worker -> job.
  std::map<std::string, std::string> worker_job_ ABSL_GUARDED_BY(mutex_);
  // Assigned worker -> when it was first seen idle.
  std::map<std::string, absl::Time> idle_since_ ABSL_GUARDED_BY(mutex_);
  // Job -> change count (WaitForChange).
  std::map<std::string, int64_t> versions_ ABSL_GUARDED_BY(mutex_);
  // Failed job waiting for workers -> since when.
  std::map<std::string, absl::Time> restart_waiting_since_ ABSL_GUARDED_BY(mutex_);
  // WorkerRegistry::pauses().count already reported.
  int64_t pauses_seen_ ABSL_GUARDED_BY(mutex_) = 0;
  // Jobs whose live generation lost a checkpoint to the state dir (a full disk): the
  // step, and the bytes that must be free before the job is placed again.
  struct RoomWanted {
    int64_t step = 0;
    uint64_t bytes = 0;
  };
  std::map<std::string, RoomWanted> room_wanted_ ABSL_GUARDED_BY(mutex_);
  // Jobs stopped to grow onto joined workers (MaybeGrowLocked): the layout to place next,
  // and since when. Placed by AdmitLocked once the job's own workers have stopped their
  // ranks; after shrink_grace without the workers the job is placed as it was.
  struct Growth {
    JobSpec spec;
    absl::Time since;
  };
  std::map<std::string, Growth> growth_ ABSL_GUARDED_BY(mutex_);
  // Each kind's waiting head job (AdmitLocked) -> since when it has been the head.
  std::map<std::string, absl::Time> head_since_ ABSL_GUARDED_BY(mutex_);
  // Set while AdmitLocked runs: its one snapshot of the registry.
  const std::vector<WorkerStatus>* admission_workers_ ABSL_GUARDED_BY(mutex_) = nullptr;
  std::unique_ptr<JobWatchers> watchers_ = std::make_unique<JobWatchers>();
  // Last member: destroyed first, storing what is queued while everything its callbacks
  // touch still exists.
  std::unique_ptr<StepWriter> step_writer_;
};

}  // namespace mtrain

#endif  // MTRAIN_COORDINATOR_JOB_MANAGER_H_
