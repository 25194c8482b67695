#include "coordinator/cli/job_table.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "coordinator/cli/job_text.h"

namespace mtrain {
namespace {

// Before the first step these fields hold proto3's zeros, not measurements.
std::string LossText(const JobStatus& status) {
  return status.step() > 0 ? absl::StrFormat("%.4f", status.loss()) : "-";
}

std::string TokensPerSecondText(const JobStatus& status) {
  return status.tokens_per_second() > 0 ? absl::StrFormat("%.0f", status.tokens_per_second()) : "-";
}

std::string StepWithPercent(const JobStatus& status) {
  const int64_t total = TotalSteps(status);
  std::string text = StepText(status.step(), total);
  if (total > 0) absl::StrAppend(&text, absl::StrFormat(" (%d%%)", status.step() * 100 / total));
  return text;
}

}  // namespace

std::string FormatJobTable(const ListJobsResponse& jobs, absl::Time now) {
  constexpr const char* kRow = "%-20s %-20s %-10s %-13s %8s %10s  %s\n";
  std::string out = absl::StrFormat(kRow, "JOB", "NAME", "STATE", "STEP", "LOSS", "TOK/S", "AGE");
  for (const JobStatus& job : jobs.jobs()) {
    absl::StrAppend(
        &out, absl::StrFormat(kRow, job.job_id(), job.spec().name(), JobStateName(job.state()),
                              StepText(job.step(), TotalSteps(job)), LossText(job),
                              TokensPerSecondText(job), CompactDuration(JobAge(job, now))));
  }
  return out;
}

std::string FormatJobStatus(const JobStatus& status, absl::Time now) {
  constexpr const char* kField = "%-11s %s\n";
  std::string out;
  absl::StrAppend(&out, absl::StrFormat(kField, "job", status.job_id()));
  if (!status.spec().name().empty()) {
    absl::StrAppend(&out, absl::StrFormat(kField, "name", status.spec().name()));
  }
  absl::StrAppend(&out, absl::StrFormat(kField, "state", JobStateName(status.state())));
  absl::StrAppend(&out, absl::StrFormat(kField, "step", StepWithPercent(status)));
  absl::StrAppend(&out, absl::StrFormat(kField, "loss", LossText(status)));
  absl::StrAppend(&out, absl::StrFormat(kField, "tokens/s", TokensPerSecondText(status)));
  absl::StrAppend(&out, absl::StrFormat(kField, "generation", absl::StrCat(status.generation())));
  absl::StrAppend(&out, absl::StrFormat(kField, "restarts", absl::StrCat(status.restarts())));
  std::string workers = "-";
  if (status.workers_size() > 0) {
    // Indexed by global rank; "rank:worker" keeps the placement readable in one line.
    std::vector<std::string> ranks;
    for (int rank = 0; rank < status.workers_size(); ++rank) {
      ranks.push_back(absl::StrCat(rank, ":", status.workers(rank)));
    }
    workers = absl::StrCat(status.workers_size(), " (", absl::StrJoin(ranks, " "), ")");
  }
  absl::StrAppend(&out, absl::StrFormat(kField, "workers", workers));
  absl::StrAppend(&out, absl::StrFormat(kField, "age", CompactDuration(JobAge(status, now))));
  if (!status.message().empty()) {
    absl::StrAppend(&out, absl::StrFormat(kField, "message", status.message()));
  }
  return out;
}

}  // namespace mtrain
