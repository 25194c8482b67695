#include "plan/rank_memory_estimate.h"

#include <climits>
#include <string>

#include "gtest/gtest.h"
#include "spec/resolved_spec_for_test.h"

namespace mtrain {
namespace {

TEST(RankMemoryEstimateTest, DefaultModelCountsEveryParameterOnce) {
  // 4 layers of 12 C^2 + 13 C with C = 128, the 256 x 128 tied embedding, 128 x 128
  // positions and the final LayerNorm (worker/engine/parameter_layout.cc).
  const RankMemoryEstimate e = EstimateRankMemory(ResolvedSpecForTest("{}"));
  const int64_t layer = 12 * 128 * 128 + 13 * 128;
  const int64_t parameters = 4 * layer + 256 * 128 + 128 * 128 + 2 * 128;
  EXPECT_EQ(e.parameters, parameters);
  EXPECT_EQ(e.pipeline_stage, 0);
  EXPECT_EQ(e.weight_bytes, 4 * parameters);
  EXPECT_EQ(e.gradient_bytes, 4 * parameters);
  EXPECT_EQ(e.optimizer_bytes, 8 * parameters);
  // One microbatch of 128 tokens in flight through 4 layers: each keeps its input and
  // 3 N C + 12 N C + 4 N and one log-sum-exp per head and query (4 x 128).
  const int64_t n = 128, c = 128;
  const int64_t per_layer = n * c + 3 * n * c + 4 * n + 12 * n * c + 4 * 128;
  EXPECT_EQ(e.activation_bytes, 4 * 4 * per_layer);
  EXPECT_EQ(e.logits_bytes, 4 * (n * 256 + n * c + 5 * n));
  // The chunk's token ids and pipeline buffers (3 N + 3 N C), the backward scratch
  // (2 N C + 8 N C + 4 N C), the head's (N V + 3 N C + N) and the step's tokens (2 N).
  EXPECT_EQ(e.workspace_bytes, 4 * ((3 * n + 3 * n * c) + (2 * n * c + 8 * n * c + 4 * n * c) +
                                    (n * 256 + 3 * n * c + n) + 2 * n));
  EXPECT_EQ(e.total_bytes, e.weight_bytes + e.gradient_bytes + e.optimizer_bytes +
                               e.activation_bytes + e.logits_bytes + e.workspace_bytes);
}

TEST(RankMemoryEstimateTest, TensorParallelismSplitsTheLayersAndTheVocabulary) {
  const RankMemoryEstimate one =
      EstimateRankMemory(ResolvedSpecForTest(R"({"parallel": {"tensor": 1}})"));
  const RankMemoryEstimate two =
      EstimateRankMemory(ResolvedSpecForTest(R"({"parallel": {"tensor": 2}})"));
  const int64_t c = 128;
  // Per layer 12 C Cl + 7 Cl + 6 C; the vocabulary 256 pads to 256 for t = 2 (128 each).
  const int64_t layer2 = 12 * c * 64 + 7 * 64 + 6 * c;
  EXPECT_EQ(two.parameters, 4 * layer2 + 128 * c + 128 * c + 2 * c);
  EXPECT_LT(two.total_bytes, one.total_bytes);
}

TEST(RankMemoryEstimateTest, PipelineStagesSplitTheLayersAndTheLargerStageIsReported) {
  // p = 2: stage 0 has 2 layers, the embedding and positions; stage 1 has 2 layers, its
  // copy of the tied embedding, the final LayerNorm and the logits.
  const RankMemoryEstimate e = EstimateRankMemory(
      ResolvedSpecForTest(R"({"model": {"vocab_size": 50000}, "parallel": {"pipeline": 2}})"));
  EXPECT_EQ(e.pipeline_stage, 1);  // 50048 x 128 logits per token outweigh the positions
  const int64_t layer = 12 * 128 * 128 + 13 * 128;
  EXPECT_EQ(e.parameters, 2 * layer + 50048 * 128 + 2 * 128);
}

TEST(RankMemoryEstimateTest, ZeroOneShardsTheOptimizerStateAcrossData) {
  const RankMemoryEstimate plain =
      EstimateRankMemory(ResolvedSpecForTest(R"({"parallel": {"data": 4}})"));
  const RankMemoryEstimate zero =
      EstimateRankMemory(ResolvedSpecForTest(R"({"parallel": {"data": 4, "zero_stage": 1}})"));
  EXPECT_EQ(zero.optimizer_bytes, (plain.optimizer_bytes + 3) / 4);
  EXPECT_EQ(zero.weight_bytes, plain.weight_bytes);
}

TEST(RankMemoryEstimateTest, GPipeHoldsEveryMicrobatchAnd1F1BAtMostPipeline) {
  const std::string base = R"({"model": {"num_layers": 4}, "parallel": {"pipeline": 2,
      "global_batch_size": 16, "schedule": ")";
  const RankMemoryEstimate gpipe =
      EstimateRankMemory(ResolvedSpecForTest(base + R"(SCHEDULE_GPIPE"}})"));
  const RankMemoryEstimate one_f_one_b =
      EstimateRankMemory(ResolvedSpecForTest(base + R"(SCHEDULE_1F1B"}})"));
  // Stage 0: 16 microbatches in flight under GPipe, 2 under 1F1B (each through 2 layers).
  EXPECT_EQ(gpipe.activation_bytes, 8 * one_f_one_b.activation_bytes);
  EXPECT_EQ(one_f_one_b.pipeline_stage, 0);
  EXPECT_GT(gpipe.logits_bytes, 0);  // GPipe's last stage holds all 16 microbatches' logits
  EXPECT_EQ(gpipe.pipeline_stage, 1);
}

// The split backward (zero-bubble schedules): as many activation sets as 1F1B's first
// stage, plus the owed weight halves' output gradients, [N, 3C] + [N, C] + [N, 4C] +
// [N, C] per layer (N = 2 x 32 tokens, C = 64, two layers a stage, fp32). ZB-H1's stage s
// runs a W once more than s are owed: s + 1 halves at its peak.
TEST(RankMemoryEstimateTest, ZeroBubbleStagesKeepTheirOwedWeightHalvesOutputGradients) {
  const std::string base = R"({"model": {"num_layers": 4, "hidden_size": 64, "num_heads": 4,
      "seq_length": 32, "vocab_size": 256}, "parallel": {"pipeline": 2,
      "micro_batch_size": 2, "global_batch_size": 16, )";
  const JobSpec one_f_one_b = ResolvedSpecForTest(base + R"("schedule": "SCHEDULE_1F1B"}})");
  const JobSpec h1 = ResolvedSpecForTest(base + R"("schedule": "SCHEDULE_ZB_H1"}})");
  const int64_t owed = 4 * 64 * (3 * 64 + 64 + 4 * 64 + 64) * 2;
  EXPECT_EQ(EstimateStageMemory(h1, 0).activation_bytes,
            EstimateStageMemory(one_f_one_b, 0).activation_bytes + owed);
  EXPECT_EQ(EstimateStageMemory(h1, 1).activation_bytes,
            EstimateStageMemory(one_f_one_b, 0).activation_bytes + 2 * owed);
  const JobSpec v =
      ResolvedSpecForTest(base + R"("schedule": "SCHEDULE_ZB_V", "virtual_stages": 2}})");
  const JobSpec interleaved = ResolvedSpecForTest(
      base + R"("schedule": "SCHEDULE_INTERLEAVED_1F1B", "virtual_stages": 2}})");
  EXPECT_GT(EstimateStageMemory(v, 1).activation_bytes, 0);
  // ZB-V's head is on stage 0: its logits are counted there.
  EXPECT_GT(EstimateStageMemory(v, 0).logits_bytes, 0);
  EXPECT_EQ(EstimateStageMemory(v, 1).logits_bytes, 0);
  EXPECT_EQ(EstimateStageMemory(interleaved, 0).logits_bytes, 0);
}

TEST(RankMemoryEstimateTest, RecomputeKeepsOnlyLayerInputs) {
  const RankMemoryEstimate saved = EstimateRankMemory(ResolvedSpecForTest("{}"));
  const RankMemoryEstimate recomputed =
      EstimateRankMemory(ResolvedSpecForTest(R"({"train": {"recompute": true}})"));
  const int64_t n = 128;
  const int64_t saved_set = 3 * n * 128 + 4 * n + 12 * n * 128 + 4 * 128;
  EXPECT_EQ(recomputed.activation_bytes, 4 * (4 * n * 128));
  EXPECT_LT(recomputed.activation_bytes, saved.activation_bytes);
  // The layer being recomputed holds its full set in the workspace, with its input and
  // output and the forward's two alternating inputs.
  EXPECT_EQ(recomputed.workspace_bytes - saved.workspace_bytes, 4 * (saved_set + 4 * n * 128));
}

TEST(RankMemoryEstimateTest, RecomputeGranularitiesKeepWhatTheModelKeeps) {
  const int64_t n = 128, c = 128;
  const RankMemoryEstimate saved = EstimateRankMemory(ResolvedSpecForTest("{}"));
  // Selective: every layer's set less the attention core's output [n, C] and log-sum-exp.
  const RankMemoryEstimate selective = EstimateRankMemory(
      ResolvedSpecForTest(R"({"train": {"recompute_granularity": "selective"}})"));
  const int64_t heads = 4;  // the default model's
  EXPECT_EQ(saved.activation_bytes - selective.activation_bytes, 4 * 4 * (n * c + heads * n));
  // Full, uniform groups of 2 over 4 layers: the inputs of layers 0 and 2.
  const RankMemoryEstimate groups = EstimateRankMemory(ResolvedSpecForTest(
      R"({"train": {"recompute_granularity": "full", "recompute_num_layers": 2}})"));
  EXPECT_EQ(groups.activation_bytes, 4 * (2 * n * c));
  // Full, block 1: layer 0 recomputed, layers 1-3 keep their sets.
  const RankMemoryEstimate block = EstimateRankMemory(ResolvedSpecForTest(
      R"({"train": {"recompute_granularity": "full", "recompute_method": "block",
                    "recompute_num_layers": 1}})"));
  EXPECT_LT(block.activation_bytes, saved.activation_bytes);
  EXPECT_GT(block.activation_bytes, groups.activation_bytes);
}

TEST(RankMemoryEstimateTest, HalfPrecisionAddsAWorkingCopyOfTheWeights) {
  const RankMemoryEstimate fp32 =
      EstimateRankMemory(ResolvedSpecForTest(R"({"device": "DEVICE_CUDA"})"));
  const RankMemoryEstimate bf16 = EstimateRankMemory(
      ResolvedSpecForTest(R"({"device": "DEVICE_CUDA", "precision": "PRECISION_BF16"})"));
  EXPECT_EQ(bf16.weight_bytes, fp32.weight_bytes / 4 * 6);
}

TEST(RankMemoryEstimateTest, ExtremeValuesSaturateInsteadOfWrapping) {
  // Unvalidated: every size at int32's maximum. Products reach ~2^155; they must read as
  // "too big", not wrap to something small or negative (UBSan checks there is no overflow).
  JobSpec spec;
  ModelSpec* m = spec.mutable_model();
  m->set_num_layers(INT_MAX);
  m->set_num_heads(INT_MAX);
  m->set_hidden_size(INT_MAX);
  m->set_seq_length(INT_MAX);
  m->set_vocab_size(INT_MAX);
  ParallelSpec* p = spec.mutable_parallel();
  p->set_micro_batch_size(INT_MAX);
  p->set_global_batch_size(INT_MAX);
  for (Schedule schedule : {SCHEDULE_GPIPE, SCHEDULE_1F1B, SCHEDULE_INTERLEAVED_1F1B}) {
    p->set_schedule(schedule);
    const RankMemoryEstimate e = EstimateRankMemory(spec);
    EXPECT_EQ(e.total_bytes, kSaturatedBytes);
    EXPECT_GE(e.parameters, 0);
    EXPECT_GE(e.activation_bytes, 0);
  }
  // Non-positive sizes (which validation refuses) are taken as 1: no division by zero.
  JobSpec zeros;
  zeros.mutable_parallel()->set_tensor(0);
  zeros.mutable_parallel()->set_pipeline(-3);
  EXPECT_GT(EstimateRankMemory(zeros).total_bytes, 0);
}

TEST(RankMemoryEstimateTest, FormatsBytesForMessages) {
  EXPECT_EQ(FormatMemoryBytes(512), "512 B");
  EXPECT_EQ(FormatMemoryBytes(int64_t{3} << 29), "1.5 GiB");
  EXPECT_EQ(FormatMemoryBytes(int64_t{1} << 40), "1.0 TiB");
  EXPECT_EQ(FormatMemoryBytes(kSaturatedBytes), "more than 8 EiB");
}

}  // namespace
}  // namespace mtrain
