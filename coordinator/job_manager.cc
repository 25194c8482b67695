#include "coordinator/job_manager.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/notification.h"
#include "common/status_macros.h"
#include "common/step_metrics_format.h"
#include "plan/assignment_plan.h"
#include "plan/cluster_description.h"
#include "plan/pipeline_placement.h"
#include "plan/placement.h"
#include "plan/rank_memory_estimate.h"
#include "plan/step_cost_model.h"
#include "spec/job_spec_defaults.h"
#include "spec/job_spec_validation.h"

namespace mtrain {
namespace {

bool IsFp32(const JobSpec& spec) {
  return spec.precision() == PRECISION_FP32 || spec.precision() == PRECISION_UNSPECIFIED;
}

int WorldSize(const JobSpec& spec) {
  return spec.parallel().tensor() * spec.parallel().pipeline() * spec.parallel().data();
}

// The rank whose metrics stand for the job: the first rank of the stage that computes the
// loss (the last; stage 0 under ZB-V); its tensor and data peers report the same numbers.
int ReportingRank(const JobSpec& spec) {
  const ParallelSpec& par = spec.parallel();
  return par.tensor() * par.data() * LossStage(par.pipeline(), par.schedule() == SCHEDULE_ZB_V);
}

WorkerCommand AbortOf(const std::string& job_id, int64_t generation, const std::string& why) {
  WorkerCommand command;
  AbortCommand* abort = command.mutable_abort();
  abort->set_job_id(job_id);
  abort->set_generation(generation);
  abort->set_reason(why);
  return command;
}

}  // namespace

JobManager::JobManager(const Clock* clock, WorkerRegistry* workers, JobStore* store,
                       RendezvousStore* rendezvous, CoordinatorMetrics* metrics,
                       JobManagerOptions options, CheckpointStore* checkpoints)
    : clock_(clock),
      workers_(workers),
      store_(std::make_unique<RetryingJobStore>(store, clock, metrics)),
      rendezvous_(rendezvous),
      metrics_(metrics),
      options_(options),
      checkpoints_(checkpoints),
      step_writer_(std::make_unique<StepWriter>(
          [this](const std::vector<StepRow>& rows) {
            std::vector<absl::Status> stored = store_->RecordSteps(rows, NowMs());
            if (metrics_ != nullptr) metrics_->AddStepWrites(static_cast<int64_t>(rows.size()));
            return stored;
          },
          options.step_write_interval)) {}

absl::StatusOr<std::unique_ptr<JobManager>> JobManager::Create(
    const Clock* clock, WorkerRegistry* workers, JobStore* store, RendezvousStore* rendezvous,
    CoordinatorMetrics* metrics, JobManagerOptions options, CheckpointStore* checkpoints) {
  std::unique_ptr<JobManager> manager(
      new JobManager(clock, workers, store, rendezvous, metrics, options, checkpoints));
  RETURN_IF_ERROR(manager->Recover());
  if (checkpoints != nullptr) {
    // A checkpoint the state dir could not store fails its upload, and so the rank and its
    // generation; the operator learns why here (the rank's report may be lost with it).
    JobManager* const self = manager.get();
    checkpoints->SetWriteFailureListener(
        [self](const std::string& job_id, int64_t step, const absl::Status& failure,
               uint64_t bytes_lost) {
          if (self->metrics_ != nullptr) self->metrics_->AddStateDirWriteFailure("checkpoints");
          MutexLock lock(&self->mutex_);
          if (self->active_.count(job_id) > 0) {
            RoomWanted& wanted = self->room_wanted_[job_id];
            wanted.step = step;
            wanted.bytes = std::max(wanted.bytes, bytes_lost);
          }
          self->AppendEventLocked(
              job_id, "checkpoint_write_failed",
              absl::StrCat(absl::StatusCodeToString(failure.code()), ": ", failure.message()));
          self->BumpLocked(job_id);
        },
        self);
  }
  return manager;
}

JobManager::~JobManager() {
  if (checkpoints_ != nullptr) checkpoints_->RemoveWriteFailureListener(this);
}

int64_t JobManager::NowMs() const { return absl::ToUnixMillis(clock_->Now()); }

absl::Status JobManager::Recover() {
  MutexLock lock(&mutex_);
  ASSIGN_OR_RETURN(const std::vector<JobStatus> jobs, store_->ListJobs());
  for (const JobStatus& job : jobs) {
    // A stored spec that today's rules refuse (stored by an older coordinator, or written
    // around Submit) is failed with the reason instead of planned: planning it is what
    // once aborted the coordinator on every restart.
    if (!IsTerminalJobState(job.state())) {
      // A spec stored resolved by an older coordinator lacks the fields added since (e.g.
      // model.family): they take their defaults, which mean what the older one trained
      // (model/transformer_config.h reads an absent field as GPT-2's, as workers resolve).
      JobSpec with_new_defaults = job.spec();
      ApplyJobSpecDefaults(&with_new_defaults);
      const absl::Status valid = ValidateJobSpec(with_new_defaults);
      if (!valid.ok()) {
        RETURN_IF_ERROR(
            TransitionLocked(job.job_id(), JOB_STATE_FAILED,
                             absl::StrCat("the stored job spec is not valid: ", valid.message())));
        continue;
      }
    }
    // The generation a previous coordinator ran is gone with its rendezvous state; its
    // workers are told to abort when they re-register. The job waits for a new placement.
    const std::string why = "coordinator restarted; the job is queued again";
    if (job.state() == JOB_STATE_RUNNING) {
      RETURN_IF_ERROR(TransitionLocked(job.job_id(), JOB_STATE_PLACING, why));
    }
    if (job.state() == JOB_STATE_RUNNING || job.state() == JOB_STATE_PLACING) {
      RETURN_IF_ERROR(TransitionLocked(job.job_id(), JOB_STATE_PENDING, why));
    }
    if (metrics_ != nullptr) {
      absl::StatusOr<JobStatus> now = store_->GetJob(job.job_id());
      // Only the gauge is lost: it is set again on the job's next transition.
      if (now.ok()) {
        metrics_->SetJobState(job.job_id(), now->state());
      } else {
        LogStoreReadFailure("recovery", now.status());
      }
    }
  }
  return absl::OkStatus();
}

absl::Status JobManager::TransitionLocked(const std::string& job_id, JobState to,
                                          const std::string& message) {
  if (absl::Status stored = store_->Transition(job_id, to, message, NowMs()); !stored.ok()) {
    NoteStoreWriteFailure("transition", job_id, stored);
    return stored;
  }
  if (metrics_ != nullptr) metrics_->SetJobState(job_id, to);
  BumpLocked(job_id);
  return absl::OkStatus();
}

absl::Status JobManager::SetPlacementLocked(const std::string& job_id, int64_t generation,
                                            int restarts, const std::vector<std::string>& workers) {
  absl::Status stored = store_->SetPlacement(job_id, generation, restarts, workers, NowMs());
  if (!stored.ok()) NoteStoreWriteFailure("placement", job_id, stored);
  return stored;
}

void JobManager::AppendEventLocked(const std::string& job_id, const std::string& kind,
                                   const std::string& message) {
  absl::Status stored = store_->AppendEvent(job_id, kind, message, NowMs());
  if (!stored.ok()) NoteStoreWriteFailure("event", job_id, stored);
}

void JobManager::NoteStoreWriteFailure(const char* operation, const std::string& job_id,
                                       const absl::Status& status) const {
  std::fprintf(stderr, "coordinator: %s: the job store refused a %s write: %s\n", job_id.c_str(),
               operation, status.ToString().c_str());
  if (metrics_ != nullptr) metrics_->AddStoreWriteFailure(operation);
}

void JobManager::LogStoreReadFailure(const std::string& what, const absl::Status& status) const {
  std::fprintf(stderr, "coordinator: %s: reading the job store failed: %s\n", what.c_str(),
               status.ToString().c_str());
}

void JobManager::BumpLocked(const std::string& job_id) {
  ++versions_[job_id];
  changed_.SignalAll();
  watchers_->Notify(job_id);
}

namespace {

std::string KindNames(const std::vector<DeviceKind>& kinds) {
  std::vector<std::string> names;
  for (DeviceKind kind : kinds) names.push_back(kind == DEVICE_KIND_CUDA ? "CUDA" : "CPU");
  return absl::StrJoin(names, " or ");
}

}  // namespace

absl::Status JobManager::CheckMemoryOfLiveWorkers(const JobSpec& spec,
                                                  const std::vector<DeviceKind>& kinds) const {
  // Workers that report no memory (0) are not held against the job.
  int64_t largest = 0;
  for (const WorkerStatus& w : workers_->List()) {
    if (!w.alive() ||
        std::find(kinds.begin(), kinds.end(), w.worker().device_kind()) == kinds.end()) {
      continue;
    }
    largest = std::max(largest, w.worker().memory_bytes());
  }
  const RankMemoryEstimate memory = EstimateRankMemory(spec);
  if (largest == 0 || memory.total_bytes <= largest) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("model and parallel: one rank needs an estimated ", memory.ToString(),
                   " but the largest live ", KindNames(kinds), " worker has ",
                   FormatMemoryBytes(largest), " (", largest,
                   " bytes) [rule: per-rank memory estimate <= memory of a live worker the job can "
                   "run on (more tensor or pipeline parallelism, a smaller micro_batch_size, or "
                   "train.recompute need less)]"));
}

namespace {

// Why a search found nothing, for a refusal: how many layouts each kind of reason
// rejected and one example of each ("does not fit" first: it carries the estimate).
std::string RejectionSummary(const LayoutSearch& search) {
  std::map<std::string, std::pair<int, const RejectedLayout*>> by_kind;
  for (const RejectedLayout& rejected : search.rejected) {
    const std::string kind = rejected.reason.substr(0, rejected.reason.find(':'));
    auto& [count, example] = by_kind[kind];
    if (count++ == 0) example = &rejected;
  }
  std::vector<std::string> parts;
  for (const char* kind : {"does not fit", "not valid"}) {
    const auto it = by_kind.find(kind);
    if (it == by_kind.end()) continue;
    parts.push_back(absl::StrCat(it->second.first, " ", kind, ", e.g. ",
                                 LayoutName(it->second.second->spec), ": ",
                                 it->second.second->reason));
  }
  return absl::StrJoin(parts, "; ");
}

}  // namespace

absl::StatusOr<LayoutSearch> JobManager::PlanOnWorkers(const JobSpec& spec,
                                                       const std::vector<WorkerStatus>& workers,
                                                       bool keep_micro_batch) {
  for (DeviceKind kind : EligibleDeviceKinds(spec)) {
    std::vector<PlannedWorker> planned;
    for (const WorkerStatus& w : workers) {
      if (w.worker().device_kind() == kind)
        planned.push_back({w.worker().host(), w.worker().profile()});
    }
    if (planned.empty()) continue;
    ASSIGN_OR_RETURN(const ClusterDescription cluster, ClusterFromWorkers(planned));
    LayoutSearchOptions options;
    options.devices = static_cast<int>(planned.size());
    options.min_devices = 1;  // fewer workers when that is faster, or all that divides
    if (keep_micro_batch) options.micro_batch_sizes = {spec.parallel().micro_batch_size()};
    options.cost = ProjectEngineOptions(spec);
    // Both engines have selective recomputation and sequence parallelism (the CUDA
    // engine's passed the GPU bundle's checks on an H200, docs/GPU_ENGINE.md).
    options.try_selective_recompute = options.try_sequence_parallel = true;
    // The zero-bubble schedules are the CPU engine's only, in fp32.
    options.try_zero_bubble = kind == DEVICE_KIND_CPU && IsFp32(spec);
    return SearchLayouts(spec, cluster, options);
  }
  return absl::FailedPreconditionError("no live worker of a kind this job can run on to plan for");
}

absl::StatusOr<std::string> JobManager::Submit(const JobSpec& spec) {
  ASSIGN_OR_RETURN(JobSpec resolved, ResolveJobSpec(spec));
  std::string planned;
  if (resolved.parallel().auto_()) {
    std::vector<WorkerStatus> live;
    for (const WorkerStatus& w : workers_->List()) {
      if (w.alive()) live.push_back(w);
    }
    absl::StatusOr<LayoutSearch> search = PlanOnWorkers(resolved, live);
    if (!search.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("parallel.auto: cannot plan: ", search.status().message()));
    }
    if (search->feasible.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "parallel.auto: no layout of this model fits the live workers (",
          RejectionSummary(*search), ") [rule: some layout must fit the workers' memory]"));
    }
    const PricedLayout& best = search->feasible.front();
    planned = absl::StrCat("chose ", PredictionText(best), " (", search->feasible.size(),
                           " layouts fit, ", search->rejected.size(), " rejected)");
    ASSIGN_OR_RETURN(resolved, ResolveJobSpec(best.spec));
  }
  const int world = WorldSize(resolved);
  // Live workers of a kind the job can run on (DEVICE_AUTO: CUDA or CPU, CUDA alone for
  // bf16/fp16); it needs `world` of one kind.
  const std::vector<DeviceKind> kinds = EligibleDeviceKinds(resolved);
  std::map<DeviceKind, int> alive;
  for (const WorkerStatus& w : workers_->List()) {
    if (w.alive()) ++alive[w.worker().device_kind()];
  }
  int most = 0;
  for (DeviceKind kind : kinds) most = std::max(most, alive[kind]);
  if (world > most) {
    std::vector<std::string> counts;
    for (DeviceKind kind : kinds) {
      counts.push_back(absl::StrCat(alive[kind], kind == DEVICE_KIND_CUDA ? " CUDA" : " CPU"));
    }
    return absl::InvalidArgumentError(absl::StrCat(
        "parallel: the job needs tensor * pipeline * data = ", world, " workers of one kind (",
        kinds.size() == 1 ? (kinds[0] == DEVICE_KIND_CUDA ? "CUDA" : "CPU") : "CUDA or CPU",
        ", from device ", Device_Name(resolved.device()), " and precision ",
        Precision_Name(resolved.precision()), ") but only ", absl::StrJoin(counts, " and "),
        " are registered and alive [rule: world size <= live workers of a kind the job can "
        "run on]"));
  }
  RETURN_IF_ERROR(CheckMemoryOfLiveWorkers(resolved, kinds));
  std::string job_id;
  {
    MutexLock lock(&mutex_);
    ASSIGN_OR_RETURN(job_id, store_->CreateJob(resolved, NowMs()));
    if (!planned.empty()) AppendEventLocked(job_id, "planned", planned);
    if (metrics_ != nullptr) metrics_->SetJobState(job_id, JOB_STATE_PENDING);
    BumpLocked(job_id);
  }
  Tick();
  return job_id;
}

namespace {
constexpr char kAwaitingWeights[] =
    "waiting for its initial weights (train.init_from), which `trainctl submit --init-from` "
    "uploads; if that upload was interrupted, cancel the job and submit it again";
}  // namespace

void JobManager::ExplainWaitLocked(JobStatus* job) const {
  if (job->message().empty() && AwaitsInitialWeightsLocked(*job)) {
    job->set_message(kAwaitingWeights);
  }
}

// The reads below ask the store (thread-safe, with a lock of its own) without holding
// the manager's lock: a job of 4,096 ranks takes 5-90 ms to read on a busy machine, and
// every heartbeat waits for the manager's lock. A read may land between two of the
// manager's writes of one change; the bump that follows that change wakes watchers to
// read again.
absl::StatusOr<JobStatus> JobManager::Get(const std::string& job_id) const {
  ASSIGN_OR_RETURN(JobStatus job, store_->GetJob(job_id));
  MutexLock lock(&mutex_);
  ExplainWaitLocked(&job);
  return job;
}

absl::StatusOr<std::vector<JobStatus>> JobManager::List() const {
  ASSIGN_OR_RETURN(std::vector<JobStatus> jobs, store_->ListJobs());
  MutexLock lock(&mutex_);
  for (JobStatus& job : jobs) ExplainWaitLocked(&job);
  return jobs;
}

absl::StatusOr<JobListPage> JobManager::List(const JobListQuery& query) const {
  ASSIGN_OR_RETURN(JobListPage page, store_->ListJobs(query));
  MutexLock lock(&mutex_);
  for (JobStatus& job : page.jobs) ExplainWaitLocked(&job);
  return page;
}

absl::StatusOr<std::vector<JobEvent>> JobManager::Events(const std::string& job_id) const {
  return store_->Events(job_id);
}

absl::StatusOr<JobEventPage> JobManager::Events(const std::string& job_id, int64_t after_event,
                                                int64_t max_events, int64_t max_bytes) const {
  return store_->Events(job_id, after_event, max_events, max_bytes);
}

absl::StatusOr<std::vector<StepMetrics>> JobManager::Steps(const std::string& job_id,
                                                           int64_t after_step,
                                                           int64_t limit) const {
  // A range of the primary key: a poller asking for what is new does not read the whole
  // history.
  return store_->Steps(job_id, after_step, limit);
}

absl::Status JobManager::Cancel(const std::string& job_id) {
  MutexLock lock(&mutex_);
  ASSIGN_OR_RETURN(const JobStatus job, store_->GetJob(job_id));
  if (IsTerminalJobState(job.state())) {
    return absl::FailedPreconditionError(absl::StrCat(
        job_id, " already ended (", JobState_Name(job.state()), "); nothing to cancel"));
  }
  // Stored first: a store that refuses leaves the generation running and the caller told,
  // rather than a job the store calls live with no ranks.
  RETURN_IF_ERROR(TransitionLocked(job_id, JOB_STATE_CANCELLED, "cancelled by a user"));
  if (active_.count(job_id) > 0) EndGenerationLocked(job_id, "cancelled by a user");
  restart_waiting_since_.erase(job_id);
  room_wanted_.erase(job_id);
  growth_.erase(job_id);
  return absl::OkStatus();
}

absl::Status JobManager::Delete(const std::string& job_id) {
  {
    MutexLock lock(&mutex_);
    RETURN_IF_ERROR(DeleteLocked(job_id));
  }
  return DeleteCheckpoints(job_id);
}

absl::Status JobManager::DeleteLocked(const std::string& job_id) {
  // The store refuses a job that has not ended, so nothing below can touch a live
  // generation: an ended job has none (active_, outbox_ and the rendezvous keys were
  // cleared when it ended).
  RETURN_IF_ERROR(store_->DeleteJob(job_id));
  restart_waiting_since_.erase(job_id);
  growth_.erase(job_id);
  if (metrics_ != nullptr) metrics_->ForgetJob(job_id);
  // Watchers wake up and find the job gone (NOT_FOUND).
  versions_.erase(job_id);
  changed_.SignalAll();
  watchers_->Notify(job_id);
  return absl::OkStatus();
}

absl::Status JobManager::DeleteCheckpoints(const std::string& job_id) {
  if (checkpoints_ == nullptr) return absl::OkStatus();
  absl::Status removed = checkpoints_->DeleteJob(job_id);
  if (!removed.ok()) {
    return absl::InternalError(
        absl::StrCat(job_id, " was deleted but not all of its checkpoints: ", removed.message()));
  }
  return absl::OkStatus();
}

void JobManager::ExpireEndedJobs() {
  if (options_.job_retention == absl::InfiniteDuration()) return;
  const absl::Time now = clock_->Now();
  std::vector<std::string> deleted;
  {
    MutexLock lock(&mutex_);
    absl::StatusOr<std::vector<std::string>> expired = store_->JobsEndedBy(
        absl::ToUnixMillis(now - options_.job_retention), kMaxExpiredJobsPerTick);
    if (!expired.ok()) {  // The next tick tries again.
      LogStoreReadFailure("retention", expired.status());
      return;
    }
    for (const std::string& job_id : *expired) {
      // A job the store would not delete stays, and the next tick tries again.
      if (absl::Status removed = DeleteLocked(job_id); !removed.ok()) {
        NoteStoreWriteFailure("delete", job_id, removed);
        continue;
      }
      deleted.push_back(job_id);
    }
  }
  // The job's own event log goes with it, so the coordinator's log says it.
  for (const std::string& job_id : deleted) {
    const absl::Status removed = DeleteCheckpoints(job_id);
    std::fprintf(
        stderr, "coordinator: %s deleted: it ended more than %s ago (--job_retention)%s\n",
        job_id.c_str(), absl::FormatDuration(options_.job_retention).c_str(),
        removed.ok() ? ", with its checkpoints" : absl::StrCat("; ", removed.message()).c_str());
  }
}

absl::StatusOr<std::pair<JobStatus, int64_t>> JobManager::WaitForChange(const std::string& job_id,
                                                                        int64_t seen,
                                                                        absl::Duration timeout) {
  const auto deadline = SteadyDeadlineIn(timeout);
  MutexLock lock(&mutex_);
  while (versions_[job_id] == seen) {
    if (changed_.WaitUntil(&mutex_, deadline)) break;
  }
  ASSIGN_OR_RETURN(JobStatus status, store_->GetJob(job_id));
  return std::make_pair(std::move(status), versions_[job_id]);
}

void JobManager::FailStoppedRankLocked(const HeartbeatRequest& request) {
  if (request.state() != WORKER_STATE_BUSY || request.rank_stopped_ms() <= 0) return;
  const absl::Duration stopped = absl::Milliseconds(request.rank_stopped_ms());
  if (options_.stopped_rank_grace >= options_.collective_timeout ||
      stopped < options_.stopped_rank_grace) {
    return;
  }
  const std::string& worker = request.worker_id();
  const auto assigned = worker_job_.find(worker);
  const auto active = active_.find(request.job_id());
  if (assigned == worker_job_.end() || assigned->second != request.job_id() ||
      active == active_.end() || active->second.generation != request.generation()) {
    return;  // not a live rank: the usual abort of stale ranks deals with it
  }
  const std::vector<std::string>& ranks = active->second.workers;
  const auto rank = std::find(ranks.begin(), ranks.end(), worker) - ranks.begin();
  // A failure to store the outcome was logged and counted where it happened; the
  // heartbeat still carries the aborts the generation's end queued.
  FailGenerationLocked(
      request.job_id(),
      absl::StrCat("rank ", rank, " on worker ", worker, " has been stopped (SIGSTOP) for ",
                   absl::FormatDuration(absl::Trunc(stopped, absl::Milliseconds(100))),
                   ", its daemon reports: its peers would wait for it until the collective "
                   "timeout (",
                   absl::FormatDuration(options_.collective_timeout),
                   "), so the generation fails now"))
      .IgnoreError();
}

std::vector<WorkerCommand> JobManager::OnHeartbeat(const HeartbeatRequest& request) {
  std::vector<QueuedCommand> queued;
  {
    MutexLock lock(&mutex_);
    // First, so that the abort it queues for this worker goes out with this heartbeat.
    FailStoppedRankLocked(request);
    const std::string& worker = request.worker_id();
    if (const auto box = outbox_.find(worker); box != outbox_.end()) {
      queued.swap(box->second);
      outbox_.erase(box);
    }
    const auto assigned = worker_job_.find(worker);
    if (request.state() == WORKER_STATE_BUSY) {
      idle_since_.erase(worker);
      const auto active = active_.find(request.job_id());
      const bool current = assigned != worker_job_.end() && assigned->second == request.job_id() &&
                           active != active_.end() &&
                           active->second.generation == request.generation();
      const bool abort_queued = std::any_of(queued.begin(), queued.end(), [](const auto& c) {
        return c.plan == nullptr && c.command.has_abort();
      });
      if (!current && !abort_queued) {
        // A rank of a generation this coordinator does not run (ended, or from before a
        // coordinator restart): stop it so the worker is free.
        queued.push_back({AbortOf(request.job_id(), request.generation(),
                                  "not part of a live generation of this coordinator"),
                          nullptr, -1});
      }
    } else if (assigned != worker_job_.end() && queued.empty()) {
      idle_since_.emplace(worker, clock_->Now());
    }
  }
  // Assignments are made from their generation's shared plan here, outside the mutex: the
  // plan is immutable, and the generation's end (which withdraws undelivered assignments)
  // can no longer reach these, as a delivered rank it would abort.
  std::vector<WorkerCommand> commands;
  commands.reserve(queued.size());
  for (QueuedCommand& entry : queued) {
    if (entry.plan == nullptr) {
      commands.push_back(std::move(entry.command));
    } else {
      *commands.emplace_back().mutable_assign() = entry.plan->AssignmentFor(entry.rank);
    }
  }
  return commands;
}

void JobManager::OnWorkerRestarted(const std::string& worker_id) {
  MutexLock lock(&mutex_);
  outbox_.erase(worker_id);
  const auto assigned = worker_job_.find(worker_id);
  if (assigned == worker_job_.end()) return;
  // A copy: ending the generation erases this entry (a reference dangled; found by
  // tests/fuzz/coordinator_rpc_fuzzer.cc).
  const std::string job_id = assigned->second;
  // The worker's registration succeeds regardless: a failure to store the job's outcome
  // was logged and counted where it happened.
  FailGenerationLocked(job_id, absl::StrCat("worker ", worker_id, " restarted and lost its rank"))
      .IgnoreError();
}

// An engine note longer than this (a malformed report) is cut in the event log.
constexpr size_t kMaxEngineNoteLength = 500;

absl::Status JobManager::OnMetrics(const StepMetrics& metrics) {
  Notification stored;
  absl::Status outcome;
  OnMetrics(metrics, [&](absl::Status status) {
    outcome = std::move(status);
    stored.Notify();
  });
  stored.WaitForNotification();
  return outcome;
}

void JobManager::OnMetrics(const StepMetrics& metrics, std::function<void(absl::Status)> done) {
  {
    MutexLock lock(&mutex_);
    absl::StatusOr<bool> reporting = ObserveMetricsLocked(metrics);
    if (!reporting.ok() || !*reporting) {
      done(reporting.status());
      return;
    }
  }
  // The reporting rank's row goes to the step writer: stored outside the manager's mutex
  // and off the caller's (gRPC's) thread, in one transaction with the rows that arrive
  // meanwhile. Durability is as before: one stream carries a rank's steps in order and
  // reads the next only once `done` ran, so a job's steps are stored in order and a step
  // acknowledged is a step stored (the store refuses a row for a job deleted meanwhile).
  step_writer_->Write(StepRow{metrics.job_id(), metrics}, [this, metrics, done = std::move(done)](
                                                              absl::Status recorded) {
    if (!recorded.ok()) {
      NoteStoreWriteFailure("step", metrics.job_id(), recorded);
      done(recorded);
      return;
    }
    {
      MutexLock lock(&mutex_);
      // train.eval_tasks' results: kept as the job's events (`trainctl evals` lists them).
      for (const EvalTaskResult& eval : metrics.evals()) {
        AppendEventLocked(metrics.job_id(), "evaluation",
                          absl::StrCat("step ", metrics.step(), ": ", EvalTaskResultJson(eval)));
      }
      // train.generate's texts likewise.
      for (const GeneratedText& text : metrics.generations()) {
        AppendEventLocked(metrics.job_id(), "generation",
                          absl::StrCat("step ", metrics.step(), ": ", GeneratedTextJson(text)));
      }
      BumpLocked(metrics.job_id());
    }
    done(absl::OkStatus());
  });
}

absl::StatusOr<JobStatus> JobManager::JobSummaryLocked(const std::string& job_id) const {
  // Through a one-job listing, which can leave the workers out (GetJob reads one row per
  // rank: every rank of a 4,096-rank generation that ended asked for the job once, under
  // this lock, and the aborts waited seconds for it).
  int64_t number = 0;
  if (!absl::StartsWith(job_id, "job-") || !absl::SimpleAtoi(job_id.substr(4), &number) ||
      number < 1) {
    return store_->GetJob(job_id);  // its NOT_FOUND, worded as everywhere else
  }
  JobListQuery query;
  query.after_job = number - 1;
  query.max_jobs = 1;
  query.with_workers = false;
  ASSIGN_OR_RETURN(JobListPage page, store_->ListJobs(query));
  if (page.jobs.empty() || page.jobs[0].job_id() != job_id) return store_->GetJob(job_id);
  return std::move(page.jobs[0]);
}

absl::StatusOr<bool> JobManager::ObserveMetricsLocked(const StepMetrics& metrics) {
  const auto it = active_.find(metrics.job_id());
  if (it == active_.end() || it->second.generation != metrics.generation()) {
    ASSIGN_OR_RETURN(const JobStatus job, JobSummaryLocked(metrics.job_id()));
    return absl::FailedPreconditionError(absl::StrCat(
        metrics.job_id(), " generation ", metrics.generation(), " is not running (job is ",
        JobState_Name(job.state()), ", generation ", job.generation(), "): stop"));
  }
  ActiveJob& job = it->second;
  const int rank = metrics.global_rank();
  if (rank < 0 || rank >= job.plan->world_size()) {
    return absl::InvalidArgumentError(absl::StrCat("global_rank ", rank, " is outside the job"));
  }
  if (!job.running) {
    // Marked running only once stored, so the next step tries the transition again.
    RETURN_IF_ERROR(TransitionLocked(metrics.job_id(), JOB_STATE_RUNNING,
                                     absl::StrCat("generation ", job.generation, " training")));
    job.running = true;
  }
  if (!metrics.engine().empty()) {
    // Which engine (CPU or CUDA, device, precision) this generation trains on, and why.
    AppendEventLocked(metrics.job_id(), "engine",
                      absl::StrCat("generation ", job.generation, ", rank ", rank, ": ",
                                   metrics.engine().substr(0, kMaxEngineNoteLength)));
  }
  if (metrics_ != nullptr)
    metrics_->ObserveStep(metrics.job_id(), metrics, job.plan->Coordinates(rank));
  return rank == ReportingRank(job.spec);
}

absl::Status JobManager::OnRankResult(const RankResult& result) {
  // Set when the generation ended in memory but the store refused its outcome: returned
  // to the rank after the Tick its freed workers need.
  absl::Status unstored;
  {
    MutexLock lock(&mutex_);
    const auto it = active_.find(result.job_id());
    if (it == active_.end() || it->second.generation != result.generation()) {
      RETURN_IF_ERROR(JobSummaryLocked(result.job_id()).status());
      return absl::FailedPreconditionError(
          absl::StrCat(result.job_id(), " generation ", result.generation(), " is not running"));
    }
    ActiveJob& job = it->second;
    const int rank = result.global_rank();
    if (rank < 0 || rank >= static_cast<int>(job.workers.size())) {
      return absl::InvalidArgumentError(absl::StrCat("global_rank ", rank, " is outside the job"));
    }
    if (result.code() != 0) {
      // A rank that refuses its spec (INVALID_ARGUMENT, e.g. a checkpoint that does not fit
      // the model) or cannot run it at all (UNIMPLEMENTED) would do the same after every
      // restart: those fail the job without spending the restart budget.
      const auto code = static_cast<absl::StatusCode>(result.code());
      const bool retry =
          code != absl::StatusCode::kInvalidArgument && code != absl::StatusCode::kUnimplemented;
      unstored = FailGenerationLocked(
          result.job_id(),
          absl::StrCat("rank ", rank, " on worker ", job.workers[rank],
                       " failed: ", absl::StatusCodeToString(code), ": ", result.message()),
          retry, code);
    } else {
      job.finished.insert(rank);
      if (job.finished.size() == job.workers.size()) {
        const std::string job_id = result.job_id();
        // Stored before the generation ends in memory: if the store refuses, the job stays
        // live here, as it is in the store, and the rank hears why.
        if (!job.running) {  // finished before any step was reported (e.g. 0 steps left)
          RETURN_IF_ERROR(TransitionLocked(job_id, JOB_STATE_RUNNING, "ranks finished"));
          job.running = true;
        }
        RETURN_IF_ERROR(TransitionLocked(job_id, JOB_STATE_SUCCEEDED, "all ranks finished"));
        EndGenerationLocked(job_id, "");
      }
    }
  }
  Tick();  // workers may have been freed
  return unstored;
}

absl::Status JobManager::CheckCheckpointUpload(const std::string& job_id, int64_t generation,
                                               int64_t step) const {
  MutexLock lock(&mutex_);
  ASSIGN_OR_RETURN(const JobStatus job, store_->GetJob(job_id));
  if (generation == 0) {
    if (step != 0 || !AwaitsInitialWeightsLocked(job)) {
      return absl::FailedPreconditionError(
          absl::StrCat(job_id,
                       " does not await initial weights (generation 0 uploads only step 0 of a "
                       "PENDING job with train.init_from that has none yet)"));
    }
    return absl::OkStatus();
  }
  const auto it = active_.find(job_id);
  if (it == active_.end() || it->second.generation != generation) {
    return absl::FailedPreconditionError(
        absl::StrCat(job_id, " generation ", generation, " is not running (job is ",
                     JobState_Name(job.state()), ", generation ", job.generation(), "): stop"));
  }
  return absl::OkStatus();
}

void JobManager::OnCheckpointCommitted(const std::string& job_id, const CheckpointInfo& info) {
  {
    MutexLock lock(&mutex_);
    AppendEventLocked(
        job_id, "checkpoint",
        absl::StrCat(info.parameters_only() && info.step() == 0 ? "initial weights" : "checkpoint",
                     " of step ", info.step(), " stored (", info.total_bytes(), " bytes, ",
                     info.num_files(), " files, written under (t,p,d)=(", info.tensor(), ",",
                     info.pipeline(), ",", info.data(), "))"));
    if (metrics_ != nullptr) metrics_->SetCheckpointStep(job_id, info.step());
    if (!info.parameters_only()) MaybeGrowLocked(job_id, info.step());
    BumpLocked(job_id);
  }
  Tick();  // initial weights may let the job start; a grown job is placed
}

void JobManager::MaybeGrowLocked(const std::string& job_id, int64_t step) {
  const auto it = active_.find(job_id);
  if (it == active_.end() || !it->second.running) return;
  const ActiveJob& job = it->second;
  const ParallelSpec& par = job.spec.parallel();
  const double gain = par.replan_on_join_gain();
  if (gain <= 0 || !(par.auto_() || par.replan())) return;
  if (step >= job.spec.train().steps()) return;  // the last checkpoint: nothing left to speed
  const std::vector<std::string> joined = FreeWorkersLocked();
  if (joined.empty()) return;
  std::map<std::string, WorkerStatus> by_id;
  for (const WorkerStatus& w : workers_->List()) by_id[w.worker().worker_id()] = w;
  std::vector<WorkerStatus> running;
  for (const std::string& id : std::set<std::string>(job.workers.begin(), job.workers.end())) {
    running.push_back(by_id[id]);
  }
  std::vector<WorkerStatus> grown = running;
  for (const std::string& id : joined) grown.push_back(by_id[id]);
  absl::StatusOr<LayoutSearch> now = PlanOnWorkers(job.spec, running, /*keep_micro_batch=*/true);
  absl::StatusOr<LayoutSearch> more = PlanOnWorkers(job.spec, grown, /*keep_micro_batch=*/true);
  if (!now.ok() || !more.ok() || more->feasible.empty()) return;
  // The running layout as the model prices it on its own workers.
  std::optional<double> running_seconds;
  const std::string running_name = LayoutName(job.spec);
  for (const PricedLayout& layout : now->feasible) {
    if (LayoutName(layout.spec) == running_name) {
      running_seconds = layout.cost.step_seconds;
      break;
    }
  }
  if (!running_seconds.has_value()) return;  // a layout the model cannot price: leave it
  const PricedLayout& best = more->feasible.front();
  if (best.cost.devices <= static_cast<int>(running.size())) return;  // not a growth
  if (best.cost.step_seconds > *running_seconds * (1 - gain)) return;
  const std::string why = absl::StrCat(
      joined.size(),
      joined.size() == 1 ? " free worker joined: " : " free workers joined: ", running_name,
      " (predicted ", absl::StrFormat("%.3g", *running_seconds), " s a step) -> ",
      PredictionText(best), ", resuming from the checkpoint of step ", step);
  const int64_t generation = job.generation;
  const int restarts = job.restarts;
  EndGenerationLocked(job_id, "the job is re-planned onto more workers");
  growth_[job_id] = Growth{best.spec, clock_->Now()};
  AppendEventLocked(job_id, "replanned", why);
  // Not a failure: the restart budget is kept.
  if (!SetPlacementLocked(job_id, generation, restarts, {}).ok()) return;
  if (!TransitionLocked(job_id, JOB_STATE_PLACING, absl::StrCat("re-planning: ", why)).ok()) {
    return;
  }
  (void)TransitionLocked(job_id, JOB_STATE_PENDING,
                         "waiting for the job's workers to stop their ranks before growing");
}

bool JobManager::AwaitsInitialWeightsLocked(const JobStatus& job) const {
  return job.spec().train().has_init_from() && !job.spec().train().init_from().empty() &&
         job.generation() == 0 && job.state() == JOB_STATE_PENDING &&
         (checkpoints_ == nullptr || !checkpoints_->Has(job.job_id(), 0));
}

std::optional<CheckpointInfo> JobManager::ResumePointLocked(const std::string& job_id) {
  if (checkpoints_ == nullptr) return std::nullopt;
  // A rank uploads the checkpoint of step N after it sent step N's metrics, but the two
  // travel on different streams: a rank that dies may leave a committed checkpoint newer
  // than the last step row stored (rows still in its send buffer are lost with it).
  // Resuming from that checkpoint would leave those steps out of the job's history for
  // good; an older checkpoint recomputes them (the same values: training is
  // deterministic). The job's recorded step is its newest stored row, and every step
  // before it is stored (each generation's rows arrive in order on one stream).
  int64_t recorded = INT64_MAX;
  if (absl::StatusOr<JobStatus> job = store_->GetJob(job_id); job.ok()) recorded = job->step();
  std::vector<std::string> damaged;
  std::optional<CheckpointInfo> latest = checkpoints_->LatestUsable(job_id, &damaged, recorded);
  if (!latest.has_value() && recorded != INT64_MAX) {
    // Nothing that old is kept (--keep_checkpoints): the newest, with the gap said.
    latest = checkpoints_->LatestUsable(job_id, &damaged);
    if (latest.has_value() && latest->step() > recorded) {
      AppendEventLocked(job_id, "history_gap",
                        absl::StrCat("no checkpoint kept at or before the last recorded step ",
                                     recorded, ": resuming from step ", latest->step(), ", steps ",
                                     recorded + 1, "-", latest->step(), " stay unrecorded"));
    }
  }
  for (const std::string& why : damaged) {
    AppendEventLocked(
        job_id, "checkpoint_damaged",
        absl::StrCat(why, latest.has_value()
                              ? absl::StrCat("; using checkpoint step ", latest->step())
                              : std::string("; no older checkpoint: starting from step 0")));
  }
  return latest;
}

void JobManager::EndGenerationLocked(const std::string& job_id, const std::string& reason) {
  const auto it = active_.find(job_id);
  if (it == active_.end()) return;
  const ActiveJob& job = it->second;
  for (size_t rank = 0; rank < job.workers.size(); ++rank) {
    const std::string& worker = job.workers[rank];
    // An assignment not yet delivered is simply withdrawn; a delivered rank is stopped
    // (a finished one has exited already, and the abort is a no-op for it).
    std::vector<QueuedCommand>& queued = outbox_[worker];
    queued.erase(std::remove_if(queued.begin(), queued.end(),
                                [&](const QueuedCommand& c) {
                                  return c.plan != nullptr && c.plan->job_id() == job_id;
                                }),
                 queued.end());
    if (!reason.empty() && job.finished.count(static_cast<int>(rank)) == 0) {
      queued.push_back({AbortOf(job_id, job.generation, reason), nullptr, -1});
    }
    if (queued.empty()) outbox_.erase(worker);
    worker_job_.erase(worker);
    idle_since_.erase(worker);
  }
  if (job.plan != nullptr) rendezvous_->CloseGeneration(job.plan->rendezvous_prefix());
  active_.erase(it);
}

absl::Status JobManager::FailGenerationLocked(const std::string& job_id, const std::string& reason,
                                              bool retry, absl::StatusCode cause) {
  const auto it = active_.find(job_id);
  if (it == active_.end()) return absl::OkStatus();
  // Restart at the submitted size (a generation may have run shrunk).
  absl::StatusOr<JobStatus> submitted = store_->GetJob(job_id);
  if (!submitted.ok()) LogStoreReadFailure(job_id, submitted.status());
  const JobSpec spec = submitted.ok() ? submitted->spec() : it->second.spec;
  const int64_t generation = it->second.generation;
  const int restarts = it->second.restarts;
  const bool was_running = it->second.running;
  // Ended in memory whatever the store does below: its ranks failed or are gone, and its
  // survivors must be told to stop. A store write that fails from here on stops the
  // restart (placing again on top of a state the store did not take would compound it) and
  // is returned; the job is then re-queued by the next coordinator start.
  EndGenerationLocked(job_id, reason);
  // A rank found a damaged file the store's cache vouched for (damage that kept the file's
  // size and time): the next placement reads every file again. Not after other failures,
  // since reading a large checkpoint in full holds up the manager.
  const bool data_loss = cause == absl::StatusCode::kDataLoss;
  if (checkpoints_ != nullptr && data_loss) {
    checkpoints_->ForgetVerified(job_id);
  }
  AppendEventLocked(job_id, "generation_failed",
                    absl::StrCat("generation ", generation, ": ", reason));
  if (metrics_ != nullptr) metrics_->AddGenerationFailure(job_id);
  if (!retry) {
    room_wanted_.erase(job_id);
    return TransitionLocked(
        job_id, JOB_STATE_FAILED,
        absl::StrCat(reason, " (not restarted: the job would fail the same way again)"));
  }
  if (const auto room = room_wanted_.find(job_id); room != room_wanted_.end()) {
    // The coordinator's disk failed, not the job: no restart is spent, and placing it
    // again before there is room would only lose the same checkpoint again.
    RETURN_IF_ERROR(SetPlacementLocked(job_id, generation, restarts, {}));
    const std::string why = absl::StrCat("waiting for room in the state dir: checkpoint step ",
                                         room->second.step, " could not be stored (", reason,
                                         "); the job is placed again, without spending a "
                                         "restart, once ",
                                         room->second.bytes, " bytes are free");
    if (was_running) RETURN_IF_ERROR(TransitionLocked(job_id, JOB_STATE_PLACING, why));
    return TransitionLocked(job_id, JOB_STATE_PENDING, why);
  }
  if (restarts >= spec.train().max_restarts()) {
    return TransitionLocked(
        job_id, JOB_STATE_FAILED,
        absl::StrCat(reason, " (restart budget of ", spec.train().max_restarts(), " spent)"));
  }
  // The restart is counted in the store before it happens: a count the store did not take
  // would hand the job a restart beyond its budget.
  RETURN_IF_ERROR(SetPlacementLocked(job_id, generation, restarts + 1, {}));
  if (metrics_ != nullptr) metrics_->SetJobRestarts(job_id, restarts + 1);
  if (was_running) {
    RETURN_IF_ERROR(TransitionLocked(job_id, JOB_STATE_PLACING,
                                     absl::StrCat("restart ", restarts + 1, " after: ", reason)));
  }
  // After a DATA_LOSS the checkpoints are to be read again: the next Tick does that
  // outside the lock (VerifyAhead), then places the job.
  const bool reread_checkpoints = checkpoints_ != nullptr && data_loss;
  if (reread_checkpoints) {
    RETURN_IF_ERROR(TransitionLocked(job_id, JOB_STATE_PENDING,
                                     "checking every checkpoint file again before the restart"));
    restart_waiting_since_[job_id] = clock_->Now();
    return absl::OkStatus();
  }
  ASSIGN_OR_RETURN(const bool placed, TryPlaceLocked(job_id, spec, generation + 1, restarts + 1));
  if (!placed) {
    RETURN_IF_ERROR(
        TransitionLocked(job_id, JOB_STATE_PENDING, "waiting for free workers to restart"));
    restart_waiting_since_[job_id] = clock_->Now();
  }
  return absl::OkStatus();
}

const std::vector<WorkerStatus>& JobManager::WorkersLocked(
    std::vector<WorkerStatus>* fetched) const {
  if (admission_workers_ != nullptr) return *admission_workers_;
  *fetched = workers_->List();
  return *fetched;
}

bool JobManager::IsFreeLocked(const WorkerStatus& w) const {
  if (!w.alive() || worker_job_.count(w.worker().worker_id()) > 0) return false;
  // A worker still running an aborted rank reports BUSY until it has stopped it.
  return w.state() != WORKER_STATE_BUSY;
}

std::vector<std::string> JobManager::FreeWorkersLocked() const {
  std::vector<WorkerStatus> fetched;
  std::vector<std::string> free;
  for (const WorkerStatus& w : WorkersLocked(&fetched)) {
    if (IsFreeLocked(w)) free.push_back(w.worker().worker_id());
  }
  return free;
}

absl::StatusOr<bool> JobManager::TryPlaceLocked(const std::string& job_id, const JobSpec& spec,
                                                int64_t generation, int restarts,
                                                bool allow_shrink) {
  ASSIGN_OR_RETURN(const bool placed, PlaceLocked(job_id, spec, generation, restarts));
  if (placed) return true;
  if (!allow_shrink) return false;
  if (spec.parallel().auto_() || spec.parallel().replan()) {
    // Re-plan for the workers that are free now: any layout, the same global batch; the
    // checkpoint reshards to it.
    std::map<std::string, WorkerStatus> by_id;
    for (const WorkerStatus& w : workers_->List()) by_id[w.worker().worker_id()] = w;
    std::vector<WorkerStatus> free;
    for (const std::string& id : FreeWorkersLocked()) free.push_back(by_id[id]);
    absl::StatusOr<LayoutSearch> search = PlanOnWorkers(spec, free, /*keep_micro_batch=*/true);
    if (!search.ok()) return false;
    for (const PricedLayout& layout : search->feasible) {
      ASSIGN_OR_RETURN(const bool placed_replanned,
                       PlaceLocked(job_id, layout.spec, generation, restarts));
      if (placed_replanned) {
        AppendEventLocked(
            job_id, "replanned",
            absl::StrCat("no replacement worker within ",
                         absl::FormatDuration(options_.shrink_grace), ": ", LayoutName(spec),
                         " -> ", PredictionText(layout), " on ", free.size(), " free workers"));
        BumpLocked(job_id);
        return true;
      }
    }
    return false;
  }
  for (int d : ShrunkDataDegrees(spec)) {
    JobSpec shrunk = spec;
    shrunk.mutable_parallel()->set_data(d);
    ASSIGN_OR_RETURN(const bool placed_shrunk, PlaceLocked(job_id, shrunk, generation, restarts));
    if (placed_shrunk) {
      AppendEventLocked(
          job_id, "shrunk",
          absl::StrCat("no replacement worker within ", absl::FormatDuration(options_.shrink_grace),
                       ": data parallelism ", spec.parallel().data(), " -> ", d,
                       ", global batch kept (", NumMicrobatches(shrunk.parallel()),
                       " microbatches per replica)"));
      BumpLocked(job_id);
      return true;
    }
  }
  return false;
}

namespace {

// The workers of a placement for an event: every one for a small job, the first few and a
// count for a large one (a 4,096-rank list is 40 KB in every event and status; the full
// list is the job's `workers`).
constexpr size_t kWorkersNamedInEvents = 16;
std::string WorkerListText(const std::vector<std::string>& ranks) {
  if (ranks.size() <= kWorkersNamedInEvents) return absl::StrJoin(ranks, ",");
  return absl::StrCat(absl::StrJoin(ranks.begin(), ranks.begin() + kWorkersNamedInEvents, ","),
                      ",... (", ranks.size() - kWorkersNamedInEvents, " more)");
}

}  // namespace

absl::StatusOr<bool> JobManager::PlaceLocked(const std::string& job_id, const JobSpec& spec,
                                             int64_t generation, int restarts) {
  std::vector<WorkerStatus> fetched;
  std::vector<FreeWorker> free;
  std::map<std::string, std::string> host_of;
  for (const WorkerStatus& w : WorkersLocked(&fetched)) {
    if (!IsFreeLocked(w)) continue;
    free.push_back(FreeWorker{w.worker().worker_id(), w.worker().host(), w.worker().device_kind()});
    host_of[w.worker().worker_id()] = w.worker().host();
  }
  // The policy (plan/placement.h): the first eligible kind with room, tensor-parallel
  // groups each on one host.
  const std::optional<std::vector<std::string>> packed = PackRanks(spec, free);
  if (!packed.has_value()) return false;
  const std::vector<std::string>& ranks = *packed;
  std::vector<Peer> peers;
  peers.reserve(ranks.size());
  for (const std::string& id : ranks) {
    Peer& peer = peers.emplace_back();
    peer.set_worker_id(id);
    peer.set_host(host_of[id]);
  }
  absl::StatusOr<std::unique_ptr<GenerationPlan>> plan =
      GenerationPlan::Create(spec, job_id, generation, std::move(peers));
  if (!plan.ok()) {
    RETURN_IF_ERROR(TransitionLocked(
        job_id, JOB_STATE_FAILED, absl::StrCat("cannot plan the job: ", plan.status().message())));
    return true;  // dealt with: nothing to wait for
  }
  const std::optional<CheckpointInfo> resume = ResumePointLocked(job_id);
  if (!resume.has_value() && spec.train().has_init_from() && !spec.train().init_from().empty()) {
    RETURN_IF_ERROR(TransitionLocked(job_id, JOB_STATE_FAILED,
                                     "no usable checkpoint, not even the initial weights of "
                                     "train.init_from: cannot start"));
    return true;
  }
  if (resume.has_value()) (*plan)->set_resume_step(resume->step());
  (*plan)->set_collective_timeout_ms(absl::ToInt64Milliseconds(options_.collective_timeout));
  if (resume.has_value()) {
    AppendEventLocked(job_id, "resume",
                      absl::StrCat("generation ", generation, " resumes from checkpoint step ",
                                   resume->step(), " (written under (t,p,d)=(", resume->tensor(),
                                   ",", resume->pipeline(), ",", resume->data(), "))"));
  }
  // Ranks may rendezvous only under the prefix of a generation placed here, within a
  // budget for its size; the prefix closes (its keys deleted) when the generation ends.
  const std::string prefix = (*plan)->rendezvous_prefix();
  if (absl::Status opened =
          rendezvous_->OpenGeneration(prefix, RendezvousGenerationByteLimit((*plan)->world_size()));
      !opened.ok()) {
    RETURN_IF_ERROR(TransitionLocked(
        job_id, JOB_STATE_FAILED, absl::StrCat("cannot open the rendezvous: ", opened.message())));
    return true;
  }
  // The placement is stored before it takes effect in memory: if the store refuses it, no
  // worker is handed a rank of a generation the store does not know, and the job stays
  // where it was (the caller hears why; admission tries again on the next Tick).
  if (absl::Status stored = SetPlacementLocked(job_id, generation, restarts, ranks); !stored.ok()) {
    rendezvous_->CloseGeneration(prefix);
    return stored;
  }
  absl::StatusOr<JobStatus> status = store_->GetJob(job_id);
  if (!status.ok()) {
    LogStoreReadFailure(job_id, status.status());
    rendezvous_->CloseGeneration(prefix);
    return status.status();
  }
  if (status->state() != JOB_STATE_PLACING) {
    if (absl::Status moved =
            TransitionLocked(job_id, JOB_STATE_PLACING,
                             absl::StrCat("generation ", generation, " on ", ranks.size(),
                                          " workers: ", WorkerListText(ranks)));
        !moved.ok()) {
      rendezvous_->CloseGeneration(prefix);
      return moved;
    }
  } else {
    AppendEventLocked(job_id, "placed",
                      absl::StrCat("generation ", generation, " on ", WorkerListText(ranks)));
    BumpLocked(job_id);
  }
  ActiveJob job;
  job.spec = spec;
  job.generation = generation;
  job.restarts = restarts;
  job.plan = *std::move(plan);
  job.workers = ranks;
  job.placed_at = clock_->Now();
  for (size_t r = 0; r < ranks.size(); ++r) {
    outbox_[ranks[r]].push_back({WorkerCommand(), job.plan, static_cast<int>(r)});
    worker_job_[ranks[r]] = job_id;
  }
  active_[job_id] = std::move(job);
  room_wanted_.erase(job_id);
  return true;
}

void JobManager::AdmitLocked() {
  // Waiting jobs only, through the state index: ended jobs may number tens of thousands.
  JobListQuery pending;
  pending.states = {JOB_STATE_PENDING};
  pending.with_workers = false;
  absl::StatusOr<JobListPage> page = store_->ListJobs(pending);
  if (!page.ok()) {  // the next Tick tries again
    LogStoreReadFailure("admission", page.status());
    return;
  }
  const std::vector<JobStatus>* jobs = &page->jobs;
  if (jobs->empty()) return;  // nothing waits (and the tick holds the lock for less)
  // One look at the registry for the whole pass: with many jobs waiting, each placement
  // attempt used to copy every worker's description twice.
  const std::vector<WorkerStatus> workers = workers_->List();
  admission_workers_ = &workers;
  struct ForgetSnapshot {
    JobManager* manager;
    ~ForgetSnapshot() ABSL_NO_THREAD_SAFETY_ANALYSIS { manager->admission_workers_ = nullptr; }
  } forget{this};
  // First come, first served, with backfill (README, "Admission"). Oldest first; the
  // oldest job of a kind of worker that does not fit is that kind's head. Jobs behind the
  // head that fit the free workers start ahead of it (backfill) until the head has waited
  // options_.backfill_window; from then on the kind is reserved: nothing behind the head
  // starts, so the workers that running jobs free stay free until the head fits. A job
  // restarting after a failure, or stopped to grow, reserves its kind at once: backfill
  // must not take the workers it just had. Kinds are separate (a CUDA job waiting for GPUs
  // holds back no CPU job).
  const absl::Time now = clock_->Now();
  std::set<DeviceKind> reserved;            // nothing behind the head starts
  std::map<DeviceKind, std::string> heads;  // kind -> its waiting head this tick
  std::set<std::string> still_heads;
  const auto any_of_kinds = [](const std::vector<DeviceKind>& kinds, const auto& set) {
    return std::any_of(kinds.begin(), kinds.end(), [&](DeviceKind k) { return set.count(k) > 0; });
  };
  // Called only here, with the lock held (clang's analysis cannot see that into a lambda).
  const auto become_head = [&](const JobStatus& job, const std::vector<DeviceKind>& kinds,
                               bool reserve_now) ABSL_NO_THREAD_SAFETY_ANALYSIS {
    if (any_of_kinds(kinds, heads)) return;  // behind a head already: just waits
    const absl::Time since = head_since_.try_emplace(job.job_id(), now).first->second;
    still_heads.insert(job.job_id());
    for (DeviceKind kind : kinds) heads.emplace(kind, job.job_id());
    if (reserve_now || options_.backfill_window <= absl::ZeroDuration() ||
        now - since >= options_.backfill_window) {
      reserved.insert(kinds.begin(), kinds.end());
    }
  };
  for (const JobStatus& job : *jobs) {
    if (job.state() != JOB_STATE_PENDING) continue;
    // Waiting for an upload, not for workers: it must not hold back the jobs behind it.
    if (AwaitsInitialWeightsLocked(job)) continue;
    // Waiting for room in the state dir, not for workers: the same.
    if (const auto room = room_wanted_.find(job.job_id()); room != room_wanted_.end()) {
      const std::optional<uint64_t> free = checkpoints_->FreeBytes();
      if (free.has_value() && *free < room->second.bytes) continue;
    }
    const std::vector<DeviceKind> kinds = EligibleDeviceKinds(job.spec());
    if (any_of_kinds(kinds, reserved)) continue;
    // The head it would overtake, if any: named in the "backfilled" event.
    std::string overtaken;
    for (DeviceKind kind : kinds) {
      if (const auto head = heads.find(kind); head != heads.end()) overtaken = head->second;
    }
    if (const auto grow = growth_.find(job.job_id()); grow != growth_.end()) {
      absl::StatusOr<bool> placed =
          PlaceLocked(job.job_id(), grow->second.spec, job.generation() + 1, job.restarts());
      if (!placed.ok()) continue;  // the store refused: next Tick
      if (*placed) {
        growth_.erase(grow);
        continue;
      }
      if (now - grow->second.since < options_.shrink_grace) {
        become_head(job, kinds, /*reserve_now=*/true);
        continue;
      }
      // The workers went away meanwhile: placed as it was.
      AppendEventLocked(
          job.job_id(), "replan_abandoned",
          absl::StrCat("the workers for ", LayoutName(grow->second.spec), " were not free within ",
                       absl::FormatDuration(options_.shrink_grace)));
      growth_.erase(grow);
    }
    const auto waiting = restart_waiting_since_.find(job.job_id());
    const bool restarting = waiting != restart_waiting_since_.end();
    const bool allow_shrink = restarting && now - waiting->second >= options_.shrink_grace;
    absl::StatusOr<bool> placed = TryPlaceLocked(job.job_id(), job.spec(), job.generation() + 1,
                                                 job.restarts(), allow_shrink);
    // A store that refused the placement (logged and counted where it failed): the job
    // stays PENDING for the next Tick; it waits on its store, not on workers, so it does
    // not hold back the jobs behind it.
    if (!placed.ok()) continue;
    if (!*placed) {
      become_head(job, kinds, /*reserve_now=*/restarting);
      continue;
    }
    restart_waiting_since_.erase(job.job_id());
    if (!overtaken.empty()) {
      const auto head_since = head_since_.find(overtaken);
      AppendEventLocked(
          job.job_id(), "backfilled",
          absl::StrCat("started ahead of ", overtaken, ", which has waited ",
                       absl::FormatDuration(absl::Trunc(
                           now - (head_since != head_since_.end() ? head_since->second : now),
                           absl::Seconds(1))),
                       " for workers (backfill until it has waited ",
                       absl::FormatDuration(options_.backfill_window), ")"));
    }
  }
  // A job placed, cancelled or behind another head is no head any more: its wait as head
  // starts again from zero if it becomes one later.
  for (auto it = head_since_.begin(); it != head_since_.end();) {
    it = still_heads.count(it->first) > 0 ? std::next(it) : head_since_.erase(it);
  }
}

void JobManager::DetectLostRanksLocked() {
  // This runs every tick under the manager's lock: the registry counts in one pass and
  // names only the dead workers (usually none), rather than copying every id.
  const WorkerRegistry::Census census = workers_->TakeCensus();
  const int registered = census.registered;
  const int live = census.alive;
  // Workers that left the registry were dead first (only dead ones are removed or make
  // room), so a rank's worker is alive unless the census names it dead or it is gone.
  if (metrics_ != nullptr) metrics_->SetWorkers(registered, live);
  // After a pause of this process the registry did not count the gap as any worker's
  // silence (worker_registry.h); the jobs it might have hit say so.
  const WorkerRegistry::Pauses pauses = workers_->pauses();
  if (pauses.count > pauses_seen_) {
    for (int64_t i = pauses_seen_; i < pauses.count && metrics_ != nullptr; ++i) {
      metrics_->AddCoordinatorPause();
    }
    pauses_seen_ = pauses.count;
    for (const auto& [job_id, job] : active_) {
      AppendEventLocked(
          job_id, "coordinator_paused",
          absl::StrCat("the coordinator did not run for ",
                       absl::FormatDuration(absl::Trunc(pauses.newest, absl::Milliseconds(100))),
                       " (stopped or starved of CPU): that time does not count as any "
                       "worker's silence, since the coordinator read no heartbeats then"));
    }
  }
  // A job is looked at rank by rank only when something may have failed it: one of its
  // workers is dead or idle past the grace, or the registry forgot a worker since its ranks'
  // workers were last all found registered. At 4,096 ranks the full look took 2-6 ms of
  // this lock every tick, and every heartbeat waits for this lock.
  const absl::Time now = clock_->Now();
  std::set<std::string> idle_too_long;
  for (const auto& [worker, since] : idle_since_) {
    if (now - since > options_.lost_rank_grace) idle_too_long.insert(worker);
  }
  std::set<std::string> suspect_jobs;
  for (const std::set<std::string>* suspects :
       std::initializer_list<const std::set<std::string>*>{&census.dead, &idle_too_long}) {
    for (const std::string& worker : *suspects) {
      const auto assigned = worker_job_.find(worker);
      if (assigned != worker_job_.end()) suspect_jobs.insert(assigned->second);
    }
  }
  std::vector<std::pair<std::string, std::string>> failures;
  for (auto& [job_id, job] : active_) {
    const bool membership_known = job.checked_removals == census.removals;
    if (membership_known && suspect_jobs.count(job_id) == 0) continue;
    const std::vector<bool> registered = membership_known
                                             ? std::vector<bool>(job.workers.size(), true)
                                             : workers_->AreRegistered(job.workers);
    bool failed = false;
    for (size_t rank = 0; rank < job.workers.size() && !failed; ++rank) {
      const std::string& worker = job.workers[rank];
      if (job.finished.count(static_cast<int>(rank)) > 0) continue;
      if (!registered[rank] || census.dead.count(worker) > 0) {
        if (metrics_ != nullptr) metrics_->AddMissedHeartbeat();
        failures.emplace_back(
            job_id, absl::StrCat("worker ", worker, " (rank ", rank, ") stopped heartbeating"));
        failed = true;
      } else if (idle_too_long.count(worker) > 0) {
        failures.emplace_back(job_id, absl::StrCat("worker ", worker, " (rank ", rank,
                                                   ") is idle: its training process ended "
                                                   "without reporting"));
        failed = true;
      }
    }
    // A finished rank's worker may be gone legitimately; the count still says "looked".
    if (!failed) job.checked_removals = census.removals;
  }
  // No caller to tell: a failure to store the outcome was logged and counted where it
  // happened.
  for (const auto& [job_id, reason] : failures) FailGenerationLocked(job_id, reason).IgnoreError();
}

void JobManager::Tick() {
  // Writes the state dir refused are retried here, outside the manager's lock (the retry
  // backoff keeps a full disk from being hammered); a job whose writes all landed has a
  // new status to show.
  const std::vector<std::string> saved = store_->Flush();
  if (!saved.empty()) {
    MutexLock lock(&mutex_);
    for (const std::string& job_id : saved) BumpLocked(job_id);
  }
  if (checkpoints_ != nullptr) {
    // The checkpoints a placement may resume from are read and checked here, outside the
    // manager's lock: a large one takes seconds, and heartbeats, RPCs and the status page
    // wait for that lock. The store remembers each outcome (and checks every commit), so
    // this reads files only after a coordinator restart or a rank's DATA_LOSS.
    std::vector<std::string> unfinished;
    {
      MutexLock lock(&mutex_);
      JobListQuery query;
      query.states = {JOB_STATE_PENDING, JOB_STATE_PLACING, JOB_STATE_RUNNING};
      query.with_workers = false;  // ids only
      absl::StatusOr<JobListPage> page = store_->ListJobs(query);
      if (page.ok()) {
        for (const JobStatus& job : page->jobs) unfinished.push_back(job.job_id());
      } else {  // only the read-ahead is lost: a placement reads what it needs itself
        LogStoreReadFailure("checkpoint read-ahead", page.status());
      }
    }
    for (const std::string& job_id : unfinished) checkpoints_->VerifyAhead(job_id);
  }
  {
    MutexLock lock(&mutex_);
    DetectLostRanksLocked();
    AdmitLocked();
  }
  ExpireEndedJobs();
}

}  // namespace mtrain
