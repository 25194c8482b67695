#include "plan/placement.h"

#include <optional>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace mtrain {
namespace {

JobSpec Spec(int t, int p, int d) {
  JobSpec spec;
  spec.mutable_parallel()->set_tensor(t);
  spec.mutable_parallel()->set_pipeline(p);
  spec.mutable_parallel()->set_data(d);
  return spec;
}

TEST(EligibleDeviceKindsTest, FollowsDeviceThenPrecision) {
  struct Case {
    Device device;
    Precision precision;
    std::vector<DeviceKind> kinds;
  };
  const Case cases[] = {
      {DEVICE_CUDA, PRECISION_FP32, {DEVICE_KIND_CUDA}},
      {DEVICE_CUDA, PRECISION_BF16, {DEVICE_KIND_CUDA}},
      {DEVICE_CPU, PRECISION_FP32, {DEVICE_KIND_CPU}},
      // An explicit CPU device is taken at its word (validation refuses bf16 on CPU).
      {DEVICE_CPU, PRECISION_BF16, {DEVICE_KIND_CPU}},
      {DEVICE_AUTO, PRECISION_FP32, {DEVICE_KIND_CUDA, DEVICE_KIND_CPU}},
      {DEVICE_AUTO, PRECISION_UNSPECIFIED, {DEVICE_KIND_CUDA, DEVICE_KIND_CPU}},
      {DEVICE_AUTO, PRECISION_BF16, {DEVICE_KIND_CUDA}},
      {DEVICE_AUTO, PRECISION_FP16, {DEVICE_KIND_CUDA}},
      {DEVICE_UNSPECIFIED, PRECISION_FP32, {DEVICE_KIND_CUDA, DEVICE_KIND_CPU}},
  };
  for (const Case& c : cases) {
    JobSpec spec;
    spec.set_device(c.device);
    spec.set_precision(c.precision);
    EXPECT_EQ(EligibleDeviceKinds(spec), c.kinds)
        << Device_Name(c.device) << " " << Precision_Name(c.precision);
  }
  // Llama-style layers run on the CPU engine only (so far), whatever DEVICE_AUTO prefers.
  JobSpec llama;
  llama.mutable_model()->set_family(MODEL_FAMILY_LLAMA);
  llama.set_device(DEVICE_AUTO);
  EXPECT_EQ(EligibleDeviceKinds(llama), std::vector<DeviceKind>{DEVICE_KIND_CPU});
}

TEST(ShrunkDataDegreesTest, KeepsTheGlobalBatchMinDataAndInterleavedDivisibility) {
  struct Case {
    int pipeline, data, min_data, micro_batch, global_batch;
    Schedule schedule;
    std::vector<int> degrees;
  };
  const Case cases[] = {
      // Every degree below 4 divides a batch of 12.
      {1, 4, 1, 1, 12, SCHEDULE_1F1B, {3, 2, 1}},
      // A batch of 8: 3 does not divide it.
      {1, 4, 1, 1, 8, SCHEDULE_1F1B, {2, 1}},
      // min_data 2: multiples of 2 only, and never below it.
      {1, 6, 2, 1, 24, SCHEDULE_1F1B, {4, 2}},
      // min_data equal to data: nothing to shrink to.
      {1, 4, 4, 1, 16, SCHEDULE_1F1B, {}},
      // Micro-batch 2, batch 12: 2 * d divides 12 for d = 3, 2, 1.
      {1, 4, 1, 2, 12, SCHEDULE_1F1B, {3, 2, 1}},
      // Interleaved with p = 2: microbatches (16 / d) must be even: d = 2 (8), 1 (16); not 3.
      {2, 4, 1, 1, 16, SCHEDULE_INTERLEAVED_1F1B, {2, 1}},
      // Interleaved with p = 4, batch 12: 12/3 = 4 ok, 12/2 = 6 no, 12/1 = 12 ok.
      {4, 4, 1, 1, 12, SCHEDULE_INTERLEAVED_1F1B, {3, 1}},
      // Already at d = 1.
      {1, 1, 1, 1, 4, SCHEDULE_1F1B, {}},
  };
  for (const Case& c : cases) {
    JobSpec spec = Spec(1, c.pipeline, c.data);
    ParallelSpec* p = spec.mutable_parallel();
    p->set_min_data(c.min_data);
    p->set_micro_batch_size(c.micro_batch);
    p->set_global_batch_size(c.global_batch);
    p->set_schedule(c.schedule);
    EXPECT_EQ(ShrunkDataDegrees(spec), c.degrees)
        << "p=" << c.pipeline << " d=" << c.data << " min_data=" << c.min_data
        << " mb=" << c.micro_batch << " gb=" << c.global_batch;
  }
}

FreeWorker Cpu(const std::string& id, const std::string& host) {
  return {id, host, DEVICE_KIND_CPU};
}
FreeWorker Cuda(const std::string& id, const std::string& host) {
  return {id, host, DEVICE_KIND_CUDA};
}

TEST(PackRanksTest, TensorGroupsStayOnOneHostAndRanksFollowHostOrder) {
  struct Case {
    std::string name;
    int t, p, d;
    std::vector<FreeWorker> free;
    std::optional<std::vector<std::string>> ranks;
  };
  const Case cases[] = {
      {"one rank", 1, 1, 1, {Cpu("w1", "a")}, std::vector<std::string>{"w1"}},
      {"hosts in name order, workers in the order given",
       1,
       1,
       3,
       {Cpu("w3", "b"), Cpu("w1", "a"), Cpu("w2", "a")},
       std::vector<std::string>{"w1", "w2", "w3"}},
      {"t = 2 never splits a group across hosts: host a's odd worker is left out",
       2,
       1,
       2,
       {Cpu("a1", "a"), Cpu("a2", "a"), Cpu("a3", "a"), Cpu("b1", "b"), Cpu("b2", "b")},
       std::vector<std::string>{"a1", "a2", "b1", "b2"}},
      {"t = 2 with one worker per host cannot fit",
       2,
       1,
       1,
       {Cpu("a1", "a"), Cpu("b1", "b")},
       std::nullopt},
      {"only as many groups as needed: the rest stay free",
       2,
       1,
       1,
       {Cpu("a1", "a"), Cpu("a2", "a"), Cpu("a3", "a"), Cpu("a4", "a")},
       std::vector<std::string>{"a1", "a2"}},
      {"too few workers", 1, 2, 2, {Cpu("a1", "a"), Cpu("a2", "a"), Cpu("b1", "b")}, std::nullopt},
      {"AUTO prefers CUDA when it has room",
       1,
       1,
       2,
       {Cpu("c1", "a"), Cpu("c2", "a"), Cuda("g1", "b"), Cuda("g2", "b")},
       std::vector<std::string>{"g1", "g2"}},
      {"AUTO falls back to CPU, never a mix of kinds",
       1,
       1,
       2,
       {Cpu("c1", "a"), Cpu("c2", "a"), Cuda("g1", "b")},
       std::vector<std::string>{"c1", "c2"}},
      {"a mix of kinds is not enough", 1, 1, 2, {Cpu("c1", "a"), Cuda("g1", "b")}, std::nullopt},
      {"nothing free", 1, 1, 1, {}, std::nullopt},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(PackRanks(Spec(c.t, c.p, c.d), c.free), c.ranks) << c.name;
  }
}

TEST(PackRanksTest, AnExplicitDeviceUsesOnlyItsKind) {
  JobSpec cpu = Spec(1, 1, 1);
  cpu.set_device(DEVICE_CPU);
  EXPECT_EQ(PackRanks(cpu, {Cuda("g1", "a")}), std::nullopt);
  EXPECT_EQ(PackRanks(cpu, {Cuda("g1", "a"), Cpu("c1", "a")}), std::vector<std::string>{"c1"});
  JobSpec bf16 = Spec(1, 1, 1);
  bf16.set_precision(PRECISION_BF16);  // AUTO with bf16: CUDA only
  EXPECT_EQ(PackRanks(bf16, {Cpu("c1", "a")}), std::nullopt);
}

}  // namespace
}  // namespace mtrain
