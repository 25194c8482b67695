#include "coordinator/cli/progress_bar.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "coordinator/cli/job_text.h"

namespace mtrain {

absl::Duration EstimateTimeRemaining(const JobStatus& status, int64_t total_steps) {
  if (total_steps <= 0 || status.state() != JOB_STATE_RUNNING) return absl::InfiniteDuration();
  const int64_t remaining_steps = total_steps - status.step();
  if (remaining_steps <= 0) return absl::ZeroDuration();
  const JobSpec spec = EffectiveSpec(status);
  const double tokens_per_step =
      static_cast<double>(spec.parallel().global_batch_size()) * spec.model().seq_length();
  const double tokens_per_second = status.tokens_per_second() > 0
                                       ? status.tokens_per_second()
                                       : status.latest().tokens_per_second();
  if (tokens_per_step > 0 && tokens_per_second > 0) {
    return absl::Seconds(remaining_steps * tokens_per_step / tokens_per_second);
  }
  if (status.latest().step_seconds() > 0) {
    return absl::Seconds(remaining_steps * status.latest().step_seconds());
  }
  return absl::InfiniteDuration();
}

std::string RenderProgressLine(const JobStatus& status, int64_t total_steps,
                               absl::Duration elapsed) {
  std::string line = JobStateName(status.state());
  if (total_steps > 0) {
    const double fraction = std::clamp(static_cast<double>(status.step()) / total_steps, 0.0, 1.0);
    const int filled = static_cast<int>(fraction * kProgressBarWidth);
    absl::StrAppend(&line, " [", std::string(filled, '#'),
                    std::string(kProgressBarWidth - filled, '-'), "]");
    absl::StrAppend(&line, " step ", StepText(status.step(), total_steps),
                    absl::StrFormat(" %d%%", static_cast<int>(fraction * 100)));
  } else {
    absl::StrAppend(&line, " step ", StepText(status.step(), total_steps));
  }
  // Before the first step the loss field holds proto3's zero, not a measurement.
  if (status.step() > 0) {
    absl::StrAppend(&line, absl::StrFormat(" | loss %.4f", status.loss()));
  } else {
    absl::StrAppend(&line, " | loss --");
  }
  if (status.tokens_per_second() > 0) {
    absl::StrAppend(&line, absl::StrFormat(" | %.0f tok/s", status.tokens_per_second()));
  } else {
    absl::StrAppend(&line, " | -- tok/s");
  }
  absl::StrAppend(&line, " | elapsed ", CompactDuration(elapsed));
  if (!IsFinishedJobState(status.state())) {
    absl::StrAppend(&line, " | ETA ", CompactDuration(EstimateTimeRemaining(status, total_steps)));
  }
  return line;
}

std::string FitToColumns(const std::string& line, int columns) {
  // Leave the last column free: a line that fills it makes some terminals wrap the cursor.
  if (columns <= 1 || static_cast<int>(line.size()) < columns) return line;
  return line.substr(0, columns - 1);
}

}  // namespace mtrain
