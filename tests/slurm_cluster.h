// A one-node Slurm cluster of Debian's daemons for integration tests: munged, slurmctld and
// slurmd run in the foreground as this test's children (stopped by PID at the end), from
// a slurm.conf generated in the test's directory, on free ports, with its own state and
// spool directories. The node is declared with more CPUs than the machine has
// (SlurmdParameters=config_overrides), so several worker daemons share its cores as
// tasks. Slurm's commands (sbatch, scancel, squeue, scontrol) find the cluster through
// SLURM_CONF, which Start sets for this process and its children.
//
//   ASSIGN_OR_RETURN(auto slurm, SlurmCluster::Start(dir, /*cpus=*/8));
//   absl::StatusOr<std::string> id = slurm->Sbatch({"--ntasks=2", script}, {"MTRAIN_X=1"});
//   slurm->Cancel(*id);
#ifndef MTRAIN_TESTS_SLURM_CLUSTER_H_
#define MTRAIN_TESTS_SLURM_CLUSTER_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "tests/child_process.h"

namespace mtrain {

class SlurmCluster {
 public:
  // FAILED_PRECONDITION naming what is missing (a binary, a daemon that would not start,
  // with its log's tail) when the cluster cannot run here: tests skip with that reason.
  static absl::StatusOr<std::unique_ptr<SlurmCluster>> Start(const std::string& dir, int cpus);
  // Cancels every job, kills what its steps still run (by the PIDs scontrol lists) and
  // stops slurmd, slurmctld and munged.
  ~SlurmCluster();
  SlurmCluster(const SlurmCluster&) = delete;
  SlurmCluster& operator=(const SlurmCluster&) = delete;

  // Runs a Slurm command to completion: {exit code (-1 if it could not run), output}.
  std::pair<int, std::string> Run(const std::vector<std::string>& argv,
                                  absl::Duration timeout = absl::Seconds(30));
  // sbatch with `args` (options, then the script), the submitting environment plus `env`
  // (NAME=VALUE) exported to the job; returns the job id.
  absl::StatusOr<std::string> Sbatch(const std::vector<std::string>& args,
                                     const std::vector<std::string>& env);
  // scancel JOB and waits (up to `timeout`) until squeue no longer lists it.
  absl::Status Cancel(const std::string& job_id, absl::Duration timeout = absl::Seconds(30));
  // The job's state as squeue prints it (PENDING, RUNNING, ...), "" when no longer listed.
  std::string JobState(const std::string& job_id);

  const std::string& dir() const { return dir_; }

 private:
  explicit SlurmCluster(std::string dir) : dir_(std::move(dir)) {}
  absl::Status StartDaemons(int cpus);

  std::string dir_;          // slurm.conf, state and logs
  std::string runtime_dir_;  // sockets and slurmd's spool: a short path under /tmp
  int runs_ = 0;
  std::unique_ptr<ChildProcess> munged_, slurmctld_, slurmd_;
};

}  // namespace mtrain

#endif  // MTRAIN_TESTS_SLURM_CLUSTER_H_
