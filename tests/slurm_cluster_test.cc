// Workers started by Slurm (issue 38): a real one-node cluster of Debian's munged,
// slurmctld and slurmd (tests/slurm_cluster.h), `sbatch deploy/slurm/mtrain_workers.sbatch`
// starting CPU worker daemons against a coordinator this test runs, a job submitted with
// trainctl training on them; then `scancel` of the allocation mid-job: the coordinator sees
// the workers go and the job wait, a second `sbatch` brings workers back (the same worker
// ids: host and task), and the job resumes from its checkpoint and finishes with every
// loss equal to an uninterrupted run's. Skipped, saying why, where the daemons cannot run.
#include "tests/slurm_cluster.h"

#include <unistd.h>

#include <cmath>
#include <memory>
#include <string>
#include <tuple>
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
          "global_batch_size": 4}, "train": {"dropout": 0.1, "seed": 3, "steps": 1500,
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

  // 1,500 steps: still running when the allocation is cancelled after step 12, even where
  // a step takes 2 ms (150 ended before the cancel on a fast machine).
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
  EXPECT_THAT(events, HasSubstr("resumes from checkpoint step")) << events;
  ExpectJobLossesEqualTheReference(job, reference, 1500);
}

// srun alone starts a static world (issue 38): each `train` takes its rank and the world
// from SLURM_PROCID and SLURM_NTASKS and meets the others in the step's rendezvous
// directory; (2,1,1) and (1,2,1) reproduce the single-rank run's losses, and a world that
// does not fit the spec is refused naming SLURM_NTASKS.
TEST_F(SlurmClusterTest, SrunAloneStartsAStaticWorldThatMatchesOneRank) {
  const auto spec_json = [](const std::string& parallel) {
    return absl::StrCat(
        R"({"name": "srun", "model": {"num_layers": 2, "num_heads": 4, "hidden_size": 32,
            "seq_length": 16}, "parallel": {"micro_batch_size": 2, "global_batch_size": 4, )",
        parallel, R"(}, "train": {"dropout": 0.1, "seed": 3, "steps": 8},
            "device": "DEVICE_CPU"})");
  };
  const std::string reference =
      RunStatic("one-rank", WriteSpec("one.json", spec_json(R"("tensor": 1)")));
  const std::vector<double> expected = Losses(reference + "/metrics.jsonl", 0);
  ASSERT_EQ(expected.size(), 8u);
  char cwd[4096] = {};
  ASSERT_NE(::getcwd(cwd, sizeof(cwd)), nullptr);
  const std::string train = std::string(cwd) + "/worker/train";
  // srun from the run's own directory: SLURM_SUBMIT_DIR, under which the rendezvous lives.
  const auto srun = [&](const std::string& name, const std::string& spec, int tasks) {
    const std::string out = Path(name);
    return slurm_->Run(
        {"/bin/sh", "-c",
         absl::StrCat("mkdir -p '", out, "' && cd '", out,
                      "' && exec /usr/bin/srun --ntasks=", tasks, " --cpus-per-task=1 ", train,
                      " --spec=", spec, " --threads=1 --metrics_jsonl=", out, "/metrics.jsonl")},
        absl::Minutes(3));
  };
  for (const auto& [name, parallel, loss_rank] :
       std::vector<std::tuple<std::string, std::string, int>>{{"t2", R"("tensor": 2)", 0},
                                                              {"p2", R"("pipeline": 2)", 1}}) {
    auto [code, output] = srun(name, WriteSpec(name + ".json", spec_json(parallel)), 2);
    ASSERT_EQ(code, 0) << name << ": " << output;
    EXPECT_THAT(output, HasSubstr("from Slurm (SLURM_PROCID, SLURM_NTASKS)")) << output;
    const std::vector<double> got = Losses(Path(name) + "/metrics.jsonl", loss_rank);
    ASSERT_EQ(got.size(), expected.size()) << name << ": " << output;
    for (size_t step = 0; step < got.size(); ++step) {
      EXPECT_NEAR(got[step], expected[step], 1e-5 * std::abs(expected[step]))
          << name << ", step " << step + 1;
    }
  }
  auto [code, output] = srun("t2-on-3", WriteSpec("t2-on-3.json", spec_json(R"("tensor": 2)")), 3);
  EXPECT_NE(code, 0);
  EXPECT_THAT(output, HasSubstr("SLURM_NTASKS (srun --ntasks) = 3 but the spec needs")) << output;
}

}  // namespace
}  // namespace mtrain
