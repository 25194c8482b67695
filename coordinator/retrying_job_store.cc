#include "coordinator/retrying_job_store.h"

#include <algorithm>
#include <cstdio>
#include <limits>
#include <map>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/status_macros.h"

namespace mtrain {
namespace {

// "PENDING" for JOB_STATE_PENDING, as JobStore's "state" events spell it.
std::string ShortStateName(JobState state) {
  if (!JobState_IsValid(state)) return absl::StrCat("JobState(", static_cast<int>(state), ")");
  std::string name = JobState_Name(state);
  absl::string_view short_name = name;
  absl::ConsumePrefix(&short_name, "JOB_STATE_");
  return std::string(short_name);
}

// N of "job-N" (JobStore's ids); 0 for anything else, which no listing page covers.
int64_t JobNumber(absl::string_view job_id) {
  int64_t n = 0;
  if (!absl::ConsumePrefix(&job_id, "job-") || !absl::SimpleAtoi(job_id, &n)) return 0;
  return n;
}

JobEvent EventOf(int64_t now_ms, const std::string& kind, const std::string& message) {
  JobEvent event;
  event.set_unix_ms(now_ms);
  event.set_kind(kind);
  event.set_message(message);
  return event;
}

}  // namespace

RetryingJobStore::RetryingJobStore(JobStore* store, const Clock* clock, CoordinatorMetrics* metrics,
                                   int max_queued_records_per_job)
    : store_(store),
      clock_(clock),
      metrics_(metrics),
      max_queued_records_(max_queued_records_per_job) {}

bool RetryingJobStore::IsRequestError(const absl::Status& status) {
  return status.code() == absl::StatusCode::kNotFound ||
         status.code() == absl::StatusCode::kInvalidArgument;
}

absl::StatusOr<std::string> RetryingJobStore::CreateJob(const JobSpec& spec, int64_t now_ms) {
  MutexLock lock(&mutex_);
  return store_->CreateJob(spec, now_ms);
}

void RetryingJobStore::DescribeBacklog(const Backlog& backlog, JobStatus* row) {
  const std::string note = absl::StrCat(
      "the coordinator's state dir refuses writes (", backlog.first_error.message(), "); ",
      backlog.writes.size(), " change(s) of this job are kept in memory and retried since ",
      absl::FormatTime("%H:%M:%S UTC", backlog.first_failure, absl::UTCTimeZone()));
  row->set_message(row->message().empty() ? note : absl::StrCat(row->message(), " [", note, "]"));
}

absl::StatusOr<JobStatus> RetryingJobStore::GetJob(const std::string& job_id) const {
  MutexLock lock(&mutex_);
  const auto it = backlogs_.find(job_id);
  if (it == backlogs_.end()) return store_->GetJob(job_id);
  JobStatus row = it->second.row;
  DescribeBacklog(it->second, &row);
  return row;
}

absl::StatusOr<std::vector<JobStatus>> RetryingJobStore::ListJobs() const {
  MutexLock lock(&mutex_);
  ASSIGN_OR_RETURN(std::vector<JobStatus> jobs, store_->ListJobs());
  if (backlogs_.empty()) return jobs;
  for (JobStatus& job : jobs) {
    const auto it = backlogs_.find(job.job_id());
    if (it == backlogs_.end()) continue;
    job = it->second.row;
    DescribeBacklog(it->second, &job);
  }
  return jobs;
}

absl::StatusOr<JobListPage> RetryingJobStore::ListJobs(const JobListQuery& query) const {
  MutexLock lock(&mutex_);
  ASSIGN_OR_RETURN(JobListPage page, store_->ListJobs(query));
  if (backlogs_.empty()) return page;
  const auto matches = [&query](const JobStatus& job) {
    const bool state_ok =
        query.states.empty() ||
        std::find(query.states.begin(), query.states.end(), job.state()) != query.states.end();
    return state_ok && absl::StartsWith(job.spec().name(), query.name_prefix);
  };
  // The page covers job numbers (after_job, last] where `last` is where it stopped; to its
  // end when it is the last page.
  const int64_t last =
      page.next_after_job > 0 ? page.next_after_job : std::numeric_limits<int64_t>::max();
  std::map<int64_t, JobStatus> by_number;
  for (JobStatus& job : page.jobs) {
    by_number.emplace(JobNumber(job.job_id()), std::move(job));
  }
  for (const auto& [job_id, backlog] : backlogs_) {
    const int64_t n = JobNumber(job_id);
    if (n <= query.after_job || n > last) continue;
    by_number.erase(n);
    if (!matches(backlog.row)) continue;
    JobStatus row = backlog.row;
    DescribeBacklog(backlog, &row);
    by_number.emplace(n, std::move(row));
  }
  page.jobs.clear();
  for (auto& [n, job] : by_number) {
    if (query.max_jobs >= 0 && static_cast<int64_t>(page.jobs.size()) >= query.max_jobs) {
      page.next_after_job = JobNumber(page.jobs.back().job_id());
      break;
    }
    page.jobs.push_back(std::move(job));
  }
  return page;
}

absl::StatusOr<JobEventPage> RetryingJobStore::Events(const std::string& job_id,
                                                      int64_t after_event, int64_t max_events,
                                                      int64_t max_bytes) const {
  MutexLock lock(&mutex_);
  ASSIGN_OR_RETURN(JobEventPage page, store_->Events(job_id, after_event, max_events, max_bytes));
  const auto it = backlogs_.find(job_id);
  if (it == backlogs_.end() || page.next_after_event > 0) return page;
  for (const QueuedWrite& write : it->second.writes) {
    if (!write.event.kind().empty()) page.events.push_back(write.event);
  }
  return page;
}

absl::Status RetryingJobStore::DeleteJob(const std::string& job_id) {
  MutexLock lock(&mutex_);
  RETURN_IF_ERROR(store_->DeleteJob(job_id));
  backlogs_.erase(job_id);
  PublishLocked();
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> RetryingJobStore::JobsEndedBy(int64_t unix_ms,
                                                                       int64_t limit) const {
  MutexLock lock(&mutex_);
  return store_->JobsEndedBy(unix_ms, limit);
}

absl::StatusOr<std::vector<JobEvent>> RetryingJobStore::Events(const std::string& job_id) const {
  MutexLock lock(&mutex_);
  ASSIGN_OR_RETURN(std::vector<JobEvent> events, store_->Events(job_id));
  const auto it = backlogs_.find(job_id);
  if (it == backlogs_.end()) return events;
  for (const QueuedWrite& write : it->second.writes) {
    if (!write.event.kind().empty()) events.push_back(write.event);
  }
  return events;
}

absl::StatusOr<std::vector<StepMetrics>> RetryingJobStore::Steps(const std::string& job_id,
                                                                 int64_t after_step,
                                                                 int64_t limit) const {
  MutexLock lock(&mutex_);
  const auto it = backlogs_.find(job_id);
  if (it == backlogs_.end()) return store_->Steps(job_id, after_step, limit);
  ASSIGN_OR_RETURN(const std::vector<StepMetrics> stored, store_->Steps(job_id, after_step, -1));
  std::map<int64_t, StepMetrics> by_step;
  for (const StepMetrics& m : stored) by_step[m.step()] = m;
  // Queued rows replace stored ones of the same step, as the store will when they land.
  for (const QueuedWrite& write : it->second.writes) {
    if (write.has_step && write.step.step() > after_step) by_step[write.step.step()] = write.step;
  }
  std::vector<StepMetrics> steps;
  for (auto& [step, m] : by_step) {
    if (limit >= 0 && static_cast<int64_t>(steps.size()) >= limit) break;
    steps.push_back(std::move(m));
  }
  return steps;
}

void RetryingJobStore::NoteFailureLocked(Backlog* backlog, const absl::Status& status) {
  ++backlog->failed_attempts;
  if (metrics_ != nullptr) metrics_->AddStateDirWriteFailure("jobs");
  // A retry that fails again waits longer; one error message (the newest) is enough.
  backlog->next_try = clock_->Now() + backlog->backoff;
  backlog->backoff = std::min(backlog->backoff * 2, kStoreRetryMaxBackoff);
  if (backlog->first_error.ok()) backlog->first_error = status;
}

void RetryingJobStore::EnqueueLocked(Backlog* backlog, QueuedWrite write) {
  const bool record = write.record;
  backlog->writes.push_back(std::move(write));
  if (!record || ++backlog->queued_records <= max_queued_records_) return;
  // The oldest queued event or step row goes; state writes stay, and so does the failure
  // event (not a `record`), so the log says what happened.
  for (auto it = backlog->writes.begin(); it != backlog->writes.end(); ++it) {
    if (it->record) {
      backlog->writes.erase(it);
      --backlog->queued_records;
      ++backlog->dropped_records;
      return;
    }
  }
}

absl::Status RetryingJobStore::WriteLocked(
    const std::string& job_id, QueuedWrite write,
    const std::function<absl::Status(const JobStatus&)>& check,
    const std::function<void(JobStatus*, QueuedWrite*)>& mutate) {
  auto it = backlogs_.find(job_id);
  if (it != backlogs_.end()) {
    // Behind earlier writes of this job: checked against the state they leave, queued.
    if (check) RETURN_IF_ERROR(check(it->second.row));
    mutate(&it->second.row, &write);
    EnqueueLocked(&it->second, std::move(write));
    PublishLocked();
    return absl::OkStatus();
  }
  const absl::Status written = write.apply(store_);
  if (written.ok() || IsRequestError(written)) return written;
  return QueueRefusedLocked(job_id, std::move(write), written, check, mutate);
}

absl::Status RetryingJobStore::QueueRefusedLocked(
    const std::string& job_id, QueuedWrite write, const absl::Status& written,
    const std::function<absl::Status(const JobStatus&)>& check,
    const std::function<void(JobStatus*, QueuedWrite*)>& mutate) {
  // The store refused it: about the request (a forbidden transition), or the storage?
  absl::StatusOr<JobStatus> row = store_->GetJob(job_id);
  if (!row.ok()) return written;
  if (check) RETURN_IF_ERROR(check(*row));
  Backlog& backlog = backlogs_[job_id];
  backlog.row = *std::move(row);
  backlog.first_failure = clock_->Now();
  NoteFailureLocked(&backlog, written);
  // First in the queue, so the log says when and why the writes were held back.
  QueuedWrite failed_event;
  failed_event.event =
      EventOf(absl::ToUnixMillis(backlog.first_failure), "state_dir_write_failed",
              absl::StrCat("the state dir refused a write (",
                           absl::StatusCodeToString(written.code()), ": ", written.message(),
                           "); this job's changes are kept in memory and retried"));
  failed_event.apply = [event = failed_event.event, job_id](JobStore* store) {
    return store->AppendEvent(job_id, event.kind(), event.message(), event.unix_ms());
  };
  backlog.writes.push_back(std::move(failed_event));
  mutate(&backlog.row, &write);
  EnqueueLocked(&backlog, std::move(write));
  PublishLocked();
  return absl::OkStatus();
}

absl::Status RetryingJobStore::Transition(const std::string& job_id, JobState to,
                                          const std::string& message, int64_t now_ms) {
  MutexLock lock(&mutex_);
  auto check = [&](const JobStatus& row) -> absl::Status {
    if (!IsAllowedJobTransition(row.state(), to)) {
      return absl::FailedPreconditionError(absl::StrCat(
          job_id, ": cannot go from ", ShortStateName(row.state()), " to ", ShortStateName(to),
          IsTerminalJobState(row.state()) ? " (the job has finished)" : ""));
    }
    return absl::OkStatus();
  };
  QueuedWrite write;
  write.apply = [=](JobStore* store) { return store->Transition(job_id, to, message, now_ms); };
  auto mutate = [&](JobStatus* row, QueuedWrite* queued) {
    // The "state" event JobStore::Transition appends, for Events() while queued.
    std::string text = absl::StrCat(ShortStateName(row->state()), " -> ", ShortStateName(to));
    if (!message.empty()) absl::StrAppend(&text, ": ", message);
    queued->event = EventOf(now_ms, "state", text);
    const bool says_why =
        to == JOB_STATE_FAILED || to == JOB_STATE_CANCELLED || to == JOB_STATE_PENDING;
    row->set_state(to);
    row->set_message(says_why ? message : "");
    row->set_updated_unix_ms(now_ms);
  };
  return WriteLocked(job_id, std::move(write), check, mutate);
}

absl::Status RetryingJobStore::SetPlacement(const std::string& job_id, int64_t generation,
                                            int32_t restarts,
                                            const std::vector<std::string>& workers,
                                            int64_t now_ms) {
  MutexLock lock(&mutex_);
  QueuedWrite write;
  write.apply = [=](JobStore* store) {
    return store->SetPlacement(job_id, generation, restarts, workers, now_ms);
  };
  auto check = [&](const JobStatus&) -> absl::Status {
    if (generation < 0) return absl::InvalidArgumentError("generation: must not be negative");
    if (restarts < 0) return absl::InvalidArgumentError("restarts: must not be negative");
    return absl::OkStatus();
  };
  auto mutate = [&](JobStatus* row, QueuedWrite*) {
    row->set_generation(generation);
    row->set_restarts(restarts);
    row->clear_workers();
    for (const std::string& w : workers) row->add_workers(w);
    row->set_updated_unix_ms(now_ms);
  };
  return WriteLocked(job_id, std::move(write), check, mutate);
}

namespace {

// A step row as a queued write and how it changes the job's row.
struct StepWrite {
  std::function<absl::Status(JobStore*)> apply;
  std::function<void(JobStatus*)> mutate;
};

StepWrite StepWriteOf(const std::string& job_id, const StepMetrics& metrics, int64_t now_ms) {
  StepWrite write;
  write.apply = [=](JobStore* store) { return store->RecordStep(job_id, metrics, now_ms); };
  write.mutate = [metrics, now_ms](JobStatus* row) {
    row->set_step(metrics.step());
    row->set_loss(metrics.has_loss() ? metrics.loss() : 0);
    row->set_tokens_per_second(metrics.tokens_per_second());
    *row->mutable_latest() = metrics;
    row->set_updated_unix_ms(now_ms);
  };
  return write;
}

}  // namespace

absl::Status RetryingJobStore::RecordStep(const std::string& job_id, const StepMetrics& metrics,
                                          int64_t now_ms) {
  MutexLock lock(&mutex_);
  StepWrite step = StepWriteOf(job_id, metrics, now_ms);
  QueuedWrite write;
  write.apply = std::move(step.apply);
  write.record = true;
  write.has_step = true;
  write.step = metrics;
  return WriteLocked(job_id, std::move(write), nullptr,
                     [&](JobStatus* row, QueuedWrite*) { step.mutate(row); });
}

std::vector<absl::Status> RetryingJobStore::RecordSteps(const std::vector<StepRow>& rows,
                                                        int64_t now_ms) {
  MutexLock lock(&mutex_);
  std::vector<absl::Status> results(rows.size());
  // Rows of jobs with queued writes queue behind them, in order; the others go to the
  // store together, in one transaction.
  std::vector<size_t> direct;
  std::vector<StepRow> batch;
  for (size_t i = 0; i < rows.size(); ++i) {
    if (backlogs_.count(rows[i].job_id) > 0) {
      results[i] = RecordStepLocked(rows[i], now_ms, nullptr);
    } else {
      direct.push_back(i);
      batch.push_back(rows[i]);
    }
  }
  if (batch.empty()) return results;
  const std::vector<absl::Status> written = store_->RecordSteps(batch, now_ms);
  for (size_t k = 0; k < direct.size(); ++k) {
    const size_t i = direct[k];
    results[i] = written[k].ok() || IsRequestError(written[k])
                     ? written[k]
                     : RecordStepLocked(rows[i], now_ms, &written[k]);
  }
  return results;
}

absl::Status RetryingJobStore::RecordStepLocked(const StepRow& row, int64_t now_ms,
                                                const absl::Status* refused) {
  StepWrite step = StepWriteOf(row.job_id, row.metrics, now_ms);
  QueuedWrite write;
  write.apply = std::move(step.apply);
  write.record = true;
  write.has_step = true;
  write.step = row.metrics;
  const auto mutate = [&](JobStatus* job, QueuedWrite*) { step.mutate(job); };
  if (refused != nullptr) {
    return QueueRefusedLocked(row.job_id, std::move(write), *refused, nullptr, mutate);
  }
  return WriteLocked(row.job_id, std::move(write), nullptr, mutate);
}

absl::Status RetryingJobStore::AppendEvent(const std::string& job_id, const std::string& kind,
                                           const std::string& message, int64_t now_ms) {
  MutexLock lock(&mutex_);
  QueuedWrite write;
  write.apply = [=](JobStore* store) { return store->AppendEvent(job_id, kind, message, now_ms); };
  write.record = true;
  write.event = EventOf(now_ms, kind, message);
  return WriteLocked(job_id, std::move(write), nullptr, [](JobStatus*, QueuedWrite*) {});
}

std::vector<std::string> RetryingJobStore::Flush() {
  std::vector<std::string> drained;
  MutexLock lock(&mutex_);
  if (backlogs_.empty()) return drained;
  const absl::Time now = clock_->Now();
  for (auto it = backlogs_.begin(); it != backlogs_.end();) {
    Backlog& backlog = it->second;
    if (now < backlog.next_try) {
      ++it;
      continue;
    }
    absl::Status status;
    while (!backlog.writes.empty()) {
      status = backlog.writes.front().apply(store_);
      // A write the store now refuses as a request (the job was removed meanwhile) can
      // never land: it is dropped rather than blocking the queue for good.
      if (!status.ok() && !IsRequestError(status)) break;
      if (backlog.writes.front().record) --backlog.queued_records;
      backlog.writes.pop_front();
    }
    if (!backlog.writes.empty()) {
      NoteFailureLocked(&backlog, status);
      ++it;
      continue;
    }
    const std::string job_id = it->first;
    const std::string summary = absl::StrCat(
        "the state dir takes writes again: this job's changes held in memory since ",
        absl::FormatTime("%H:%M:%S UTC", backlog.first_failure, absl::UTCTimeZone()), " (",
        backlog.failed_attempts, " failed attempt(s), first error: ", backlog.first_error.message(),
        ") are saved",
        backlog.dropped_records > 0
            ? absl::StrCat("; ", backlog.dropped_records,
                           " older events or step rows beyond the in-memory bound were dropped")
            : std::string());
    // Best effort (the backlog itself is saved; this event only tells of it): reported on
    // stderr when refused, and the next failure starts a new backlog anyway.
    if (const absl::Status appended =
            store_->AppendEvent(job_id, "state_dir_recovered", summary, absl::ToUnixMillis(now));
        !appended.ok()) {
      std::fprintf(stderr, "coordinator: %s: the state_dir_recovered event was not stored: %s\n",
                   job_id.c_str(), appended.ToString().c_str());
    }
    drained.push_back(job_id);
    it = backlogs_.erase(it);
  }
  PublishLocked();
  return drained;
}

int64_t RetryingJobStore::QueuedWrites() const {
  MutexLock lock(&mutex_);
  int64_t queued = 0;
  for (const auto& [job_id, backlog] : backlogs_) queued += backlog.writes.size();
  return queued;
}

void RetryingJobStore::PublishLocked() const {
  if (metrics_ == nullptr) return;
  int64_t queued = 0;
  for (const auto& [job_id, backlog] : backlogs_) queued += backlog.writes.size();
  metrics_->SetStateDirWritesQueued(queued);
}

}  // namespace mtrain
