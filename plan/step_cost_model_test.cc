#include "plan/step_cost_model.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "spec/resolved_spec_for_test.h"

namespace mtrain {
namespace {

// Devices with no small-matrix penalty and links that cost exactly bytes / bandwidth +
// latency, so that the terms can be checked by hand.
ClusterDescription Cluster(int nodes, int devices_per_node) {
  ClusterDescription cluster;
  cluster.set_nodes(nodes);
  cluster.set_devices_per_node(devices_per_node);
  DeviceProfile* device = cluster.mutable_device();
  device->set_fp32_flops(1e12);
  device->set_half_flops(8e12);
  device->set_matmul_efficiency(0.5);
  device->set_memory_bandwidth_bytes_per_second(1e11);
  device->set_memory_bytes(int64_t{1} << 34);
  cluster.mutable_intra_node()->set_bandwidth_bytes_per_second(1e10);
  cluster.mutable_intra_node()->set_latency_seconds(1e-6);
  cluster.mutable_inter_node()->set_bandwidth_bytes_per_second(1e9);
  cluster.mutable_inter_node()->set_latency_seconds(1e-5);
  return cluster;
}

TEST(StepCostModelTest, MegatronFlopFormulas) {
  // B = 4, s = 32, l = 2, h = 64, V = 256:
  //   72 B s l h^2 = 75,497,472;  (1 + 32/384 + 256/1536) = 5/4   -> 94,371,840
  //   96 B s l h^2 = 100,663,296; (1 + 32/384 + 256/2048) = 29/24 -> 121,634,816
  const std::string model =
      R"("model": {"num_layers": 2, "hidden_size": 64, "num_heads": 4, "seq_length": 32,
                   "vocab_size": 256}, "parallel": {"micro_batch_size": 4})";
  const JobSpec plain = ResolvedSpecForTest("{" + model + "}");
  EXPECT_DOUBLE_EQ(ModelFlopsPerStep(plain), 94371840.0);
  EXPECT_DOUBLE_EQ(HardwareFlopsPerStep(plain), 94371840.0);
  const JobSpec recomputed =
      ResolvedSpecForTest("{" + model + R"(, "train": {"recompute": true}})");
  EXPECT_DOUBLE_EQ(ModelFlopsPerStep(recomputed), 94371840.0);
  EXPECT_DOUBLE_EQ(HardwareFlopsPerStep(recomputed), 121634816.0);
}

TEST(StepCostModelTest, BubbleFollowsEachSchedule) {
  const std::string base = R"({"model": {"num_layers": 8}, "parallel": {"pipeline": 4,
      "global_batch_size": 8, )";
  const ClusterDescription cluster = Cluster(1, 8);
  const StepCost one_f_one_b =
      PredictStepCost(ResolvedSpecForTest(base + R"("schedule": "SCHEDULE_1F1B"}})"), cluster);
  EXPECT_EQ(one_f_one_b.microbatches, 8);
  EXPECT_NEAR(one_f_one_b.bubble_fraction, 3.0 / 8, 1e-12);  // (p - 1) / m
  const StepCost gpipe =
      PredictStepCost(ResolvedSpecForTest(base + R"("schedule": "SCHEDULE_GPIPE"}})"), cluster);
  EXPECT_NEAR(gpipe.bubble_fraction, 3.0 / 8, 1e-12);
  const StepCost interleaved = PredictStepCost(
      ResolvedSpecForTest(base +
                          R"("schedule": "SCHEDULE_INTERLEAVED_1F1B", "virtual_stages": 2}})"),
      cluster);
  EXPECT_NEAR(interleaved.bubble_fraction, 3.0 / 16, 1e-12);  // (p - 1) / (v m)
  EXPECT_LT(interleaved.bubble_seconds, one_f_one_b.bubble_seconds);
  // ...at the price of twice the pipeline messages.
  EXPECT_NEAR(interleaved.pipeline_comm_seconds, 2 * one_f_one_b.pipeline_comm_seconds, 1e-15);
}

// The zero-bubble schedules: their bubble from the checker's simulation of their own
// schedules at the split's costs; at the paper's equal costs (no overhead) ZB-H1 idles a
// third of 1F1B and ZB-V less than interleaved 1F1B; an overhead of the split is priced.
TEST(StepCostModelTest, ZeroBubbleSchedulesPriceTheirSimulatedBubbleAndTheSplitsOverhead) {
  const std::string base = R"({"model": {"num_layers": 8}, "parallel": {"pipeline": 4,
      "global_batch_size": 8, )";
  const ClusterDescription cluster = Cluster(1, 8);
  StepCostOptions equal;
  equal.backward_input_share = equal.backward_weight_share = 0.5;
  const JobSpec one_f_one_b = ResolvedSpecForTest(base + R"("schedule": "SCHEDULE_1F1B"}})");
  const JobSpec h1 = ResolvedSpecForTest(base + R"("schedule": "SCHEDULE_ZB_H1"}})");
  const JobSpec v = ResolvedSpecForTest(base + R"("schedule": "SCHEDULE_ZB_V",
                                                   "virtual_stages": 2}})");
  const JobSpec interleaved = ResolvedSpecForTest(
      base + R"("schedule": "SCHEDULE_INTERLEAVED_1F1B", "virtual_stages": 2}})");
  const StepCost base_cost = PredictStepCost(one_f_one_b, cluster, equal);
  const StepCost h1_cost = PredictStepCost(h1, cluster, equal);
  EXPECT_NEAR(h1_cost.bubble_fraction, 3.0 / (3 * 8), 1e-12);  // (p - 1) / (3m)
  EXPECT_NEAR(h1_cost.elementwise_seconds, base_cost.elementwise_seconds, 1e-15);
  EXPECT_LT(h1_cost.step_seconds, base_cost.step_seconds);
  const StepCost v_cost = PredictStepCost(v, cluster, equal);
  EXPECT_LT(v_cost.bubble_fraction, PredictStepCost(interleaved, cluster, equal).bubble_fraction);
  EXPECT_LE(v_cost.bubble_fraction, h1_cost.bubble_fraction);
  // A split that costs 20% more than the combined backward: its time is added (two thirds
  // of the compute is backward), and the weight halves fill more of the bubble.
  StepCostOptions costly;
  costly.backward_input_share = costly.backward_weight_share = 0.6;
  const StepCost costly_h1 = PredictStepCost(h1, cluster, costly);
  const double compute = base_cost.step_seconds - base_cost.bubble_seconds -
                         base_cost.pipeline_comm_seconds - base_cost.data_comm_seconds -
                         base_cost.optimizer_seconds;
  EXPECT_NEAR(costly_h1.elementwise_seconds - base_cost.elementwise_seconds,
              compute * (1 + 2 * 1.2) / 3 - compute, 1e-9 * compute);
  EXPECT_GT(costly_h1.step_seconds - costly_h1.bubble_seconds,
            h1_cost.step_seconds - h1_cost.bubble_seconds);
  // The simulation of ZB-H1's fixed order at F = 1, B = W = 1.2: its idle time follows the
  // costs (p - 1 input halves, 3.6 units against 8 x 3.4 busy), above the equal case's
  // third of 1F1B's and far below 1F1B's.
  EXPECT_NEAR(costly_h1.bubble_fraction, 3 * 1.2 / (8 * 3.4), 1e-12);
  EXPECT_GT(costly_h1.bubble_fraction, h1_cost.bubble_fraction);
  EXPECT_LT(costly_h1.bubble_fraction, base_cost.bubble_fraction / 2);
}

TEST(StepCostModelTest, RanksSharingADeviceLoseLessToTheBubble) {
  const JobSpec spec =
      ResolvedSpecForTest(R"({"model": {"num_layers": 8}, "parallel": {"pipeline": 4,
      "global_batch_size": 8}})");
  const ClusterDescription cluster = Cluster(1, 8);
  StepCostOptions shared;
  shared.ranks_per_device = 4;
  EXPECT_NEAR(PredictStepCost(spec, cluster, shared).bubble_seconds,
              PredictStepCost(spec, cluster).bubble_seconds / 4, 1e-15);
}

// The layer's matrices come from model/'s configuration: the FFN width, and SwiGLU's
// second input projection (one more h x F GEMM, half of what doubling F adds to fc and
// proj together; without the small-matrix penalty GEMM time is linear in F).
TEST(StepCostModelTest, FfnWidthAndGatedMlpArePriced) {
  const ClusterDescription cluster = Cluster(1, 1);
  const JobSpec gpt2 = ResolvedSpecForTest("{}");
  JobSpec wide = ResolvedSpecForTest(R"({"model": {"ffn_hidden_size": 1024}})");
  JobSpec gated = gpt2;
  gated.mutable_model()->set_activation(ACTIVATION_SWIGLU);  // priced, not trained yet
  const double base = PredictStepCost(gpt2, cluster).matmul_seconds;
  const double doubled = PredictStepCost(wide, cluster).matmul_seconds;
  const double with_gate = PredictStepCost(gated, cluster).matmul_seconds;
  EXPECT_GT(doubled, base);
  EXPECT_NEAR(with_gate - base, (doubled - base) / 2, 1e-12 * base);
}

TEST(StepCostModelTest, TensorParallelismDividesTheMatmulsAndAddsAllReduces) {
  const ClusterDescription cluster = Cluster(1, 8);
  const StepCost one =
      PredictStepCost(ResolvedSpecForTest(R"({"parallel": {"tensor": 1}})"), cluster);
  const StepCost two =
      PredictStepCost(ResolvedSpecForTest(R"({"parallel": {"tensor": 2}})"), cluster);
  EXPECT_EQ(one.tensor_comm_seconds, 0);
  // Without the small-matrix penalty the layers' GEMMs halve exactly; the head's
  // vocabulary (256, padded to 256 for t = 2) halves too.
  EXPECT_NEAR(two.matmul_seconds, one.matmul_seconds / 2, 1e-15);
  // 4 layers x (2 forward + 2 backward) ring all-reduces of n h e = 128 * 128 * 4 bytes
  // between 2 ranks, (bytes / 1e10 + 2 * 1e-6) each, plus the head's and the embedding's,
  // and the cross-entropy's three of 128 values.
  const double all_reduce = 65536.0 / 1e10 + 2e-6;
  const double small_all_reduce = 512.0 / 1e10 + 2e-6;
  EXPECT_NEAR(two.tensor_comm_seconds, (4 * 4 + 2) * all_reduce + 3 * small_all_reduce, 1e-15);
}

TEST(StepCostModelTest, GroupsThatLeaveANodeUseTheSlowerLink) {
  const JobSpec spec = ResolvedSpecForTest(R"({"parallel": {"tensor": 4}})");
  const StepCost inside = PredictStepCost(spec, Cluster(1, 4));
  const StepCost across = PredictStepCost(spec, Cluster(2, 2));
  EXPECT_GT(across.tensor_comm_seconds, 5 * inside.tensor_comm_seconds);
  EXPECT_DOUBLE_EQ(across.matmul_seconds, inside.matmul_seconds);
}

// Data groups of 8 with t = 2 on 4-device nodes: two members on each node, so the ring's
// traffic between nodes goes through two adapters at once when the node has them.
TEST(StepCostModelTest, GroupsSpanningNodesDriveOneAdapterPerMemberOnANode) {
  const JobSpec spec =
      ResolvedSpecForTest(R"({"parallel": {"tensor": 2, "data": 8, "global_batch_size": 8}})");
  ClusterDescription one_adapter = Cluster(4, 4);
  ClusterDescription adapters = Cluster(4, 4);
  adapters.set_inter_node_adapters(4);
  StepCostOptions no_overlap;
  const StepCost shared = PredictStepCost(spec, one_adapter, no_overlap);
  const StepCost spread = PredictStepCost(spec, adapters, no_overlap);
  // Same latencies, twice the bandwidth (two members a node, not four).
  const double latency = 2 * 7 * 1e-5;
  EXPECT_NEAR(spread.data_comm_seconds - latency, (shared.data_comm_seconds - latency) / 2, 1e-12);
  // Tensor pairs stay inside a node either way.
  EXPECT_DOUBLE_EQ(spread.tensor_comm_seconds, shared.tensor_comm_seconds);
}

TEST(StepCostModelTest, ScatterGatherSendsASliceAndAllGathersItInTheTensorGroup) {
  // t = 2, p = 2, one stage a node: messages between nodes, the all-gather inside.
  const JobSpec spec =
      ResolvedSpecForTest(R"({"parallel": {"tensor": 2, "pipeline": 2, "global_batch_size": 4}})");
  const ClusterDescription cluster = Cluster(2, 2);
  StepCostOptions whole, sliced;
  sliced.scatter_gather = true;
  const StepCost plain = PredictStepCost(spec, cluster, whole);
  const StepCost scattered = PredictStepCost(spec, cluster, sliced);
  // n h e = 1 x 128 x 128 x 4 bytes (micro batch 1, default seq 128, hidden 128, fp32) per
  // message, two messages per microbatch and 4 microbatches.
  const double bytes = 128.0 * 128 * 4;
  const double whole_message = bytes / 1e9 + 1e-5;
  const double sliced_message = bytes / 2 / 1e9 + 1e-5 + (bytes / 2 / 1e10 + 1e-6);
  EXPECT_NEAR(plain.pipeline_comm_seconds, 4 * 2 * whole_message, 1e-12);
  EXPECT_NEAR(scattered.pipeline_comm_seconds, 4 * 2 * sliced_message, 1e-12);
}

TEST(StepCostModelTest, SequenceParallelismSplitsTheElementwiseRowsAndRegathersInTheBackward) {
  // t = 2, p = 2, one stage a node, as above.
  const std::string layout = R"("tensor": 2, "pipeline": 2, "global_batch_size": 4)";
  const ClusterDescription cluster = Cluster(2, 2);
  const JobSpec plain_spec = ResolvedSpecForTest(absl::StrCat(R"({"parallel": {)", layout, "}}"));
  const JobSpec sp_spec = ResolvedSpecForTest(
      absl::StrCat(R"({"parallel": {)", layout, R"(, "sequence_parallel": true}})"));
  StepCostOptions options;
  options.scatter_gather = true;
  const StepCost plain = PredictStepCost(plain_spec, cluster, options);
  const StepCost sp = PredictStepCost(sp_spec, cluster, options);
  EXPECT_EQ(sp.matmul_seconds, plain.matmul_seconds);
  EXPECT_LT(sp.elementwise_seconds, plain.elementwise_seconds);
  // Per microbatch and layer two more all-gathers of n h e (the LayerNorm outputs again):
  // 4 microbatches x 2 layers of this stage x 2.
  const double bytes = 128.0 * 128 * 4;
  const double all_gather = bytes / 2 / 1e10 + 1e-6;
  EXPECT_NEAR(sp.tensor_comm_seconds - plain.tensor_comm_seconds, 4 * 2 * 2 * all_gather, 1e-12);
  // Messages: the rank's rows between the stages, without scatter/gather's all-gather.
  EXPECT_NEAR(sp.pipeline_comm_seconds, 4 * 2 * (bytes / 2 / 1e9 + 1e-5), 1e-12);
  EXPECT_NEAR(plain.pipeline_comm_seconds - sp.pipeline_comm_seconds, 4 * 2 * all_gather, 1e-12);
}

TEST(StepCostModelTest, RecomputeGranularitiesPriceWhatTheyRerun) {
  const auto flops = [](const char* train) {
    return HardwareFlopsPerStep(
        ResolvedSpecForTest(absl::StrCat(R"({"model": {"num_layers": 4}, "train": )", train, "}")));
  };
  const double none = flops("{}");
  const double full = flops(R"({"recompute_granularity": "full"})");
  // Selective reruns the attention core's two products: 4 B s^2 h per layer (B = 1 here,
  // s = h = 128, 4 layers).
  EXPECT_DOUBLE_EQ(flops(R"({"recompute_granularity": "selective"})") - none,
                   4.0 * 128 * 128 * 128 * 4);
  // Block 1 of 4 layers: a quarter of full recomputation's extra forward.
  EXPECT_DOUBLE_EQ(flops(R"({"recompute_granularity": "full", "recompute_method": "block",
                             "recompute_num_layers": 1})") -
                       none,
                   (full - none) / 4);
  EXPECT_DOUBLE_EQ(full, flops(R"({"recompute": true})"));
  // The engine's pipeline messages are sliced unless the spec says otherwise.
  EXPECT_TRUE(
      ProjectEngineOptions(ResolvedSpecForTest(R"({"parallel": {"tensor": 2}})")).scatter_gather);
  EXPECT_FALSE(ProjectEngineOptions(
                   ResolvedSpecForTest(R"({"parallel": {"tensor": 2, "scatter_gather": false}})"))
                   .scatter_gather);
}

TEST(StepCostModelTest, ASeparateGradientAccumulationPassCostsItsBytesEachMicrobatch) {
  const JobSpec spec = ResolvedSpecForTest(R"({"parallel": {"global_batch_size": 4}})");
  const ClusterDescription cluster = Cluster(1, 1);
  StepCostOptions fused, separate;
  separate.gradient_accumulation_bytes = 6;
  const StepCost a = PredictStepCost(spec, cluster, fused);
  const StepCost b = PredictStepCost(spec, cluster, separate);
  const double parameters = 4 * (12.0 * 128 * 128 + 13 * 128) + 256 * 128 + 2 * 128;
  EXPECT_NEAR(b.elementwise_seconds - a.elementwise_seconds, 4 * parameters * 6 / 1e11, 1e-12);
  EXPECT_NEAR(b.step_seconds - a.step_seconds, 4 * parameters * 6 / 1e11, 1e-12);
}

TEST(StepCostModelTest, DataParallelReductionIsARingAllReduceMinusItsOverlap) {
  const JobSpec spec = ResolvedSpecForTest(R"({"parallel": {"data": 4}})");
  const ClusterDescription cluster = Cluster(1, 4);
  const StepCost plain = PredictStepCost(spec, cluster);
  // The last stage's parameters: 4 layers of 12 C^2 + 13 C, the 256 x 128 word embedding
  // and the final LayerNorm; each of 4 ranks all-reduces their fp32 gradients in a ring.
  const double parameters = 4 * (12.0 * 128 * 128 + 13 * 128) + 256 * 128 + 2 * 128;
  const double expected = 2 * 3.0 / 4 * parameters * 4 / 1e10 + 2 * 3 * 1e-6;
  EXPECT_NEAR(plain.data_comm_seconds, expected, 1e-12);
  StepCostOptions overlapped;
  overlapped.data_parallel_overlap = 1;
  EXPECT_EQ(PredictStepCost(spec, cluster, overlapped).data_comm_seconds, 0);
  // ZeRO-1 updates a quarter of the parameters on each rank.
  const StepCost zero = PredictStepCost(
      ResolvedSpecForTest(R"({"parallel": {"data": 4, "zero_stage": 1}})"), cluster);
  EXPECT_LT(zero.optimizer_seconds, plain.optimizer_seconds / 2);
}

TEST(StepCostModelTest, RecomputeRepeatsTheForwardAndMfuCountsOnlyTheModel) {
  const ClusterDescription cluster = Cluster(1, 1);
  const StepCost plain = PredictStepCost(ResolvedSpecForTest("{}"), cluster);
  const StepCost recomputed =
      PredictStepCost(ResolvedSpecForTest(R"({"train": {"recompute": true}})"), cluster);
  // Layers: 3 passes' worth of GEMMs become 4; the head is not recomputed.
  EXPECT_GT(recomputed.matmul_seconds, 1.25 * plain.matmul_seconds);
  EXPECT_LT(recomputed.matmul_seconds, 4.0 / 3 * plain.matmul_seconds + 1e-12);
  EXPECT_GT(recomputed.step_seconds, plain.step_seconds);
  EXPECT_LT(recomputed.mfu, plain.mfu);
  EXPECT_NEAR(plain.mfu, plain.model_flops / plain.step_seconds / 1e12, 1e-12);
  EXPECT_NEAR(plain.tokens_per_second, 1 * 128 / plain.step_seconds, 1e-9);
}

TEST(StepCostModelTest, HalfPrecisionUsesTheTensorCoreRate) {
  const ClusterDescription cluster = Cluster(1, 1);
  const StepCost fp32 =
      PredictStepCost(ResolvedSpecForTest(R"({"device": "DEVICE_CUDA"})"), cluster);
  const StepCost bf16 = PredictStepCost(
      ResolvedSpecForTest(R"({"device": "DEVICE_CUDA", "precision": "PRECISION_BF16"})"), cluster);
  EXPECT_NEAR(bf16.matmul_seconds, fp32.matmul_seconds / 8, 1e-15);
  EXPECT_DOUBLE_EQ(PeakFlops(ResolvedSpecForTest(R"({"device": "DEVICE_CUDA",
      "precision": "PRECISION_BF16"})"),
                             cluster.device()),
                   8e12);
}

TEST(StepCostModelTest, UnfusedAttentionPaysForItsScoresInMemory) {
  const JobSpec spec = ResolvedSpecForTest(R"({"model": {"seq_length": 1024}})");
  const ClusterDescription cluster = Cluster(1, 1);
  StepCostOptions unfused;
  unfused.attention = AttentionKernel::kUnfused;
  EXPECT_GT(PredictStepCost(spec, cluster, unfused).attention_seconds,
            1.5 * PredictStepCost(spec, cluster).attention_seconds);
}

}  // namespace
}  // namespace mtrain
