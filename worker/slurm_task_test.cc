#include "worker/slurm_task.h"

#include <map>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace mtrain {
namespace {

using ::testing::HasSubstr;

std::function<const char*(const char*)> Environment(std::map<std::string, std::string> vars) {
  return [vars = std::move(vars)](const char* name) -> const char* {
    const auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  };
}

TEST(SlurmTaskTest, OutsideSrunThereIsNoTask) {
  absl::StatusOr<std::optional<SlurmTask>> task = SlurmTaskFromEnvironment(Environment({}));
  ASSERT_TRUE(task.ok());
  EXPECT_FALSE(task->has_value());
}

TEST(SlurmTaskTest, RankWorldLocalRankAndTheFirstHostComeFromSrunsVariables) {
  absl::StatusOr<std::optional<SlurmTask>> task =
      SlurmTaskFromEnvironment(Environment({{"SLURM_PROCID", "5"},
                                            {"SLURM_NTASKS", "8"},
                                            {"SLURM_LOCALID", "1"},
                                            {"SLURM_STEP_NUM_NODES", "4"},
                                            {"SLURM_JOB_ID", "123"},
                                            {"SLURM_STEP_ID", "0"},
                                            {"SLURM_SUBMIT_DIR", "/home/u/run"},
                                            {"SLURM_STEP_NODELIST", "gpu[007-010],cpu1"}}));
  ASSERT_TRUE(task.ok()) << task.status();
  ASSERT_TRUE(task->has_value());
  const SlurmTask& t = **task;
  EXPECT_EQ(t.rank, 5);
  EXPECT_EQ(t.world_size, 8);
  EXPECT_EQ(t.local_rank, 1);
  EXPECT_EQ(t.nodes, 4);
  EXPECT_EQ(t.first_host, "gpu007");
  EXPECT_EQ(SlurmRendezvousDir(t), "/home/u/run/.mtrain-rendezvous/123.0");
}

TEST(SlurmTaskTest, BadValuesNameTheVariableAndTheRule) {
  absl::StatusOr<std::optional<SlurmTask>> task =
      SlurmTaskFromEnvironment(Environment({{"SLURM_PROCID", "4"}, {"SLURM_NTASKS", "4"}}));
  ASSERT_FALSE(task.ok());
  EXPECT_THAT(task.status().message(), HasSubstr("SLURM_PROCID"));
  EXPECT_THAT(task.status().message(), HasSubstr("SLURM_NTASKS = 4"));
  task = SlurmTaskFromEnvironment(Environment({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "x"}}));
  ASSERT_FALSE(task.ok());
  EXPECT_THAT(task.status().message(), HasSubstr("SLURM_NTASKS: 'x'"));
}

TEST(SlurmTaskTest, FirstHostOfSlurmHostLists) {
  EXPECT_EQ(*FirstSlurmHost("node1"), "node1");
  EXPECT_EQ(*FirstSlurmHost("a,b"), "a");
  EXPECT_EQ(*FirstSlurmHost("node[07-09,12],gpu1"), "node07");
  EXPECT_EQ(*FirstSlurmHost("rack[3-4]-n[01-02]"), "rack3-n01");
  EXPECT_EQ(*FirstSlurmHost("n[12,3]x"), "n12x");
  EXPECT_FALSE(FirstSlurmHost("").ok());
  EXPECT_FALSE(FirstSlurmHost("n[1-2").ok());
}

}  // namespace
}  // namespace mtrain
