// Short texts that every trainctl rendering of a job shares: state names, durations and
// the terminal states, so `list`, `status`, `watch` and the progress bar say the same
// thing the same way.
//
//   JobStateName(JOB_STATE_RUNNING)           -> "RUNNING"
//   CompactDuration(absl::Seconds(83))         -> "1m23s"
//   StepText(120, 200)                        -> "120/200"
#ifndef MTRAIN_COORDINATOR_CLI_JOB_TEXT_H_
#define MTRAIN_COORDINATOR_CLI_JOB_TEXT_H_

#include <cstdint>
#include <string>

#include "absl/time/time.h"
#include "proto/coordinator.pb.h"

namespace mtrain {

// The enum name without its "JOB_STATE_" prefix; "UNKNOWN(n)" for values this build does
// not know (a newer coordinator).
std::string JobStateName(JobState state);

// SUCCEEDED, FAILED and CANCELLED: the coordinator never moves a job out of these, and
// WatchJob ends its stream after sending one.
bool IsFinishedJobState(JobState state);

// Compact, at most two units, truncated to whole seconds: "0s", "42s", "1m23s", "2h05m",
// "3d04h". Negative and infinite durations (clock skew, no data) are "0s" and "--".
std::string CompactDuration(absl::Duration duration);

// "step/steps", or just "step" when the total is unknown (<= 0).
std::string StepText(int64_t step, int64_t total_steps);

// The job's spec with every omitted field at its default, so a rendering never shows
// "unknown" for what the coordinator would run anyway (it stores specs resolved; this
// covers one that did not).
JobSpec EffectiveSpec(const JobStatus& status);

// train.steps of the effective spec.
int64_t TotalSteps(const JobStatus& status);

// How long ago the job was submitted, measured against `now`; zero when the coordinator
// did not say or the clocks disagree.
absl::Duration JobAge(const JobStatus& status, absl::Time now);

// How long the job has been going: from submission to `now`, or to its last update once
// it has finished (so a finished job's time stops growing).
absl::Duration JobElapsed(const JobStatus& status, absl::Time now);

// A generated text on one line: the prompt and its continuation, C-escaped and quoted,
// each cut to `max_bytes` (at a UTF-8 character boundary) with "..." after a cut:
//   "ROMEO:" -> " What light through yonder..."
std::string GenerationSummary(const GeneratedText& text, size_t max_bytes);

}  // namespace mtrain

#endif  // MTRAIN_COORDINATOR_CLI_JOB_TEXT_H_
