#include "coordinator/cli/job_text.h"

#include <algorithm>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "spec/job_spec_defaults.h"

namespace mtrain {

std::string JobStateName(JobState state) {
  if (!JobState_IsValid(state)) return absl::StrCat("UNKNOWN(", static_cast<int>(state), ")");
  std::string name = JobState_Name(state);
  constexpr absl::string_view kPrefix = "JOB_STATE_";
  if (absl::StartsWith(name, kPrefix)) name.erase(0, kPrefix.size());
  return name;
}

bool IsFinishedJobState(JobState state) {
  return state == JOB_STATE_SUCCEEDED || state == JOB_STATE_FAILED || state == JOB_STATE_CANCELLED;
}

std::string CompactDuration(absl::Duration duration) {
  if (duration == absl::InfiniteDuration()) return "--";
  if (duration < absl::ZeroDuration()) return "0s";
  const int64_t seconds = absl::ToInt64Seconds(duration);
  if (seconds < 60) return absl::StrFormat("%ds", seconds);
  if (seconds < 3600) return absl::StrFormat("%dm%02ds", seconds / 60, seconds % 60);
  if (seconds < 86400) return absl::StrFormat("%dh%02dm", seconds / 3600, seconds % 3600 / 60);
  return absl::StrFormat("%dd%02dh", seconds / 86400, seconds % 86400 / 3600);
}

std::string StepText(int64_t step, int64_t total_steps) {
  if (total_steps <= 0) return absl::StrCat(step);
  return absl::StrCat(step, "/", total_steps);
}

JobSpec EffectiveSpec(const JobStatus& status) {
  JobSpec spec = status.spec();
  ApplyJobSpecDefaults(&spec);
  return spec;
}

int64_t TotalSteps(const JobStatus& status) {
  return std::max<int64_t>(0, EffectiveSpec(status).train().steps());
}

absl::Duration JobAge(const JobStatus& status, absl::Time now) {
  if (status.submitted_unix_ms() <= 0) return absl::ZeroDuration();
  return std::max(absl::ZeroDuration(), now - absl::FromUnixMillis(status.submitted_unix_ms()));
}

absl::Duration JobElapsed(const JobStatus& status, absl::Time now) {
  if (IsFinishedJobState(status.state()) && status.updated_unix_ms() > 0) {
    now = std::min(now, absl::FromUnixMillis(status.updated_unix_ms()));
  }
  return JobAge(status, now);
}

namespace {

// `text` cut to at most `max_bytes` without splitting a UTF-8 character, escaped, quoted.
std::string QuotedPrefix(const std::string& text, size_t max_bytes) {
  size_t end = std::min(text.size(), max_bytes);
  // Continuation bytes (10xxxxxx) belong to the character before them.
  while (end < text.size() && end > 0 && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80) {
    --end;
  }
  return absl::StrCat("\"", absl::Utf8SafeCEscape(text.substr(0, end)),
                      end < text.size() ? "..." : "", "\"");
}

}  // namespace

std::string GenerationSummary(const GeneratedText& text, size_t max_bytes) {
  return absl::StrCat(QuotedPrefix(text.prompt(), max_bytes), " -> ",
                      QuotedPrefix(text.text(), max_bytes));
}

}  // namespace mtrain
