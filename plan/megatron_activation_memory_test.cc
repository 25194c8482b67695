#include "plan/megatron_activation_memory.h"

#include "gtest/gtest.h"

namespace mtrain {
namespace {

// GPT-3 175B's layer (Korthikanti et al. 2022, table 3's setting): s = 2048, b = 1,
// h = 12288, a = 96.
MegatronLayerShape Gpt3(double tensor) { return {2048, 1, 12288, 96, tensor}; }

TEST(MegatronActivationMemoryTest, ThePapersFormulasInSixteenBit) {
  const double sbh = 2048.0 * 12288;
  const double as_over_h = 96.0 * 2048 / 12288;  // 16
  MegatronActivationOptions none;
  EXPECT_DOUBLE_EQ(MegatronLayerActivationBytes(Gpt3(1), none), sbh * (34 + 5 * as_over_h));
  EXPECT_DOUBLE_EQ(MegatronLayerActivationBytes(Gpt3(8), none),
                   sbh * (10 + 24.0 / 8 + 5 * as_over_h / 8));
  MegatronActivationOptions sequence;
  sequence.sequence_parallel = true;
  EXPECT_DOUBLE_EQ(MegatronLayerActivationBytes(Gpt3(8), sequence),
                   sbh * (34.0 / 8 + 5 * as_over_h / 8));
  MegatronActivationOptions selective;
  selective.recompute = ActivationRecompute::kSelective;
  selective.sequence_parallel = true;
  EXPECT_DOUBLE_EQ(MegatronLayerActivationBytes(Gpt3(8), selective), sbh * 34.0 / 8);
  MegatronActivationOptions full;
  full.recompute = ActivationRecompute::kFull;
  EXPECT_DOUBLE_EQ(MegatronLayerActivationBytes(Gpt3(8), full), sbh * 2);
}

// The paper's headline: sequence parallelism with selective recompute needs about 5x less
// activation memory than tensor parallelism alone (for 175B at t = 8: 34/8 against
// 10 + 24/8 + 5 a s / (8 h) = 23).
TEST(MegatronActivationMemoryTest, SequenceParallelWithSelectiveRecomputeSavesAboutFiveTimes) {
  MegatronActivationOptions tensor_only;
  MegatronActivationOptions both;
  both.sequence_parallel = true;
  both.recompute = ActivationRecompute::kSelective;
  const double ratio = MegatronLayerActivationBytes(Gpt3(8), tensor_only) /
                       MegatronLayerActivationBytes(Gpt3(8), both);
  EXPECT_NEAR(ratio, 23.0 / 4.25, 1e-9);
  EXPECT_GT(ratio, 5);
}

TEST(MegatronActivationMemoryTest, Fp32DoublesTheElementsButNotTheMasks) {
  MegatronActivationOptions fp32;
  fp32.element_bytes = 4;
  const MegatronLayerShape one = {2048, 1, 12288, 96, 1};
  const double sbh = 2048.0 * 12288;
  EXPECT_DOUBLE_EQ(MegatronLayerActivationBytes(one, fp32), sbh * (66 + 9 * 16.0));
  MegatronActivationOptions no_dropout;
  no_dropout.dropout = false;
  // Without dropout: 16 elements of s b h and the softmax output alone.
  EXPECT_DOUBLE_EQ(MegatronLayerActivationBytes(one, no_dropout), sbh * (32 + 2 * 16.0));
}

}  // namespace
}  // namespace mtrain
