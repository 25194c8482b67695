// The one-line progress display of `trainctl submit --wait` and `trainctl watch`:
//
//   RUNNING [############--------] step 120/200 60% | loss 2.6351 | 2124 tok/s | elapsed 2m03s |
//   ETA 1m23s
//
// Pure functions of a JobStatus, so every case (no data yet, unknown total, finished job)
// is unit-tested; the caller decides where the line goes (redrawn with '\r' on a
// terminal, printed as a plain line otherwise).
#ifndef MTRAIN_COORDINATOR_CLI_PROGRESS_BAR_H_
#define MTRAIN_COORDINATOR_CLI_PROGRESS_BAR_H_

#include <cstdint>
#include <string>

#include "absl/time/time.h"
#include "proto/coordinator.pb.h"

namespace mtrain {

// Characters between the brackets of the bar.
inline constexpr int kProgressBarWidth = 20;

// Time left for a RUNNING job: the remaining steps at the job's tokens/s (tokens per step
// = global_batch_size * seq_length of the effective spec), or, without a rate, at the last
// step's step_seconds. absl::InfiniteDuration() when there is no data yet, the total is
// unknown (<= 0) or the job is not RUNNING (waiting for workers takes an unknown time);
// zero once the last step is done.
absl::Duration EstimateTimeRemaining(const JobStatus& status, int64_t total_steps);

// One line, no newline: state, bar and percentage (when the total is known), step/steps,
// loss, tokens/s, elapsed time and, while the job has not finished, "ETA 1m23s" or
// "ETA --" before there is data. "loss --" and "-- tok/s" before the first step.
std::string RenderProgressLine(const JobStatus& status, int64_t total_steps,
                               absl::Duration elapsed);

// `line` cut to fit a terminal of `columns` columns without wrapping (a wrapped line
// cannot be redrawn with '\r'); unchanged when columns <= 0 (width unknown).
std::string FitToColumns(const std::string& line, int columns);

}  // namespace mtrain

#endif  // MTRAIN_COORDINATOR_CLI_PROGRESS_BAR_H_
