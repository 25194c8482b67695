// Checks of trainctl's flags, apart from main so they are unit-tested. A
// flag value out of range is a usage error (exit status 2): the message is what trainctl
// prints after "trainctl COMMAND: ", naming the flag first.
//
//   absl::Status ok = CheckStepFlag(absl::GetFlag(FLAGS_step));
//   if (!ok.ok()) return UsageError(command, std::string(ok.message()));
#ifndef MTRAIN_COORDINATOR_CLI_FLAG_CHECKS_H_
#define MTRAIN_COORDINATOR_CLI_FLAG_CHECKS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "proto/coordinator.pb.h"

namespace mtrain {

// --step: a checkpoint's step, so >= 0 (step 0 is a job's initial weights). Absent means
// the newest; a typed number never does, so `--step=-1` is refused rather than quietly
// exporting the newest checkpoint. INVALID_ARGUMENT "--step: must be >= 0, got -1; ...".
absl::Status CheckStepFlag(std::optional<int64_t> step);

// --timeout_seconds: the deadline of each RPC, so >= 1 (zero or less would fail every
// call with DEADLINE_EXCEEDED before it is sent). INVALID_ARGUMENT
// "--timeout_seconds: must be >= 1, got 0".
absl::Status CheckTimeoutSecondsFlag(int64_t seconds);

// --limit of `list`: how many jobs at most, 0 for all. INVALID_ARGUMENT
// "--limit: must be >= 0 (0 lists every job), got -1".
absl::Status CheckLimitFlag(int64_t limit);

// --state of `list`: job states, comma-separated, with or without the JOB_STATE_ prefix,
// any case ("running,FAILED"); empty means every state. INVALID_ARGUMENT naming the word
// and the states there are.
absl::StatusOr<std::vector<JobState>> ParseStateFlag(const std::string& states);

}  // namespace mtrain

#endif  // MTRAIN_COORDINATOR_CLI_FLAG_CHECKS_H_
