// A test fixture that runs the whole service as real processes on loopback: one
// coordinator (its own state directory, metrics on a free port), worker daemons that run
// their ranks as `train` processes, and trainctl. Each test gets its own directory for
// the job database, checkpoints, logs and specs. Used by the control-plane and the
// elastic-restart tests.
//
//   class MyTest : public ClusterTest {};
//   TEST_F(MyTest, Runs) {
//     StartCoordinator();
//     StartWorkers(4);
//     const std::string job = Submit(WriteSpec("job.json", json));
//     ASSERT_TRUE(WaitFor([&] { return StateOf(job) == JOB_STATE_SUCCEEDED; }, ...));
//   }
#ifndef MTRAIN_TESTS_CLUSTER_FIXTURE_H_
#define MTRAIN_TESTS_CLUSTER_FIXTURE_H_

#include <cmath>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "proto/coordinator.grpc.pb.h"
#include "tests/child_process.h"
#include "tests/metrics_jsonl.h"

namespace mtrain {

class ClusterTest : public ::testing::Test {
 protected:
  static constexpr absl::Duration kStartTimeout = absl::Seconds(20);

  void TearDown() override;

  // `name` inside this test's own directory (created on first use).
  std::string Path(const std::string& name);

  // Starts the coordinator with short heartbeat timeouts plus `extra_flags`.
  void StartCoordinator(const std::string& listen = "127.0.0.1:0",
                        const std::vector<std::string>& extra_flags = {});
  // Starts n more CPU workers, named w<k> in start order, and waits until all are alive.
  void StartWorkers(int n);

  // Runs trainctl to completion; returns {exit code, output (stdout and stderr)}.
  std::pair<int, std::string> Trainctl(std::vector<std::string> args,
                                       absl::Duration timeout = absl::Seconds(60));
  std::string WriteSpec(const std::string& name, const std::string& json);
  std::unique_ptr<Coordinator::Stub> Stub();
  // Adds the bearer token of token_file_ (its first line), if a test set one: with a
  // token, the coordinator answers every RPC only with it.
  void Authorize(grpc::ClientContext* context) const;
  absl::StatusOr<JobStatus> Status(const std::string& job);
  JobState StateOf(const std::string& job);
  int AliveWorkers();
  static bool WaitFor(const std::function<bool()>& done, absl::Duration timeout);
  // Submits a spec file without waiting; returns the job id.
  std::string Submit(const std::string& spec_path, std::vector<std::string> extra = {});

  // Job-level checks shared by the cluster tests.
  // Runs `spec` uninterrupted as a static world (`launch`); returns its output directory.
  std::string RunStatic(const std::string& name, const std::string& spec,
                        std::vector<std::string> train_flags = {}) {
    const std::string out = Path(name);
    std::vector<std::string> argv = {"worker/launch", "--spec=" + spec, "--out_dir=" + out,
                                     "--threads_per_rank=1"};
    if (!train_flags.empty()) {
      argv.push_back("--");
      argv.insert(argv.end(), train_flags.begin(), train_flags.end());
    }
    auto launch = ChildProcess::Start(argv, Path(name + ".log"));
    EXPECT_TRUE(launch.ok()) << launch.status();
    if (!launch.ok()) return out;
    absl::StatusOr<int> code = (*launch)->Wait(absl::Minutes(5));
    EXPECT_TRUE(code.ok() && *code == 0) << (*launch)->Log();
    return out;
  }

  // Losses of `rank` in a metrics JSONL file, in step order.
  std::vector<double> Losses(const std::string& jsonl, int rank) {
    absl::StatusOr<std::vector<MetricsLine>> lines = ReadMetricsJsonl(jsonl);
    EXPECT_TRUE(lines.ok()) << lines.status();
    if (!lines.ok()) return {};
    absl::StatusOr<std::vector<double>> losses = LossesOfRank(*lines, rank);
    EXPECT_TRUE(losses.ok()) << losses.status();
    return losses.ok() ? *losses : std::vector<double>();
  }

  // The job's recorded loss of every step (what `trainctl watch --json` replays), as a
  // JSONL file in the format of `train --metrics_jsonl`.
  std::string JobMetrics(const std::string& job) {
    auto [code, output] = Trainctl({"watch", "--json", job}, absl::Minutes(1));
    EXPECT_EQ(code, 0) << output;
    const std::string path = Path(job + "-watched.jsonl");
    std::ofstream out(path);
    other_watch_lines_.clear();
    for (absl::string_view line : absl::StrSplit(output, '\n')) {
      if (absl::StartsWith(line, "{\"step\"")) {
        out << line << "\n";
      } else if (!line.empty() && other_watch_lines_.size() < 2000) {
        other_watch_lines_ += std::string(line.substr(0, 300)) + "\n";
      }
    }
    return path;
  }

  std::string Events(const std::string& job) {
    auto [code, events] = Trainctl({"events", job});
    EXPECT_EQ(code, 0) << events;
    return events;
  }
  void WaitForStep(const std::string& job, int64_t step, absl::Duration timeout) {
    ASSERT_TRUE(WaitFor(
        [&] {
          absl::StatusOr<JobStatus> s = Status(job);
          return s.ok() && s->state() == JOB_STATE_RUNNING && s->step() >= step;
        },
        timeout))
        << Trainctl({"status", job}).second;
  }

  // The job's recorded loss of each of `steps` steps (from whichever generation computed
  // it) equals rank 0's in the uninterrupted static run under `reference`, to 1e-5.
  void ExpectJobLossesEqualTheReference(const std::string& job, const std::string& reference,
                                        size_t steps) {
    const std::vector<double> expected = Losses(reference + "/metrics.jsonl", 0);
    absl::StatusOr<std::vector<MetricsLine>> lines = ReadMetricsJsonl(JobMetrics(job));
    ASSERT_TRUE(lines.ok()) << lines.status();
    std::map<int, double> got;
    for (const MetricsLine& line : *lines) got[static_cast<int>(line.at("step"))] = line.at("loss");
    ASSERT_EQ(expected.size(), steps);
    std::string missing;
    for (size_t step = 1; step <= steps && missing.size() < 200; ++step) {
      if (got.count(static_cast<int>(step)) == 0) missing += " " + std::to_string(step);
    }
    ASSERT_EQ(got.size(), steps) << "steps missing from the job's history:" << missing
                                 << "\nlines of `trainctl watch --json` that are not steps:\n"
                                 << other_watch_lines_ << "the job's events:\n"
                                 << (missing.empty() ? "" : Events(job));
    for (const auto& [step, loss] : got) {
      EXPECT_NEAR(loss, expected[step - 1], 1e-5 * std::abs(expected[step - 1])) << "step " << step;
    }
  }

  void WaitForSuccess(const std::string& job, absl::Duration timeout) {
    ASSERT_TRUE(WaitFor(
        [&] {
          const JobState state = StateOf(job);
          return state == JOB_STATE_SUCCEEDED || state == JOB_STATE_FAILED ||
                 state == JOB_STATE_CANCELLED;
        },
        timeout))
        << Trainctl({"status", job}).second;
    ASSERT_EQ(StateOf(job), JOB_STATE_SUCCEEDED) << Trainctl({"status", job}).second << "\n"
                                                 << Events(job);
  }

  // The worker process named `id` (w0, w1, ...), or null.
  ChildProcess* Worker(const std::string& id);
  // The pid of the `train` process a worker daemon runs, or -1 if it runs none.
  static int RankProcessOf(int worker_pid);

  std::string token_file_;
  std::vector<std::string> worker_flags_;    // appended to every worker's command line
  std::vector<std::string> trainctl_flags_;  // given to every trainctl run (before ARGS)
  std::unique_ptr<ChildProcess> coordinator_;
  std::vector<std::unique_ptr<ChildProcess>> workers_;
  std::string address_;
  int metrics_port_ = 0;
  int coordinator_runs_ = 0, worker_runs_ = 0, trainctl_runs_ = 0;
  // What `trainctl watch --json` printed besides step lines (JobMetrics), for failures.
  std::string other_watch_lines_;
};

}  // namespace mtrain

#endif  // MTRAIN_TESTS_CLUSTER_FIXTURE_H_
