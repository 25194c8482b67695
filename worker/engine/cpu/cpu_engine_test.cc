#include "worker/engine/cpu/cpu_engine.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu_bf16_gemm.h"
#include "kernels/cpu_isa.h"
#include "kernels/grad_norm.h"
#include "plan/pipeline_schedule.h"
#include "plan/rank_grid.h"
#include "worker/engine/cpu/rank_model.h"
#include "worker/engine/cpu/rank_model_stages.h"
#include "worker/engine/heap_peak.h"
#include "worker/engine/optimizer.h"
#include "worker/parallel/pipeline_executor.h"
#include "worker/parallel/rank_groups.h"

namespace mtrain {
namespace {

constexpr int kMicrobatches = 2;
constexpr int kMicroBatch = 2;

TrainingEngineConfig Config(const RankGroups* groups) {
  TrainingEngineConfig config;
  config.shape = Gpt2Config(/*num_layers=*/2, /*num_heads=*/2, /*hidden=*/16,
                            /*seq_length=*/8, /*vocab=*/100, /*padded_vocab=*/128);
  config.chunks = ChunkPlacements({{0, 2}}, 2, 1, 0);
  config.micro_batch = kMicroBatch;
  config.model.dropout = 0.1f;
  config.model.seed = 7;
  config.optimizer.set_lr(1e-3);
  config.optimizer.set_beta1(0.9);
  config.optimizer.set_beta2(0.95);
  config.optimizer.set_eps(1e-8);
  config.optimizer.set_weight_decay(0.01);
  config.seed = 7;
  config.bucket_elements = 1000;
  config.groups = groups;
  return config;
}

std::vector<Microbatch> Microbatches() {
  std::vector<Microbatch> microbatches(kMicrobatches);
  const int tokens = kMicroBatch * 8;
  for (int k = 0; k < kMicrobatches; ++k) {
    microbatches[k].id = {1, k * kMicroBatch};
    for (int i = 0; i < tokens; ++i) {
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

// The engine only orders its parts: a step through it is bit-for-bit a step driven on the
// parts directly (RankModel, RankModelStages, AdamW), which is what keeps training
// identical to the Trainer before the engine interface.
TEST(CpuEngineTest, AStepIsBitForBitTheStepOfItsParts) {
  RankGroups groups = SoloGroups();
  const TrainingEngineConfig config = Config(&groups);
  absl::StatusOr<std::unique_ptr<CpuEngine>> engine = CpuEngine::Create(config);
  ASSERT_TRUE(engine.ok()) << engine.status();
  PipelineExecutor executor(&(*engine)->stages(), OneStageSchedule(), 0, 1, groups.world.get());
  const float d_loss = 1.0f / (kMicrobatches * kMicroBatch * 8);
  absl::StatusOr<double> loss = (*engine)->ComputeGradients(executor, Microbatches(), d_loss);
  ASSERT_TRUE(loss.ok()) << loss.status();

  TensorParallelGroup<float> solo{1, 0, nullptr, nullptr, nullptr};
  absl::StatusOr<std::unique_ptr<RankModel>> model =
      RankModel::Create(config.shape, config.chunks, config.micro_batch, config.model, solo, 1);
  ASSERT_TRUE(model.ok()) << model.status();
  (*model)->Initialize(config.seed);
  RankModelStages stages(model->get(), HeapBytesInUse());
  PipelineExecutor reference(&stages, OneStageSchedule(), 0, 1, groups.world.get());
  absl::StatusOr<double> reference_loss = reference.RunStep(Microbatches(), d_loss);
  ASSERT_TRUE(reference_loss.ok()) << reference_loss.status();
  EXPECT_EQ(*loss, *reference_loss);

  const std::vector<ParamTensor>& tensors = (*engine)->layout().tensors();
  ASSERT_EQ(tensors.size(), (*model)->tensors().size());
  absl::StatusOr<double> sum_squares = (*engine)->GradientSumOfSquares(tensors);
  ASSERT_TRUE(sum_squares.ok());
  double reference_sum = 0;
  for (const ParamTensor& t : tensors) {
    reference_sum += cpu::SumOfSquares((*model)->grads() + t.offset, t.size);
  }
  EXPECT_EQ(*sum_squares, reference_sum);
  EXPECT_GT(reference_sum, 0);

  ASSERT_TRUE((*engine)->Update(1, 1e-3, 0.5).ok());
  ASSERT_TRUE((*engine)->GatherParameters().ok());  // no ZeRO: nothing
  AdamWOptimizer optimizer((*model)->tensors(), config.optimizer, 0, (*model)->num_params());
  optimizer.Update((*model)->params(), (*model)->grads(), 1, 1e-3, 0.5);
  const TrainingEngine::HostState host = (*engine)->host_state();
  for (size_t i = 0; i < (*model)->buffer_size(); ++i) {
    ASSERT_EQ(host.params[i], (*model)->params()[i]) << i;
  }
  for (size_t i = 0; i < optimizer.first_moment().size(); ++i) {
    ASSERT_EQ(host.first_moment[i], optimizer.first_moment()[i]) << i;
    ASSERT_EQ(host.second_moment[i], optimizer.second_moment()[i]) << i;
  }
}

// The memory report: the engine's own allocations hold at least the parameters, gradients
// and both moments, rise when a step's activations are in flight, and leave out what the
// process held before the engine was built.
TEST(CpuEngineTest, ReportsTheHeapPeakOfAStep) {
  {
    // Sanitizers replace malloc, and glibc's mallinfo2 then sees nothing of the heap.
    const int64_t before = HeapBytesInUse();
    std::vector<char> probe(64 << 20, 1);
    asm volatile("" : : "r"(probe.data()) : "memory");  // the allocation must happen
    if (HeapBytesInUse() - before < (64 << 20)) {
      GTEST_SKIP() << "malloc here is not glibc's (a sanitizer build?): mallinfo2 cannot see "
                      "the heap, so there is no peak to check";
    }
  }
  // Held before the engine exists, like a worker's data set: not the engine's.
  std::vector<char> data_set(256 << 20, 1);
  asm volatile("" : : "r"(data_set.data()) : "memory");
  RankGroups groups = SoloGroups();
  absl::StatusOr<std::unique_ptr<CpuEngine>> engine = CpuEngine::Create(Config(&groups));
  ASSERT_TRUE(engine.ok()) << engine.status();
  EXPECT_EQ((*engine)->host_memory_peak_bytes(), 0) << "nothing sampled before a step";
  PipelineExecutor executor(&(*engine)->stages(), OneStageSchedule(), 0, 1, groups.world.get());
  ASSERT_TRUE((*engine)->ComputeGradients(executor, Microbatches(), 1.0f / 32).ok());
  const std::optional<int64_t> peak = (*engine)->host_memory_peak_bytes();
  ASSERT_TRUE(peak.has_value());
  const int64_t state_bytes =
      static_cast<int64_t>((*engine)->layout().buffer_size()) * sizeof(float) * 4;
  EXPECT_GE(*peak, state_bytes);
  // One microbatch's saved MLP activations alone: fc and gelu, B * S * 4C floats each, in
  // each of the 2 layers.
  const int64_t mlp_bytes = int64_t{kMicroBatch} * 8 * 4 * 16 * sizeof(float) * 2 * 2;
  EXPECT_GE(*peak - state_bytes, mlp_bytes);
  EXPECT_LT(*peak, int64_t{64} << 20) << "the 256 MiB held before the engine was counted";
}

TEST(CpuEngineTest, UnscalingReportsAnOverflow) {
  RankGroups groups = SoloGroups();
  absl::StatusOr<std::unique_ptr<CpuEngine>> engine = CpuEngine::Create(Config(&groups));
  ASSERT_TRUE(engine.ok()) << engine.status();
  PipelineExecutor executor(&(*engine)->stages(), OneStageSchedule(), 0, 1, groups.world.get());
  ASSERT_TRUE((*engine)->ComputeGradients(executor, Microbatches(), 1.0f / 32).ok());
  const std::vector<ParamTensor>& tensors = (*engine)->layout().tensors();
  const double before = *(*engine)->GradientSumOfSquares(tensors);
  absl::StatusOr<bool> overflow = (*engine)->UnscaleGradients(0.5f);
  ASSERT_TRUE(overflow.ok());
  EXPECT_FALSE(*overflow);
  EXPECT_DOUBLE_EQ(*(*engine)->GradientSumOfSquares(tensors), before / 4);
  overflow = (*engine)->UnscaleGradients(std::numeric_limits<float>::infinity());
  ASSERT_TRUE(overflow.ok());
  EXPECT_TRUE(*overflow);
}

// The start line names the GEMM library and the element-wise kernels' build.
TEST(CpuEngineTest, DescriptionNamesTheKernelsItRuns) {
  RankGroups groups = SoloGroups();
  absl::StatusOr<std::unique_ptr<CpuEngine>> engine = CpuEngine::Create(Config(&groups));
  ASSERT_TRUE(engine.ok()) << engine.status();
  const std::string description = (*engine)->device_description();
  EXPECT_NE(description.find(std::string("element-wise kernels ") +
                             cpu::KernelIsaName(cpu::CpuKernelIsa())),
            std::string::npos)
      << description;
  EXPECT_NE(description.find("GEMM "), std::string::npos) << description;
}

// fp16 is the CUDA engine's; bf16 needs bf16 instructions, and sets the process's GEMM
// precision for as long as the engine trains (an fp32 engine sets it back).
TEST(CpuEngineTest, Fp16IsRefusedAndBf16NeedsTheProcessorsBf16) {
  RankGroups groups = SoloGroups();
  TrainingEngineConfig config = Config(&groups);
  config.precision = PRECISION_FP16;
  absl::StatusOr<std::unique_ptr<CpuEngine>> engine = CpuEngine::Create(config);
  EXPECT_EQ(engine.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(engine.status().message().find("PRECISION_FP16"), std::string::npos) << engine.status();

  config.precision = PRECISION_BF16;
  engine = CpuEngine::Create(config);
  const absl::Status support = cpu::CpuBf16Support(cpu::CpuFeaturesOfThisMachine());
  if (!support.ok()) {
    EXPECT_EQ(engine.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_NE(engine.status().message().find("PRECISION_BF16"), std::string::npos)
        << engine.status();
    return;
  }
  ASSERT_TRUE(engine.ok()) << engine.status();
  EXPECT_EQ(cpu::CurrentGemmPrecision(), cpu::GemmPrecision::kBf16);
  EXPECT_NE((*engine)->device_description().find("GEMMs in bf16"), std::string::npos);
  config.precision = PRECISION_FP32;
  absl::StatusOr<std::unique_ptr<CpuEngine>> fp32 = CpuEngine::Create(config);
  ASSERT_TRUE(fp32.ok()) << fp32.status();
  EXPECT_EQ(cpu::CurrentGemmPrecision(), cpu::GemmPrecision::kFp32);
}

}  // namespace
}  // namespace mtrain
