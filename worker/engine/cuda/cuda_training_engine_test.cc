// The CUDA engine behind TrainingEngine (tagged `gpu`; skipped, visibly, without one): it
// starts from the CPU engine's initial weights, its host mirror round-trips the state,
// and a step's loss and gradient norm follow the CPU engine's on the same microbatches.
#include "worker/engine/cuda/cuda_training_engine.h"

#include <cmath>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cuda/test_support.h"
#include "plan/pipeline_schedule.h"
#include "plan/rank_grid.h"
#include "worker/engine/cpu/cpu_engine.h"
#include "worker/parallel/pipeline_executor.h"
#include "worker/parallel/rank_groups.h"

namespace mtrain::cuda {
namespace {

constexpr int kMicrobatches = 2;
constexpr int kMicroBatch = 2;
constexpr int kSeq = 16;

TrainingEngineConfig Config(const RankGroups* groups) {
  TrainingEngineConfig config;
  // Head dimension 32: the flash kernels take 32, 64 and 128.
  config.shape = Gpt2Config(/*num_layers=*/2, /*num_heads=*/2, /*hidden=*/64,
                            /*seq_length=*/kSeq, /*vocab=*/100, /*padded_vocab=*/128);
  config.chunks = ChunkPlacements({{0, 2}}, 2, 1, 0);
  config.micro_batch = kMicroBatch;
  config.model.seed = 3;
  config.optimizer.set_lr(1e-3);
  config.optimizer.set_beta1(0.9);
  config.optimizer.set_beta2(0.95);
  config.optimizer.set_eps(1e-8);
  config.seed = 3;
  config.bucket_elements = 1 << 20;
  config.groups = groups;
  return config;
}

std::vector<Microbatch> Microbatches() {
  std::vector<Microbatch> microbatches(kMicrobatches);
  for (int k = 0; k < kMicrobatches; ++k) {
    microbatches[k].id = {1, k * kMicroBatch};
    for (int i = 0; i < kMicroBatch * kSeq; ++i) {
      microbatches[k].tokens.push_back((i * 7 + k * 13) % 100);
      microbatches[k].targets.push_back((i * 11 + k * 5 + 1) % 100);
    }
  }
  return microbatches;
}

RankGroups SoloGroups() {
  absl::StatusOr<RankGrid> grid = RankGrid::Create(1, 1, 1);
  EXPECT_TRUE(grid.ok());
  absl::StatusOr<RankGroups> groups = ConnectRankGroups(*grid, 0, GroupTransport{});
  EXPECT_TRUE(groups.ok()) << groups.status();
  return std::move(*groups);
}

PipelineSchedule OneStageSchedule() {
  ScheduleConfig schedule;
  schedule.microbatches = kMicrobatches;
  absl::StatusOr<PipelineSchedule> built = BuildPipelineSchedule(schedule, 0, {0});
  EXPECT_TRUE(built.ok()) << built.status();
  return *built;
}

TEST(CudaTrainingEngineTest, StartsFromTheCpuWeightsAndItsMirrorRoundTrips) {
  MTRAIN_SKIP_WITHOUT_GPU();
  RankGroups groups = SoloGroups();
  absl::StatusOr<std::unique_ptr<CudaTrainingEngine>> gpu =
      CudaTrainingEngine::Create(Config(&groups));
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  absl::StatusOr<std::unique_ptr<CpuEngine>> cpu = CpuEngine::Create(Config(&groups));
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  ASSERT_EQ((*gpu)->layout().buffer_size(), (*cpu)->layout().buffer_size());
  ASSERT_TRUE((*gpu)->SyncToHost().ok());
  TrainingEngine::HostState host = (*gpu)->host_state();
  const float* cpu_params = (*cpu)->host_state().params;
  for (size_t i = 0; i < (*gpu)->layout().buffer_size(); ++i) {
    ASSERT_EQ(host.params[i], cpu_params[i]) << i;
  }
  // What is written into the mirror trains after SyncFromHost and comes back unchanged.
  host.params[1] = 0.25f;
  host.first_moment[2] = 0.5f;
  host.second_moment[3] = 0.75f;
  ASSERT_TRUE((*gpu)->SyncFromHost().ok());
  host.params[1] = host.first_moment[2] = host.second_moment[3] = 0;
  ASSERT_TRUE((*gpu)->SyncToHost().ok());
  EXPECT_EQ(host.params[1], 0.25f);
  EXPECT_EQ(host.first_moment[2], 0.5f);
  EXPECT_EQ(host.second_moment[3], 0.75f);
}

// GPT-2's shape, or (issue 33) an FFN of 3 h and a larger normalisation epsilon, both read
// from model/'s configuration by both engines.
class CudaTrainingEngineStepTest : public ::testing::TestWithParam<bool> {};

TEST_P(CudaTrainingEngineStepTest, AStepFollowsTheCpuEngine) {
  MTRAIN_SKIP_WITHOUT_GPU();
  RankGroups groups = SoloGroups();
  TrainingEngineConfig config = Config(&groups);
  if (GetParam()) {
    config.shape.ffn_hidden = 3 * config.shape.hidden;
    config.shape.norm_epsilon = 1e-3;
  }
  absl::StatusOr<std::unique_ptr<CudaTrainingEngine>> gpu = CudaTrainingEngine::Create(config);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  absl::StatusOr<std::unique_ptr<CpuEngine>> cpu = CpuEngine::Create(config);
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  const float d_loss = 1.0f / (kMicrobatches * kMicroBatch * kSeq);
  PipelineExecutor gpu_executor(&(*gpu)->stages(), OneStageSchedule(), 0, 1, groups.world.get());
  PipelineExecutor cpu_executor(&(*cpu)->stages(), OneStageSchedule(), 0, 1, groups.world.get());
  absl::StatusOr<double> gpu_loss = (*gpu)->ComputeGradients(gpu_executor, Microbatches(), d_loss);
  absl::StatusOr<double> cpu_loss = (*cpu)->ComputeGradients(cpu_executor, Microbatches(), d_loss);
  ASSERT_TRUE(gpu_loss.ok()) << gpu_loss.status();
  ASSERT_TRUE(cpu_loss.ok()) << cpu_loss.status();
  EXPECT_NEAR(*gpu_loss, *cpu_loss, 1e-4 * std::abs(*cpu_loss));
  const std::vector<ParamTensor>& tensors = (*cpu)->layout().tensors();
  absl::StatusOr<double> gpu_norm = (*gpu)->GradientSumOfSquares(tensors);
  absl::StatusOr<double> cpu_norm = (*cpu)->GradientSumOfSquares(tensors);
  ASSERT_TRUE(gpu_norm.ok() && cpu_norm.ok());
  EXPECT_GT(*cpu_norm, 0);
  EXPECT_NEAR(*gpu_norm, *cpu_norm, 1e-3 * *cpu_norm);
  EXPECT_TRUE((*gpu)->Update(1, 1e-3, 1.0).ok());
  EXPECT_TRUE((*gpu)->GatherParameters().ok());
  EXPECT_TRUE((*gpu)->device_memory_peak_bytes().has_value());
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudaTrainingEngineStepTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? std::string("Ffn3hEpsilon1e3") : std::string("Gpt2");
                         });

}  // namespace
}  // namespace mtrain::cuda
