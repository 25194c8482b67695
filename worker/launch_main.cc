// `launch`: starts every rank of a spec's static world on this machine (W = tensor *
// pipeline * data `train` processes), waits for them and reports each exit code, like
// torchrun's local launcher.
//
//   launch --spec=job.json --out_dir=run/ [-- extra train flags]
//
// run/ receives rank-R.log (each rank's output), metrics.jsonl (the loss-computing ranks'
// JSON lines, each with its "rank") and the rendezvous directory. The narrating rank's
// progress lines are echoed to stdout. If a rank fails, the others are given
// --grace_period to notice (their collectives fail) and are then killed, so a launch
// never hangs. Exit status 0 when every rank exits 0, else 1 with a table of exit codes;
// after SIGINT/SIGTERM (every rank stopped) 128 + the signal's number, as a shell reports.
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "kernels/cpu_threads.h"
#include "plan/pipeline_placement.h"
#include "spec/job_spec_validation.h"

ABSL_FLAG(std::string, spec, "", "job spec JSON file (required)");
ABSL_FLAG(std::string, out_dir, "", "directory for logs, metrics and rendezvous (required)");
ABSL_FLAG(std::string, train_binary, "",
          "path of `train` (default: the `train` next to this binary)");
ABSL_FLAG(int, threads_per_rank, 0, "CPU threads per rank (0: cores / ranks, at least 1)");
ABSL_FLAG(absl::Duration, grace_period, absl::Seconds(20),
          "after a rank fails, how long the others get to exit before they are killed");

namespace mtrain {
namespace {

volatile sig_atomic_t g_interrupted = 0;  // the signal's number, once one arrived
void OnSignal(int signal_number) { g_interrupted = signal_number; }

std::string SiblingBinary(const std::string& name) {
  char self[4096];
  const ssize_t n = ::readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n <= 0) return name;
  self[n] = '\0';
  std::string path(self);
  return path.substr(0, path.rfind('/') + 1) + name;
}

pid_t Spawn(const std::vector<std::string>& argv, const std::string& log_path) {
  const pid_t pid = ::fork();
  if (pid != 0) return pid;
  // Child: dies with the launcher (never an orphaned rank), output to the rank's log.
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  FILE* log = std::fopen(log_path.c_str(), "w");
  if (log != nullptr) {
    ::dup2(fileno(log), STDOUT_FILENO);
    ::dup2(fileno(log), STDERR_FILENO);
  }
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  ::execv(args[0], args.data());
  std::fprintf(stderr, "launch: cannot execute %s: %s\n", args[0], std::strerror(errno));
  ::_exit(127);
}

int Run(const std::vector<std::string>& extra_flags) {
  const std::string spec_path = absl::GetFlag(FLAGS_spec);
  const std::string out_dir = absl::GetFlag(FLAGS_out_dir);
  if (spec_path.empty() || out_dir.empty()) {
    std::fprintf(stderr, "launch: --spec and --out_dir are required\n");
    return 2;
  }
  absl::StatusOr<JobSpec> spec = LoadJobSpecFile(spec_path);
  if (!spec.ok()) {
    std::fprintf(stderr, "launch: %s\n", spec.status().ToString().c_str());
    return 2;
  }
  // Flags after `--` go to every rank; the ones launch sets per rank would override it.
  for (const std::string& flag : extra_flags) {
    for (const char* own :
         {"--spec", "--rank", "--world_size", "--rendezvous_dir", "--metrics_jsonl", "--threads"}) {
      if (flag == own || absl::StartsWith(flag, absl::StrCat(own, "="))) {
        std::fprintf(stderr, "launch: %s after -- would override what launch sets for each rank\n",
                     flag.c_str());
        return 2;
      }
    }
  }
  const ParallelSpec& par = spec->parallel();
  const int world = par.tensor() * par.pipeline() * par.data();
  std::string train = absl::GetFlag(FLAGS_train_binary);
  if (train.empty()) train = SiblingBinary("train");
  if (::access(train.c_str(), X_OK) != 0) {
    std::fprintf(stderr, "launch: train binary %s is not executable (--train_binary)\n",
                 train.c_str());
    return 2;
  }
  ::mkdir(out_dir.c_str(), 0755);
  const std::string rendezvous = out_dir + "/rendezvous";
  // A rendezvous directory must start empty: stale keys would be read as fresh.
  if (::mkdir(rendezvous.c_str(), 0755) != 0) {
    std::fprintf(stderr, "launch: %s must not exist yet (%s)\n", rendezvous.c_str(),
                 std::strerror(errno));
    return 2;
  }
  // This run's metrics only (the ranks append to the file).
  std::remove((out_dir + "/metrics.jsonl").c_str());
  int threads = absl::GetFlag(FLAGS_threads_per_rank);
  if (threads <= 0) threads = std::max(1, cpu::AvailableCores() / world);
  std::printf("launch: %d ranks (t=%d p=%d d=%d), %d thread(s) each, logs in %s\n", world,
              par.tensor(), par.pipeline(), par.data(), threads, out_dir.c_str());
  std::fflush(stdout);

  ::signal(SIGINT, OnSignal);
  ::signal(SIGTERM, OnSignal);
  std::vector<pid_t> pids(world);
  for (int rank = 0; rank < world; ++rank) {
    std::vector<std::string> argv = {train,
                                     "--spec=" + spec_path,
                                     absl::StrCat("--rank=", rank),
                                     absl::StrCat("--world_size=", world),
                                     "--rendezvous_dir=" + rendezvous,
                                     "--metrics_jsonl=" + out_dir + "/metrics.jsonl",
                                     absl::StrCat("--threads=", threads)};
    argv.insert(argv.end(), extra_flags.begin(), extra_flags.end());
    pids[rank] = Spawn(argv, absl::StrCat(out_dir, "/rank-", rank, ".log"));
  }
  // The narrating rank: the first of the stage that computes the loss.
  const int narrator =
      par.tensor() * par.data() * LossStage(par.pipeline(), par.schedule() == SCHEDULE_ZB_V);
  const std::string narrator_log = absl::StrCat(out_dir, "/rank-", narrator, ".log");
  std::ifstream narration;
  std::string pending_line;
  auto echo = [&] {
    if (!narration.is_open()) narration.open(narrator_log);
    if (!narration.is_open()) return;
    char buffer[4096];
    while (narration.read(buffer, sizeof(buffer)) || narration.gcount() > 0) {
      pending_line.append(buffer, narration.gcount());
    }
    narration.clear();
    size_t newline;
    while ((newline = pending_line.find('\n')) != std::string::npos) {
      std::printf("%s\n", pending_line.substr(0, newline).c_str());
      pending_line.erase(0, newline + 1);
    }
    std::fflush(stdout);
  };

  std::vector<int> codes(world, -1);
  int running = world;
  auto kill_deadline = std::chrono::steady_clock::time_point::max();
  while (running > 0) {
    for (int rank = 0; rank < world; ++rank) {
      if (codes[rank] >= 0) continue;
      int status = 0;
      if (::waitpid(pids[rank], &status, WNOHANG) == pids[rank]) {
        codes[rank] = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        --running;
        if (codes[rank] != 0 && kill_deadline == std::chrono::steady_clock::time_point::max()) {
          std::fprintf(stderr, "launch: rank %d exited with %d; stopping the others\n", rank,
                       codes[rank]);
          kill_deadline = std::chrono::steady_clock::now() +
                          absl::ToChronoSeconds(absl::GetFlag(FLAGS_grace_period));
        }
      }
    }
    if (g_interrupted && kill_deadline == std::chrono::steady_clock::time_point::max()) {
      std::fprintf(stderr, "launch: %s, stopping the %d running rank(s)\n",
                   strsignal(g_interrupted), running);
      for (int rank = 0; rank < world; ++rank) {
        if (codes[rank] < 0) ::kill(pids[rank], SIGTERM);
      }
      kill_deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    }
    if (std::chrono::steady_clock::now() > kill_deadline) {
      for (int rank = 0; rank < world; ++rank) {
        if (codes[rank] < 0) ::kill(pids[rank], SIGKILL);
      }
    }
    echo();
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  echo();
  if (g_interrupted) {
    // Stopped on request: the ranks' errors (their groups aborted) are the stop, not news.
    std::fprintf(stderr, "launch: interrupted (%s); all %d ranks stopped, logs in %s\n",
                 strsignal(g_interrupted), world, out_dir.c_str());
    return 128 + g_interrupted;
  }
  bool ok = true;
  for (int code : codes) ok = ok && code == 0;
  if (!ok) {
    std::fprintf(stderr, "launch: rank exit codes:\n");
    for (int rank = 0; rank < world; ++rank) {
      const std::string log = absl::StrCat(out_dir, "/rank-", rank, ".log");
      if (codes[rank] == 0) {
        std::fprintf(stderr, "  rank %d: 0\n", rank);
        continue;
      }
      // The rank's last line is its error (train prints one line when it fails).
      std::ifstream in(log);
      std::string line, last;
      while (std::getline(in, line)) {
        if (!line.empty()) last = line;
      }
      std::fprintf(stderr, "  rank %d: %d  %s  (log %s)\n", rank, codes[rank], last.c_str(),
                   log.c_str());
    }
    return 1;
  }
  std::printf("launch: all %d ranks exited 0; metrics in %s/metrics.jsonl\n", world,
              out_dir.c_str());
  return 0;
}

}  // namespace
}  // namespace mtrain

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "start every rank of a spec's static world on this machine: launch --spec=job.json "
      "--out_dir=DIR [-- extra train flags]");
  std::vector<char*> remaining = absl::ParseCommandLine(argc, argv);
  std::vector<std::string> extra(remaining.begin() + 1, remaining.end());
  return mtrain::Run(extra);
}
