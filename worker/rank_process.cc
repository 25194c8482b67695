#include "worker/rank_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"

namespace mtrain {

RankProcess::RankProcess(RankProcessOptions options) : options_(std::move(options)) {}

RankProcess::~RankProcess() { Abort(); }

absl::Status RankProcess::Start(const Assignment& assignment) {
  if (running()) {
    return absl::FailedPreconditionError(absl::StrCat("already running ", assignment_.job_id(),
                                                      " generation ", assignment_.generation()));
  }
  ::mkdir(options_.log_dir.c_str(), 0755);
  const std::string base =
      absl::StrCat(options_.log_dir, "/", assignment.job_id(), "-gen", assignment.generation(),
                   "-rank", assignment.rank().global_rank());
  const std::string assignment_path = base + ".assignment.pb";
  {
    std::ofstream out(assignment_path, std::ios::binary | std::ios::trunc);
    if (!out || !assignment.SerializeToOstream(&out)) {
      return absl::InternalError(absl::StrCat("cannot write ", assignment_path));
    }
  }
  std::vector<std::string> argv = {options_.train_binary, "--assignment=" + assignment_path,
                                   "--coordinator=" + options_.coordinator,
                                   absl::StrCat("--threads=", options_.threads)};
  if (!options_.token_file.empty()) argv.push_back("--token_file=" + options_.token_file);
  if (!options_.data_roots.empty()) argv.push_back("--data_root=" + options_.data_roots);
  log_path_ = base + ".log";
  // The child's environment, built before fork: after it only async-signal-safe calls.
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    if (options_.hide_gpus && std::strncmp(*e, "CUDA_VISIBLE_DEVICES=", 21) == 0) continue;
    env.emplace_back(*e);
  }
  if (options_.hide_gpus) env.emplace_back("CUDA_VISIBLE_DEVICES=");
  std::vector<char*> envp;
  for (const std::string& e : env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) return absl::InternalError(absl::StrCat("fork: ", std::strerror(errno)));
  if (pid == 0) {
    // The rank must not outlive its daemon (a dead daemon's rank would train on, holding
    // ports and cores, for a generation the coordinator has already given up on).
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    const int fd = ::open(log_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      ::dup2(fd, STDOUT_FILENO);
      ::dup2(fd, STDERR_FILENO);
    }
    ::execve(args[0], args.data(), envp.data());
    std::fprintf(stderr, "cannot execute %s: %s\n", args[0], std::strerror(errno));
    ::_exit(127);
  }
  pid_ = pid;
  assignment_ = assignment;
  return absl::OkStatus();
}

void RankProcess::Reaped(int status, RankExit* exit) {
  if (exit != nullptr) {
    exit->assignment = assignment_;
    exit->signaled = WIFSIGNALED(status);
    exit->signal = exit->signaled ? WTERMSIG(status) : 0;
    exit->exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 0;
    exit->log_path = log_path_;
  }
  pid_ = -1;
  stopped_since_.reset();
}

char ProcessStateOf(const std::string& stat) {
  const size_t paren = stat.rfind(')');
  if (paren == std::string::npos || paren + 2 >= stat.size() || stat[paren + 1] != ' ') {
    return '?';
  }
  return stat[paren + 2];
}

absl::Duration RankProcess::StoppedFor(absl::Time now) {
  if (!running()) {
    stopped_since_.reset();
    return absl::ZeroDuration();
  }
  std::ifstream in(absl::StrCat("/proc/", pid_, "/stat"));
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (ProcessStateOf(stat) != 'T') {
    stopped_since_.reset();
    return absl::ZeroDuration();
  }
  if (!stopped_since_.has_value()) stopped_since_ = now;
  return now - *stopped_since_;
}

bool RankProcess::Poll(RankExit* exit) {
  if (!running()) return false;
  int status = 0;
  if (::waitpid(pid_, &status, WNOHANG) != pid_) return true;
  Reaped(status, exit);
  return false;
}

void RankProcess::Abort(RankExit* exit) {
  if (!running()) return;
  ::kill(pid_, SIGTERM);
  const absl::Time deadline = absl::Now() + options_.abort_grace;
  int status = 0;
  while (::waitpid(pid_, &status, WNOHANG) != pid_) {
    if (absl::Now() > deadline) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, &status, 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  Reaped(status, exit);
  if (exit != nullptr) exit->aborted = true;
}

}  // namespace mtrain
