// Human renderings of jobs for `trainctl list` (one row per job) and `trainctl status`
// (one job, one field per line). `now` is passed in so ages are testable.
//
//   JOB       NAME        STATE      STEP        LOSS      TOK/S  AGE
//   job-0001  gpt-small   RUNNING    120/200     2.6351     2124  3m12s
#ifndef MTRAIN_COORDINATOR_CLI_JOB_TABLE_H_
#define MTRAIN_COORDINATOR_CLI_JOB_TABLE_H_

#include <string>

#include "absl/time/time.h"
#include "proto/coordinator.pb.h"

namespace mtrain {

// A header line, then one line per job in the order given, each ending in '\n'. Loss and
// tokens/s read "-" before a job's first step.
std::string FormatJobTable(const ListJobsResponse& jobs, absl::Time now);

// "field  value" lines, each ending in '\n': job, name, state, step, loss, tokens/s,
// generation, restarts, workers (by global rank), age and, when set, message.
std::string FormatJobStatus(const JobStatus& status, absl::Time now);

}  // namespace mtrain

#endif  // MTRAIN_COORDINATOR_CLI_JOB_TABLE_H_
