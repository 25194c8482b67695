#include "worker/engine/engine_choice.h"

#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace mtrain {
namespace {

JobSpec Spec(Device device, Precision precision, int tensor = 1, int pipeline = 1) {
  JobSpec spec;
  spec.set_device(device);
  spec.set_precision(precision);
  spec.mutable_model()->set_num_heads(12);
  spec.mutable_model()->set_hidden_size(768);
  spec.mutable_parallel()->set_tensor(tensor);
  spec.mutable_parallel()->set_pipeline(pipeline);
  spec.mutable_parallel()->set_data(2);
  return spec;
}

const absl::Status kNoGpu = absl::UnavailableError("no CUDA-capable device is detected");
const absl::Status kCpuBf16 = absl::OkStatus();
const absl::Status kNoCpuBf16 = absl::FailedPreconditionError(
    "precision: PRECISION_BF16 on the CPU engine needs a processor with AVX512_BF16 or AMX-BF16");

TEST(EngineChoiceTest, AutoUsesTheGpuWhenPresentAndTheCpuOtherwise) {
  absl::StatusOr<EngineChoice> with_gpu =
      ChooseEngine(Spec(DEVICE_AUTO, PRECISION_BF16), absl::OkStatus(), kNoCpuBf16);
  ASSERT_TRUE(with_gpu.ok()) << with_gpu.status();
  EXPECT_EQ(with_gpu->kind, EngineKind::kCuda);
  absl::StatusOr<EngineChoice> unspecified =
      ChooseEngine(Spec(DEVICE_UNSPECIFIED, PRECISION_UNSPECIFIED), absl::OkStatus(), kNoCpuBf16);
  ASSERT_TRUE(unspecified.ok());
  EXPECT_EQ(unspecified->kind, EngineKind::kCuda);

  absl::StatusOr<EngineChoice> without =
      ChooseEngine(Spec(DEVICE_AUTO, PRECISION_FP32), kNoGpu, kNoCpuBf16);
  ASSERT_TRUE(without.ok()) << without.status();
  EXPECT_EQ(without->kind, EngineKind::kCpu);
  EXPECT_NE(without->note.find("no CUDA-capable device"), std::string::npos) << without->note;
}

TEST(EngineChoiceTest, TheCudaEngineRunsTensorAndPipelineParallelism) {
  for (const auto& [tensor, pipeline] : {std::pair{2, 1}, std::pair{1, 2}, std::pair{2, 2}}) {
    absl::StatusOr<EngineChoice> choice = ChooseEngine(
        Spec(DEVICE_AUTO, PRECISION_BF16, tensor, pipeline), absl::OkStatus(), kNoCpuBf16);
    ASSERT_TRUE(choice.ok()) << choice.status();
    EXPECT_EQ(choice->kind, EngineKind::kCuda) << "tensor " << tensor << " pipeline " << pipeline;
  }
}

TEST(EngineChoiceTest, AutoFallsBackToTheCpuForJobsTheCudaEngineDoesNotRunYet) {
  JobSpec odd_heads = Spec(DEVICE_AUTO, PRECISION_FP32, /*tensor=*/2);
  odd_heads.mutable_model()->set_hidden_size(12 * 48);
  absl::StatusOr<EngineChoice> choice = ChooseEngine(odd_heads, absl::OkStatus(), kNoCpuBf16);
  ASSERT_TRUE(choice.ok()) << choice.status();
  EXPECT_EQ(choice->kind, EngineKind::kCpu);
  EXPECT_NE(choice->note.find("head dimensions"), std::string::npos) << choice->note;
  // bf16 cannot fall back where the CPU has no bf16 instructions: the reason is the head
  // size.
  odd_heads.set_precision(PRECISION_BF16);
  absl::StatusOr<EngineChoice> bf16 = ChooseEngine(odd_heads, absl::OkStatus(), kNoCpuBf16);
  EXPECT_EQ(bf16.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(bf16.status().message().find("48"), std::string::npos) << bf16.status();

  // Llama-style layers: CPU kernels only so far.
  JobSpec llama = Spec(DEVICE_AUTO, PRECISION_FP32);
  llama.mutable_model()->set_family(MODEL_FAMILY_LLAMA);
  absl::StatusOr<EngineChoice> llama_choice = ChooseEngine(llama, absl::OkStatus(), kNoCpuBf16);
  ASSERT_TRUE(llama_choice.ok()) << llama_choice.status();
  EXPECT_EQ(llama_choice->kind, EngineKind::kCpu);
  EXPECT_NE(llama_choice->note.find("MODEL_FAMILY_LLAMA"), std::string::npos) << llama_choice->note;
  llama.set_device(DEVICE_CUDA);
  EXPECT_EQ(ChooseEngine(llama, absl::OkStatus(), kNoCpuBf16).status().code(),
            absl::StatusCode::kUnimplemented);
}

TEST(EngineChoiceTest, ExplicitCudaNeedsAGpuAndASupportedJob) {
  absl::StatusOr<EngineChoice> no_gpu =
      ChooseEngine(Spec(DEVICE_CUDA, PRECISION_BF16), kNoGpu, kNoCpuBf16);
  EXPECT_EQ(no_gpu.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(no_gpu.status().message().find("no CUDA-capable device"), std::string::npos);

  absl::StatusOr<EngineChoice> fp16 =
      ChooseEngine(Spec(DEVICE_CUDA, PRECISION_FP16), absl::OkStatus(), kNoCpuBf16);
  ASSERT_TRUE(fp16.ok()) << fp16.status();
  EXPECT_EQ(fp16->kind, EngineKind::kCuda);
  JobSpec zero = Spec(DEVICE_CUDA, PRECISION_BF16);
  zero.mutable_parallel()->set_zero_stage(1);
  absl::StatusOr<EngineChoice> zero_choice = ChooseEngine(zero, absl::OkStatus(), kNoCpuBf16);
  ASSERT_TRUE(zero_choice.ok()) << zero_choice.status();
  EXPECT_EQ(zero_choice->kind, EngineKind::kCuda);
  JobSpec odd_heads = Spec(DEVICE_CUDA, PRECISION_BF16);
  odd_heads.mutable_model()->set_hidden_size(12 * 48);
  absl::StatusOr<EngineChoice> refused = ChooseEngine(odd_heads, absl::OkStatus(), kNoCpuBf16);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(refused.status().message().find("48"), std::string::npos) << refused.status();

  absl::StatusOr<EngineChoice> ok =
      ChooseEngine(Spec(DEVICE_CUDA, PRECISION_FP32), absl::OkStatus(), kNoCpuBf16);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->kind, EngineKind::kCuda);
}

TEST(EngineChoiceTest, CpuTrainsInFp32AndInBf16WhereTheProcessorHasIt) {
  absl::StatusOr<EngineChoice> cpu =
      ChooseEngine(Spec(DEVICE_CPU, PRECISION_FP32), absl::OkStatus(), kNoCpuBf16);
  ASSERT_TRUE(cpu.ok());
  EXPECT_EQ(cpu->kind, EngineKind::kCpu);
  // bf16 on a processor without bf16 instructions: the CPU's reason.
  absl::StatusOr<EngineChoice> bf16 =
      ChooseEngine(Spec(DEVICE_CPU, PRECISION_BF16), kNoGpu, kNoCpuBf16);
  EXPECT_EQ(bf16.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(bf16.status().message().find("PRECISION_BF16"), std::string::npos);
  absl::StatusOr<EngineChoice> auto_bf16 =
      ChooseEngine(Spec(DEVICE_AUTO, PRECISION_BF16), kNoGpu, kNoCpuBf16);
  EXPECT_EQ(auto_bf16.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(auto_bf16.status().message().find("no usable GPU"), std::string::npos);
  // ... and on one with them.
  bf16 = ChooseEngine(Spec(DEVICE_CPU, PRECISION_BF16), kNoGpu, kCpuBf16);
  ASSERT_TRUE(bf16.ok()) << bf16.status();
  EXPECT_EQ(bf16->kind, EngineKind::kCpu);
  auto_bf16 = ChooseEngine(Spec(DEVICE_AUTO, PRECISION_BF16), kNoGpu, kCpuBf16);
  ASSERT_TRUE(auto_bf16.ok()) << auto_bf16.status();
  EXPECT_EQ(auto_bf16->kind, EngineKind::kCpu);
  // A GPU that runs the job still takes it.
  auto_bf16 = ChooseEngine(Spec(DEVICE_AUTO, PRECISION_BF16), absl::OkStatus(), kCpuBf16);
  ASSERT_TRUE(auto_bf16.ok());
  EXPECT_EQ(auto_bf16->kind, EngineKind::kCuda);
  // fp16 is the CUDA engine's only.
  absl::StatusOr<EngineChoice> fp16 =
      ChooseEngine(Spec(DEVICE_CPU, PRECISION_FP16), kNoGpu, kCpuBf16);
  EXPECT_EQ(fp16.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(fp16.status().message().find("PRECISION_FP16"), std::string::npos);
}

TEST(EngineChoiceTest, EnumNumbersThatAreNoValueAreRefusedByField) {
  JobSpec spec = Spec(DEVICE_AUTO, PRECISION_FP32);
  spec.set_device(static_cast<Device>(-5));
  absl::StatusOr<EngineChoice> choice = ChooseEngine(spec, kNoGpu, kNoCpuBf16);
  EXPECT_EQ(choice.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(choice.status().message().find("device: -5 is not a Device"), std::string::npos)
      << choice.status();
  spec = Spec(DEVICE_CPU, PRECISION_FP32);
  spec.set_precision(static_cast<Precision>(99));
  choice = ChooseEngine(spec, kNoGpu, kNoCpuBf16);
  EXPECT_EQ(choice.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(choice.status().message().find("precision: 99 is not a Precision"), std::string::npos)
      << choice.status();
}

// Under srun with tasks placed cyclically on 2 nodes of 4 GPUs (ranks 0,2,4,6 on the first
// node, local ids 0..3), every task sees all 4 GPUs: the local id picks, so the node's
// four ranks use four GPUs (global rank % 4 would put ranks 0 and 4 on GPU 0). Without a
// local id, ranks take the GPUs in turn; with one GPU visible (--gpus-per-task=1) it is 0.
TEST(EngineChoiceTest, TheNodeLocalIndexPicksTheGpuWhenKnown) {
  std::vector<int> first_node;
  for (int global : {0, 2, 4, 6}) first_node.push_back(CudaDeviceForRank(global, global / 2, 4));
  EXPECT_EQ(first_node, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(CudaDeviceForRank(5, -1, 4), 1);
  EXPECT_EQ(CudaDeviceForRank(6, 3, 1), 0);
  EXPECT_EQ(CudaDeviceForRank(3, 2, 0), 0);
}

}  // namespace
}  // namespace mtrain
