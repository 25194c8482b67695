#include "coordinator/cli/flag_checks.h"

#include "absl/strings/str_cat.h"

namespace mtrain {

absl::Status CheckStepFlag(std::optional<int64_t> step) {
  if (!step.has_value() || *step >= 0) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("--step: must be >= 0, got ", *step,
                                                 "; leave it out for the newest checkpoint"));
}

absl::Status CheckTimeoutSecondsFlag(int64_t seconds) {
  if (seconds >= 1) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("--timeout_seconds: must be >= 1, got ", seconds));
}

}  // namespace mtrain
