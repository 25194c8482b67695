#include "coordinator/cli/flag_checks.h"

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

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

absl::Status CheckLimitFlag(int64_t limit) {
  if (limit >= 0) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("--limit: must be >= 0 (0 lists every job), got ", limit));
}

absl::StatusOr<std::vector<JobState>> ParseStateFlag(const std::string& states) {
  std::vector<JobState> parsed;
  for (absl::string_view word : absl::StrSplit(states, ',', absl::SkipWhitespace())) {
    std::string name = absl::AsciiStrToUpper(absl::StripAsciiWhitespace(word));
    if (!absl::StartsWith(name, "JOB_STATE_")) name = absl::StrCat("JOB_STATE_", name);
    JobState state = JOB_STATE_UNSPECIFIED;
    if (!JobState_Parse(name, &state) || state == JOB_STATE_UNSPECIFIED) {
      return absl::InvalidArgumentError(
          absl::StrCat("--state: '", word,
                       "' is not a job state [rule: comma-separated pending, placing, running, "
                       "succeeded, failed, cancelled]"));
    }
    parsed.push_back(state);
  }
  return parsed;
}

}  // namespace mtrain
