// Starts a real binary as a child process for integration tests, with its stdout and
// stderr captured to a file, and helpers to wait for a line, signal it and reap it.
// The destructor kills (SIGKILL) and reaps a child that is still running, so a failing
// test leaves no process behind.
//
//   ASSERT_OK_AND_ASSIGN(auto coordinator, ChildProcess::Start(
//       {"coordinator/coordinator", "--listen=127.0.0.1:0"}, dir + "/coordinator.log"));
//   std::string line = coordinator->WaitForOutput("listening on ", absl::Seconds(10));
#ifndef MTRAIN_TESTS_CHILD_PROCESS_H_
#define MTRAIN_TESTS_CHILD_PROCESS_H_

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace mtrain {

class ChildProcess {
 public:
  // Spawns argv[0] (a path) with the arguments; output goes to `log_path` (truncated).
  static absl::StatusOr<std::unique_ptr<ChildProcess>> Start(const std::vector<std::string>& argv,
                                                             const std::string& log_path);

  ~ChildProcess();
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  // Waits until the log contains a line with `needle`; returns that whole line.
  // DEADLINE_EXCEEDED (with the log's tail) on timeout; ABORTED if the child exits first.
  absl::StatusOr<std::string> WaitForOutput(const std::string& needle, absl::Duration timeout);

  // Sends a signal (SIGTERM, SIGKILL, SIGSTOP, ...).
  void Signal(int signal_number);

  // Waits for exit; returns the exit code (128 + signal when killed by one).
  // DEADLINE_EXCEEDED if it is still running after `timeout`.
  absl::StatusOr<int> Wait(absl::Duration timeout);

  bool Running();
  pid_t pid() const { return pid_; }
  std::string Log() const;

 private:
  ChildProcess(pid_t pid, std::string log_path) : pid_(pid), log_path_(std::move(log_path)) {}
  // Non-blocking reap; true once the child has exited.
  bool Reap();

  pid_t pid_;
  std::string log_path_;
  bool exited_ = false;
  int exit_code_ = -1;
};

// The directory for a test's files (TEST_TMPDIR under Bazel, else /tmp).
std::string TestTempDir();

}  // namespace mtrain

#endif  // MTRAIN_TESTS_CHILD_PROCESS_H_
