// Runs the rank a worker daemon was assigned in its own process: `train --assignment=...`
// (so a crash in the engine never takes the daemon down, and aborting a rank is a signal).
// At most one rank at a time.
//
//   RankProcess ranks(options);
//   RETURN_IF_ERROR(ranks.Start(assignment));
//   if (!ranks.Poll(&exit)) ...   // reaps the child once it has exited
//   ranks.Abort();                // SIGTERM, then SIGKILL after the grace period
//
// Not thread-safe: the agent's loop owns it.
#ifndef MTRAIN_WORKER_RANK_PROCESS_H_
#define MTRAIN_WORKER_RANK_PROCESS_H_

#include <sys/types.h>

#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "proto/assignment.pb.h"

namespace mtrain {

struct RankProcessOptions {
  std::string train_binary;  // path of `train`
  std::string coordinator;   // HOST:PORT handed to the rank
  std::string token_file;    // handed to the rank; may be empty
  int threads = 0;           // --threads of the rank; 0: all cores
  std::string log_dir;       // assignment files and one log per rank run
  // The rank's --data_root (comma-separated, resolved); empty: the rank's default.
  std::string data_roots;
  // A CPU worker on a machine with GPUs hides them from its ranks (CUDA_VISIBLE_DEVICES
  // empty), so a DEVICE_AUTO job it was given trains on the CPU as it was placed.
  bool hide_gpus = false;
  absl::Duration abort_grace = absl::Seconds(3);
};

// How a rank process ended.
struct RankExit {
  Assignment assignment;
  int exit_code = 0;  // valid when !signaled
  int signal = 0;     // valid when signaled
  bool signaled = false;
  bool aborted = false;  // we stopped it
  std::string log_path;
};

class RankProcess {
 public:
  explicit RankProcess(RankProcessOptions options);
  ~RankProcess();  // aborts a running rank

  // Starts the rank. FAILED_PRECONDITION if one is running; INTERNAL if it cannot start.
  absl::Status Start(const Assignment& assignment);
  // True while a rank runs. Once it has exited, fills *exit (once) and returns false.
  bool Poll(RankExit* exit);
  // Stops the running rank (no-op if none) and reaps it; *exit describes it if given.
  void Abort(RankExit* exit = nullptr);

  // How long the running rank has been stopped by a signal (SIGSTOP, SIGTSTP: state T in
  // /proc/PID/stat), as seen by the calls so far: zero when it is not stopped now (or none
  // runs), else `now` minus the first call that saw it stopped. A rank held by a debugger
  // (state t) does not count: someone is looking at it on purpose.
  absl::Duration StoppedFor(absl::Time now);

  bool running() const { return pid_ > 0; }
  const Assignment& assignment() const { return assignment_; }

 private:
  void Reaped(int status, RankExit* exit);

  const RankProcessOptions options_;
  pid_t pid_ = -1;
  std::optional<absl::Time> stopped_since_;
  Assignment assignment_;
  std::string log_path_;
};

// The state letter of /proc/PID/stat's third field ('R', 'S', 'T', ...), or '?' if the
// process cannot be read. `stat` is that file's text (the command name in parentheses may
// hold spaces and parentheses itself, so the letter follows the last ')').
char ProcessStateOf(const std::string& stat);

}  // namespace mtrain

#endif  // MTRAIN_WORKER_RANK_PROCESS_H_
