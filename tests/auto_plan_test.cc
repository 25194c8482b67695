// The planner end to end (issue 18): real CPU workers measure their device at start and
// report it, `trainctl workers --wide` shows it, `trainctl plan` prices every layout on
// them (and on a described cluster), and a `parallel.auto` job runs under the layout the
// coordinator chose, with the choice and its prediction in its events and status.
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/cluster_fixture.h"

namespace mtrain {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

class AutoPlanTest : public ClusterTest {};

constexpr char kAutoSpec[] = R"({"name": "auto", "model": {"num_layers": 2, "hidden_size": 64,
    "num_heads": 4, "seq_length": 64}, "parallel": {"auto": true, "global_batch_size": 4},
    "train": {"steps": 3, "dropout": 0.0}})";

TEST_F(AutoPlanTest, WorkersReportProfilesThePlanIsPrintedAndAnAutoJobRunsUnderIt) {
  StartCoordinator();
  StartWorkers(2);
  const auto [workers_code, workers] = Trainctl({"workers", "--wide"});
  EXPECT_EQ(workers_code, 0) << workers;
  EXPECT_THAT(workers, HasSubstr("GEMM GF/S"));
  // Both measured: no "-" placeholder in the profile columns.
  EXPECT_THAT(workers, Not(HasSubstr("        -      -         -"))) << workers;

  const std::string spec = WriteSpec("auto.json", kAutoSpec);
  const auto [plan_code, plan] = Trainctl({"plan", spec, "--tokens=1e6"});
  EXPECT_EQ(plan_code, 0) << plan;
  EXPECT_THAT(plan, HasSubstr("2 live workers on 1 host(s)"));
  EXPECT_THAT(plan, HasSubstr("LAYOUT"));
  EXPECT_THAT(plan, HasSubstr("#1 step: matmuls"));
  EXPECT_THAT(plan, HasSubstr("time to train 1e+06 tokens with #1"));
  const auto [too_many_code, too_many] = Trainctl({"plan", spec, "--workers=3"});
  EXPECT_EQ(too_many_code, 2) << too_many;
  EXPECT_THAT(too_many, HasSubstr("--workers=3: the cluster has 2 device(s)"));
  const auto [cluster_code, on_cluster] =
      Trainctl({"plan", spec, "--cluster=deploy/clusters/dgx_a100.json", "--workers=8"});
  EXPECT_EQ(cluster_code, 0) << on_cluster;
  EXPECT_THAT(on_cluster, HasSubstr("NVIDIA A100-SXM4-80GB"));
  // A Llama 3 8B-shaped spec (issue 33) is priced from model/'s tables on eight described
  // GPUs, and said not to be submittable while the CUDA engine lacks Llama's layers.
  const auto [llama_code, llama] =
      Trainctl({"plan", "deploy/specs/llama3_8b.json", "--cluster=deploy/clusters/dgx_a100.json",
                "--workers=8"});
  EXPECT_EQ(llama_code, 0) << llama;
  EXPECT_THAT(llama, HasSubstr("(8.03e+09 parameters)"));
  EXPECT_THAT(llama, HasSubstr("8030261248 parameters"));  // a rejected layout's stage 0
  EXPECT_THAT(llama, HasSubstr("cannot be submitted yet: device: DEVICE_CUDA with model.family "
                               "MODEL_FAMILY_LLAMA"));
  EXPECT_THAT(llama, HasSubstr("#1 step: matmuls"));
  // Sequence parallelism and selective recomputation are offered on GPUs too (the CUDA
  // engine's passed the GPU bundle's checks): the best layout here uses sequence parallelism.
  EXPECT_THAT(llama, HasSubstr("b=2 sp "));

  const std::string job = Submit(spec);
  ASSERT_TRUE(WaitFor([&] { return StateOf(job) == JOB_STATE_SUCCEEDED; }, absl::Minutes(3)))
      << Trainctl({"status", job}).second << Trainctl({"events", job}).second;
  EXPECT_THAT(Trainctl({"events", job}).second, HasSubstr("planned"));
  const std::string status = Trainctl({"status", job}).second;
  EXPECT_THAT(status, HasSubstr("plan        chose t="));
  EXPECT_THAT(status, HasSubstr("step time   predicted"));
}

TEST_F(AutoPlanTest, AnAutoJobNoWorkerCanHoldIsRefusedAtSubmit) {
  StartCoordinator();
  StartWorkers(1);
  // 4096-wide layers: even the smallest layout needs far more than this machine's memory.
  const std::string spec = WriteSpec("huge.json", R"({"model": {"num_layers": 64,
      "hidden_size": 16384, "num_heads": 64}, "parallel": {"auto": true}})");
  const auto [code, output] = Trainctl({"submit", spec});
  EXPECT_NE(code, 0) << output;
  EXPECT_THAT(output, HasSubstr("parallel.auto: no layout of this model fits the live workers"));
  EXPECT_THAT(output, HasSubstr("does not fit: needs"));
}

}  // namespace
}  // namespace mtrain
