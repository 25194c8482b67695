#include "coordinator/cli/job_watch.h"

#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "coordinator/cli/job_text.h"

namespace mtrain {

JobWatcher::JobWatcher(std::string job_id) : job_id_(std::move(job_id)) {}

JobWatcher::Update JobWatcher::Observe(const JobStatus& status) {
  Update update;
  const std::string prefix = absl::StrCat("job ", job_id_, ": ");
  const bool unsuccessful =
      status.state() == JOB_STATE_FAILED || status.state() == JOB_STATE_CANCELLED;
  const std::string why =
      unsuccessful && !status.message().empty() ? absl::StrCat(": ", status.message()) : "";
  if (!has_status_) {
    update.notices.push_back(absl::StrCat(prefix, JobStateName(status.state()), why));
  } else {
    if (status.restarts() > last_.restarts()) {
      std::string notice = absl::StrCat(prefix, "restart ", status.restarts(), " (generation ",
                                        status.generation(), ")");
      if (!status.message().empty()) absl::StrAppend(&notice, ": ", status.message());
      update.notices.push_back(std::move(notice));
    }
    if (status.state() != last_.state()) {
      update.notices.push_back(absl::StrCat(prefix, JobStateName(last_.state()), " -> ",
                                            JobStateName(status.state()), why));
    }
  }
  if (status.has_latest() && status.latest().step() > last_step_) {
    last_step_ = status.latest().step();
    update.new_step = true;
    for (const EvalTaskResult& eval : status.latest().evals()) {
      const std::string data = eval.data().substr(eval.data().rfind('/') + 1);
      update.notices.push_back(
          eval.task() == "perplexity"
              ? absl::StrFormat("%sstep %d: perplexity %.2f on %s", prefix, status.latest().step(),
                                eval.perplexity(), data)
              : absl::StrFormat("%sstep %d: %s accuracy %.4f on %s", prefix, status.latest().step(),
                                eval.task(), eval.accuracy(), data));
    }
    for (const GeneratedText& text : status.latest().generations()) {
      update.notices.push_back(absl::StrFormat(
          "%sstep %d: generated %s", prefix, status.latest().step(), GenerationSummary(text, 80)));
    }
    if (status.latest().has_validation_mlm_loss()) {
      const StepMetrics& m = status.latest();
      update.notices.push_back(absl::StrFormat(
          "%sstep %d: validation loss %.4f (masked-LM %.4f, accuracy %.1f%%; sentence order "
          "%.4f, accuracy %.1f%%)",
          prefix, m.step(), m.validation_loss(), m.validation_mlm_loss(),
          100.0 * m.validation_mlm_accuracy(), m.validation_sop_loss(),
          100.0 * m.validation_sop_accuracy()));
    } else if (status.latest().has_validation_choice_accuracy()) {
      const StepMetrics& m = status.latest();
      update.notices.push_back(
          absl::StrFormat("%sstep %d: validation loss %.4f, %.1f%% of questions right", prefix,
                          m.step(), m.validation_loss(), 100.0 * m.validation_choice_accuracy()));
    } else if (status.latest().has_validation_loss()) {
      const double loss = status.latest().validation_loss();
      update.notices.push_back(absl::StrFormat("%sstep %d: validation loss %.4f, perplexity %.2f",
                                               prefix, status.latest().step(), loss,
                                               std::exp(loss)));
    }
  }
  update.finished = IsFinishedJobState(status.state());
  has_status_ = true;
  last_ = status;
  return update;
}

std::optional<std::string> JobWatcher::FailureReason(const absl::Status& stream_status) const {
  if (!has_status_) {
    // Nothing arrived: the call itself failed (unknown job, no coordinator, ...).
    if (!stream_status.ok()) return stream_status.ToString();
    return absl::StrCat("the watch stream of job ", job_id_, " ended without a status");
  }
  if (IsFinishedJobState(last_.state())) {
    if (last_.state() == JOB_STATE_SUCCEEDED) return std::nullopt;
    std::string reason = absl::StrCat("job ", job_id_, " ", JobStateName(last_.state()));
    if (!last_.message().empty()) absl::StrAppend(&reason, ": ", last_.message());
    return reason;
  }
  std::string reason = absl::StrCat(
      "the watch stream of job ", job_id_, " ended before the job did (last seen ",
      JobStateName(last_.state()), " at step ", StepText(last_.step(), TotalSteps(last_)), ")");
  if (!stream_status.ok()) absl::StrAppend(&reason, ": ", stream_status.ToString());
  absl::StrAppend(&reason, "; it may still be running: trainctl watch ", job_id_);
  return reason;
}

}  // namespace mtrain
