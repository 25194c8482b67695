// Workers started by Slurm (issue 38): a real one-node cluster of Debian's munged,
// slurmctld and slurmd (tests/slurm_cluster.h), `sbatch deploy/slurm/mtrain_workers.sbatch`
// starting CPU worker daemons against a coordinator this test runs, a job submitted with
// trainctl training on them; then `scancel` of the allocation mid-job: the coordinator sees
// the workers go and the job wait, a second `sbatch` brings workers back (the same worker
// ids: host and task), and the job resumes from its checkpoint and finishes with every
// loss equal to an uninterrupted run's. Skipped, saying why, where the daemons cannot run.
#include "tests/slurm_cluster.h"

#include <unistd.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/cluster_fixture.h"

namespace mtrain {
namespace {

using ::testing::HasSubstr;

class SlurmClusterTest : public ClusterTest {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<SlurmCluster>> slurm = SlurmCluster::Start(Path("slurm"), 8);
    if (!slurm.ok()) GTEST_SKIP() << "no Slurm cluster here: " << slurm.status().message();
    slurm_ = *std::move(slurm);
  }
  void TearDown() override {
    slurm_.reset();  // its jobs' workers first, then the coordinator
    ClusterTest::TearDown();
  }

  // sbatch of the shipped script: `tasks` CPU workers on the one node, no GPUs.
  std::string SubmitWorkers(int tasks) {
    char cwd[4096] = {};
    EXPECT_NE(::getcwd(cwd, sizeof(cwd)), nullptr);
    const std::string runfiles = cwd;
    absl::StatusOr<std::string> id =
        slurm_->Sbatch({"--nodes=1", absl::StrCat("--ntasks-per-node=", tasks), "--cpus-per-task=1",
                        "--gpus-per-task=0", "--output=" + Path("slurm-%j.out"),
                        "--chdir=" + Path(""), runfiles + "/deploy/slurm/mtrain_workers.sbatch"},
                       {"MTRAIN_COORDINATOR=" + address_, "MTRAIN_BIN=" + runfiles + "/worker",
                        "MTRAIN_DEVICE=cpu", "MTRAIN_LOG_DIR=" + Path("ranks")});
    EXPECT_TRUE(id.ok()) << id.status();
    return id.ok() ? *id : "";
  }

  std::unique_ptr<SlurmCluster> slurm_;
};

TEST_F(SlurmClusterTest, SlurmStartedWorkersTrainAndAJobSurvivesScancelOfItsAllocation) {
  StartCoordinator();
  const std::string spec =
      WriteSpec("job.json",
                R"({"name": "slurm", "model": {"num_layers": 2, "num_heads": 4, "hidden_size": 32,
          "seq_length": 16}, "parallel": {"micro_batch_size": 2, "data": 2,
          "global_batch_size": 4}, "train": {"dropout": 0.1, "seed": 3, "steps": 40,
          "checkpoint_every": 10}, "device": "DEVICE_CPU"})");
  const std::string reference = RunStatic("static", spec);

  const std::string first = SubmitWorkers(2);
  ASSERT_FALSE(first.empty());
  ASSERT_TRUE(WaitFor([&] { return AliveWorkers() == 2; }, absl::Seconds(60)))
      << "Slurm's workers did not register: " << Trainctl({"workers"}).second << "\n"
      << slurm_->JobState(first);
  char host[256] = {};
  ::gethostname(host, sizeof(host) - 1);
  // The script names each worker by host and task (no GPU: the task's local id).
  EXPECT_THAT(Trainctl({"workers"}).second, HasSubstr(absl::StrCat(host, "-gpu1")));

  const std::string job = Submit(spec);
  WaitForStep(job, 12, absl::Minutes(3));  // its checkpoint of step 10 is stored
  ASSERT_TRUE(slurm_->Cancel(first).ok());
  ASSERT_TRUE(WaitFor([&] { return AliveWorkers() == 0; }, absl::Seconds(30)))
      << Trainctl({"workers"}).second;
  absl::StatusOr<JobStatus> waiting = Status(job);
  ASSERT_TRUE(waiting.ok());
  EXPECT_NE(waiting->state(), JOB_STATE_SUCCEEDED);
  EXPECT_NE(waiting->state(), JOB_STATE_FAILED) << waiting->message();
  EXPECT_NE(waiting->state(), JOB_STATE_CANCELLED);

  const std::string second = SubmitWorkers(2);
  ASSERT_FALSE(second.empty());
  WaitForSuccess(job, absl::Minutes(4));
  const std::string events = Events(job);
  EXPECT_THAT(events, HasSubstr("step 10")) << "resumed from the step-10 checkpoint";
  ExpectJobLossesEqualTheReference(job, reference, 40);
}

}  // namespace
}  // namespace mtrain
