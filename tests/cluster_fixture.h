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

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "proto/coordinator.grpc.pb.h"
#include "tests/child_process.h"

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

  // The worker process named `id` (w0, w1, ...), or null.
  ChildProcess* Worker(const std::string& id);
  // The pid of the `train` process a worker daemon runs, or -1 if it runs none.
  static int RankProcessOf(int worker_pid);

  std::string token_file_;
  std::vector<std::string> worker_flags_;  // appended to every worker's command line
  std::unique_ptr<ChildProcess> coordinator_;
  std::vector<std::unique_ptr<ChildProcess>> workers_;
  std::string address_;
  int metrics_port_ = 0;
  int coordinator_runs_ = 0, worker_runs_ = 0, trainctl_runs_ = 0;
};

}  // namespace mtrain

#endif  // MTRAIN_TESTS_CLUSTER_FIXTURE_H_
