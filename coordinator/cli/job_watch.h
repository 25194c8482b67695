// Follows the JobStatus messages of one WatchJob stream and decides what `trainctl watch`
// and `trainctl submit --wait` say about them: notices for state changes and restarts,
// whether a message brings a step not printed before (the stream repeats a step when
// something else changed, and replays steps after a restart from a checkpoint), and, once
// the stream is over, whether the command succeeded.
//
//   JobWatcher watcher(job_id);
//   while (reader->Read(&status)) {
//     JobWatcher::Update update = watcher.Observe(status);
//     for (const std::string& line : update.notices) Print(line);
//     if (update.new_step) PrintStep(status.latest());
//   }
//   std::optional<std::string> failure = watcher.FailureReason(FromGrpc(reader->Finish()));
//
// WatchJob replays a late watcher every step from the first, marked RUNNING even when the
// job has since ended. A text display therefore observes the job's current status (GetJob)
// first: when it has finished that is the whole story, and otherwise the replayed earlier
// steps are not new.
//
// Not thread-safe; one per stream.
#ifndef MTRAIN_COORDINATOR_CLI_JOB_WATCH_H_
#define MTRAIN_COORDINATOR_CLI_JOB_WATCH_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "proto/coordinator.pb.h"

namespace mtrain {

class JobWatcher {
 public:
  struct Update {
    // Whole lines without newlines, in order: "job J: RUNNING" the first time,
    // "job J: restart 1 (generation 2): REASON" when restarts grows,
    // "job J: PLACING -> RUNNING" on a state change (with ": MESSAGE" for FAILED and
    // CANCELLED when the coordinator gave one), "job J: step 50: validation loss 3.1416,
    // perplexity 23.14" for a new step that carries an evaluation, "job J: step 100:
    // perplexity 12.34 on wiki.txt" (or "cloze accuracy 0.6250 on lambada.jsonl") for each
    // train.eval_tasks result.
    std::vector<std::string> notices;
    // status.latest is present and its step is later than every step seen before, so
    // each step is reported once even across restarts.
    bool new_step = false;
    // The job reached SUCCEEDED, FAILED or CANCELLED.
    bool finished = false;
  };

  explicit JobWatcher(std::string job_id);

  Update Observe(const JobStatus& status);

  // Whether a status was observed, and the last one.
  bool has_status() const { return has_status_; }
  const JobStatus& last_status() const { return last_; }

  // Call once the stream has ended with `stream_status`. nullopt when the job SUCCEEDED;
  // otherwise the one-line reason the command fails: the job FAILED or was CANCELLED
  // (with the coordinator's message), or the stream ended or broke before the job finished
  // (with the last state and step seen, and the stream's error).
  std::optional<std::string> FailureReason(const absl::Status& stream_status) const;

 private:
  std::string job_id_;
  bool has_status_ = false;
  JobStatus last_;
  int64_t last_step_ = 0;  // Latest step reported as new; steps start at 1.
};

}  // namespace mtrain

#endif  // MTRAIN_COORDINATOR_CLI_JOB_WATCH_H_
