#include "worker/trainer.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/cpu_bf16_gemm.h"
#include "kernels/cuda_device_query.h"
#include "plan/assignment_plan.h"
#include "plan/rank_grid.h"
#include "spec/job_spec_validation.h"
#include "worker/engine/engine_choice.h"

namespace mtrain {
namespace {

JobSpec TinySpec(const std::string& extra_train) {
  absl::StatusOr<JobSpec> spec = ParseJobSpecJson(
      R"({"model": {"num_layers": 2, "num_heads": 2, "hidden_size": 32, "seq_length": 16},
          "parallel": {"micro_batch_size": 2, "global_batch_size": 4},
          "train": {"steps": 3, "seed": 5)" +
      extra_train + "}}");
  EXPECT_TRUE(spec.ok()) << spec.status();
  return *spec;
}

// A one-rank trainer: groups of one member need no transport.
absl::StatusOr<std::unique_ptr<Trainer>> SingleRankTrainer(const JobSpec& spec) {
  absl::StatusOr<std::vector<Assignment>> plan = PlanAssignments(spec, "test", 1, {});
  if (!plan.ok()) return plan.status();
  absl::StatusOr<RankGrid> grid = RankGrid::Create(1, 1, 1);
  if (!grid.ok()) return grid.status();
  absl::StatusOr<RankGroups> groups = ConnectRankGroups(*grid, 0, GroupTransport{});
  if (!groups.ok()) return groups.status();
  // The engine is chosen by the caller, as train_main does.
  const absl::StatusOr<std::vector<CudaDeviceInfo>> gpus = QueryCudaDevices();
  absl::StatusOr<EngineChoice> engine =
      ChooseEngine(spec, gpus.status(), cpu::CpuBf16Support(cpu::CpuFeaturesOfThisMachine()));
  if (!engine.ok()) return engine.status();
  TrainerOptions options;
  options.engine = *engine;
  return Trainer::Create((*plan)[0], std::move(*groups), options);
}

std::vector<double> Losses(const JobSpec& spec, std::vector<float>* final_params) {
  absl::StatusOr<std::unique_ptr<Trainer>> trainer = SingleRankTrainer(spec);
  EXPECT_TRUE(trainer.ok()) << trainer.status();
  std::vector<double> losses;
  for (int i = 0; i < spec.train().steps(); ++i) {
    absl::StatusOr<StepMetrics> metrics = (*trainer)->Step();
    EXPECT_TRUE(metrics.ok()) << metrics.status();
    EXPECT_EQ(metrics->step(), i + 1);
    EXPECT_GT(metrics->tokens_per_second(), 0);
    EXPECT_GT(metrics->mfu(), 0);
    losses.push_back(metrics->loss());
  }
  TrainingEngine& engine = (*trainer)->engine();
  EXPECT_TRUE(engine.SyncToHost().ok());
  const float* params = engine.host_state().params;
  final_params->assign(params, params + engine.layout().num_params());
  return losses;
}

TEST(TrainerTest, RunsAreReproducibleBitForBit) {
  const JobSpec spec = TinySpec(R"(, "dropout": 0.1)");
  std::vector<float> a_params, b_params;
  EXPECT_EQ(Losses(spec, &a_params), Losses(spec, &b_params));
  EXPECT_EQ(a_params, b_params);
}

TEST(TrainerTest, RecomputationDoesNotChangeTraining) {
  std::vector<float> plain_params, recompute_params;
  const std::vector<double> plain = Losses(TinySpec(R"(, "dropout": 0.1)"), &plain_params);
  const std::vector<double> recompute =
      Losses(TinySpec(R"(, "dropout": 0.1, "recompute": true)"), &recompute_params);
  EXPECT_EQ(plain, recompute);
  EXPECT_EQ(plain_params, recompute_params);
}

TEST(TrainerTest, DropoutAndSeedChangeTraining) {
  std::vector<float> params;
  const std::vector<double> no_dropout = Losses(TinySpec(R"(, "dropout": 0.0)"), &params);
  const std::vector<double> dropout = Losses(TinySpec(R"(, "dropout": 0.1)"), &params);
  EXPECT_NE(no_dropout, dropout);
  JobSpec other_seed = TinySpec(R"(, "dropout": 0.0)");
  other_seed.mutable_train()->set_seed(6);
  EXPECT_NE(Losses(other_seed, &params), no_dropout);
}

TEST(TrainerTest, GroupsWithoutTransportAreRefusedClearly) {
  absl::StatusOr<RankGrid> grid = RankGrid::Create(2, 1, 1);
  ASSERT_TRUE(grid.ok());
  absl::StatusOr<RankGroups> groups = ConnectRankGroups(*grid, 0, GroupTransport{});
  EXPECT_EQ(groups.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(groups.status().message().find("tensor-0"), absl::string_view::npos) << groups.status();
}

TEST(TrainerTest, GatherWeightsReturnsEveryTensorInFull) {
  absl::StatusOr<std::unique_ptr<Trainer>> trainer = SingleRankTrainer(TinySpec(""));
  ASSERT_TRUE(trainer.ok()) << trainer.status();
  absl::StatusOr<std::map<std::string, FullTensor>> weights = (*trainer)->GatherWeights();
  ASSERT_TRUE(weights.ok()) << weights.status();
  TrainingEngine& engine = (*trainer)->engine();
  EXPECT_EQ(weights->size(), engine.layout().tensors().size());
  const FullTensor& wte = weights->at("wte");
  EXPECT_EQ(wte.shape, (std::vector<int64_t>{256, 32}));
  const ParamTensor* t = engine.layout().Find("wte");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(wte.values[5], engine.host_state().params[t->offset + 5]);
}

TEST(TrainerTest, ACheckpointOfADeeperModelIsRefusedNotTruncated) {
  JobSpec deep = TinySpec("");
  deep.mutable_model()->set_num_layers(3);
  absl::StatusOr<std::unique_ptr<Trainer>> writer = SingleRankTrainer(deep);
  ASSERT_TRUE(writer.ok()) << writer.status();
  ASSERT_TRUE((*writer)->Step().ok());
  const std::string root = ::testing::TempDir() + "/deeper";
  absl::StatusOr<std::string> saved = (*writer)->SaveCheckpoint(root);
  ASSERT_TRUE(saved.ok()) << saved.status();
  absl::StatusOr<std::unique_ptr<Trainer>> reader = SingleRankTrainer(TinySpec(""));  // 2 layers
  ASSERT_TRUE(reader.ok()) << reader.status();
  const absl::Status loaded = (*reader)->LoadCheckpoint(*saved);
  EXPECT_EQ(loaded.code(), absl::StatusCode::kInvalidArgument) << loaded;
  EXPECT_NE(loaded.message().find("layers.2."), std::string::npos) << loaded;
  // The same depth loads.
  absl::StatusOr<std::unique_ptr<Trainer>> same = SingleRankTrainer(deep);
  ASSERT_TRUE(same.ok()) << same.status();
  EXPECT_TRUE((*same)->LoadCheckpoint(*saved).ok());
}

TEST(TrainerTest, MissingDataFileNamesThePath) {
  JobSpec spec = TinySpec("");
  spec.mutable_data()->set_path("/nonexistent/corpus.txt");
  absl::StatusOr<std::unique_ptr<Trainer>> trainer = SingleRankTrainer(spec);
  EXPECT_EQ(trainer.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(trainer.status().message().find("/nonexistent/corpus.txt"), absl::string_view::npos);
}

}  // namespace
}  // namespace mtrain

namespace mtrain {
namespace {

// A job that asked for the GPU or for bf16 never quietly trains on the CPU: without a GPU
// it is refused, naming why (engine_choice_test covers every rule).
TEST(TrainerTest, RefusesTheGpuAndReducedPrecisionWithoutAGpu) {
  if (QueryCudaDevices().ok())
    GTEST_SKIP() << "this machine has a GPU (cuda_engine_test covers it)";
  JobSpec cuda = TinySpec("");
  cuda.set_device(DEVICE_CUDA);
  absl::StatusOr<std::unique_ptr<Trainer>> trainer = SingleRankTrainer(cuda);
  EXPECT_EQ(trainer.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(trainer.status().message().find("DEVICE_CUDA"), std::string::npos) << trainer.status();
  JobSpec fp16 = TinySpec("");
  fp16.set_precision(PRECISION_FP16);
  trainer = SingleRankTrainer(fp16);
  EXPECT_EQ(trainer.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(trainer.status().message().find("PRECISION_FP16"), std::string::npos)
      << trainer.status();
  // bf16 trains on the CPU where the processor has bf16 instructions, else is refused.
  JobSpec bf16 = TinySpec("");
  bf16.set_precision(PRECISION_BF16);
  trainer = SingleRankTrainer(bf16);
  if (cpu::CpuBf16Support(cpu::CpuFeaturesOfThisMachine()).ok()) {
    ASSERT_TRUE(trainer.ok()) << trainer.status();
    EXPECT_FALSE((*trainer)->uses_cuda());
  } else {
    EXPECT_EQ(trainer.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_NE(trainer.status().message().find("PRECISION_BF16"), std::string::npos)
        << trainer.status();
  }
  absl::StatusOr<std::unique_ptr<Trainer>> cpu = SingleRankTrainer(TinySpec(""));
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  EXPECT_FALSE((*cpu)->uses_cuda());
  EXPECT_NE((*cpu)->engine_note().find("engine: CPU"), std::string::npos) << (*cpu)->engine_note();
  EXPECT_TRUE(SingleRankTrainer(TinySpec("")).ok());
}

TEST(TrainerTest, ARankThatCannotFitIsRefusedBeforeAllocating) {
  absl::StatusOr<std::vector<Assignment>> plan = PlanAssignments(TinySpec(""), "small", 1, {});
  ASSERT_TRUE(plan.ok()) << plan.status();
  absl::StatusOr<RankGrid> grid = RankGrid::Create(1, 1, 1);
  ASSERT_TRUE(grid.ok());
  TrainerOptions options;
  options.memory_limits = MemoryLimits{};
  options.memory_limits->physical_bytes = 64 << 10;  // 64 KiB: the tiny model needs more
  absl::StatusOr<RankGroups> groups = ConnectRankGroups(*grid, 0, GroupTransport{});
  ASSERT_TRUE(groups.ok());
  absl::StatusOr<std::unique_ptr<Trainer>> trainer =
      Trainer::Create((*plan)[0], std::move(*groups), options);
  EXPECT_EQ(trainer.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(trainer.status().message()),
              ::testing::AllOf(::testing::HasSubstr("rank 0 of job small needs about"),
                               ::testing::HasSubstr("parameters"),
                               ::testing::HasSubstr("this machine has 64.0 KiB")));

  // The same rank fits the real machine, and says what it estimated.
  groups = ConnectRankGroups(*grid, 0, GroupTransport{});
  ASSERT_TRUE(groups.ok());
  trainer = Trainer::Create((*plan)[0], std::move(*groups), TrainerOptions{});
  ASSERT_TRUE(trainer.ok()) << trainer.status();
  EXPECT_GT((*trainer)->memory_estimate().parameters,
            static_cast<double>((*trainer)->engine().layout().num_params()) * 4 - 1);
}

}  // namespace
}  // namespace mtrain
