#include "spec/job_spec_arithmetic.h"

#include <climits>

#include "gtest/gtest.h"

namespace mtrain {
namespace {

ParallelSpec Parallel(int micro_batch_size, int data, int global_batch_size) {
  ParallelSpec p;
  p.set_micro_batch_size(micro_batch_size);
  p.set_data(data);
  p.set_global_batch_size(global_batch_size);
  return p;
}

TEST(JobSpecArithmeticTest, VocabIsPaddedToMultipleOf128TimesTensor) {
  EXPECT_EQ(PaddedVocabSize(256, 1), 256);
  EXPECT_EQ(PaddedVocabSize(257, 1), 384);
  EXPECT_EQ(PaddedVocabSize(256, 4), 512);
  EXPECT_EQ(PaddedVocabSize(50257, 1), 50304);  // GPT-2's, as Megatron-LM pads it
  EXPECT_EQ(PaddedVocabSize(50257, 8), 51200);
  EXPECT_EQ(PaddedVocabSize(1, 3), 384);
}

TEST(JobSpecArithmeticTest, PaddingIsExactAndTakesNonPositiveSizesAsTheSmallest) {
  EXPECT_EQ(PaddedVocabSize(INT_MAX, 4096), int64_t{1} << 31);
  EXPECT_EQ(PaddedVocabSize(INT_MAX, INT_MAX), int64_t{128} * INT_MAX);
  EXPECT_EQ(PaddedVocabSize(0, 2), 0);
  EXPECT_EQ(PaddedVocabSize(-5, 2), 0);
  EXPECT_EQ(PaddedVocabSize(200, 0), 256);
  EXPECT_EQ(PaddedVocabSize(200, -3), 256);
}

TEST(JobSpecArithmeticTest, MicrobatchesPerReplicaRoundDown) {
  const ParallelSpec p = Parallel(/*micro_batch_size=*/2, /*data=*/4, /*global_batch_size=*/64);
  EXPECT_EQ(NumMicrobatches(p), 8);
  EXPECT_EQ(MicrobatchesPerReplica(p, 4), 8);
  EXPECT_EQ(MicrobatchesPerReplica(p, 2), 16);  // shrunk to 2 replicas: the same batch
  EXPECT_EQ(MicrobatchesPerReplica(p, 3), 10);  // 64 / 6
  EXPECT_TRUE(GlobalBatchSplitsEvenly(p, 4));
  EXPECT_TRUE(GlobalBatchSplitsEvenly(p, 2));
  EXPECT_FALSE(GlobalBatchSplitsEvenly(p, 3));
}

TEST(JobSpecArithmeticTest, NonPositiveSizesGiveNoMicrobatches) {
  for (const ParallelSpec& p : {Parallel(0, 1, 8), Parallel(1, 0, 8), Parallel(1, 1, 0),
                                Parallel(-1, 2, 8), Parallel(1, 1, -8)}) {
    EXPECT_EQ(NumMicrobatches(p), 0) << p.ShortDebugString();
    EXPECT_FALSE(GlobalBatchSplitsEvenly(p, p.data())) << p.ShortDebugString();
  }
}

TEST(JobSpecArithmeticTest, LargeSizesDoNotOverflow) {
  // micro_batch_size * data = 2^32: in 32 bits that was 0, a division by zero.
  const ParallelSpec p = Parallel(1 << 20, 1 << 12, INT_MAX);
  EXPECT_EQ(NumMicrobatches(p), 0);
  EXPECT_FALSE(GlobalBatchSplitsEvenly(p, p.data()));
  EXPECT_EQ(NumMicrobatches(Parallel(1, 1, INT_MAX)), INT_MAX);
}

}  // namespace
}  // namespace mtrain
