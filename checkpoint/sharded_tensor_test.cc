#include "checkpoint/sharded_tensor.h"

#include "gtest/gtest.h"

namespace mtrain {
namespace {

TEST(ShardedTensorTest, GlobalIndexWalksTheShardInsideTheGlobalTensor) {
  // Rank 1 of 2 holding the right half of the columns of a [4, 6] tensor.
  ShardedTensor t;
  t.name = "w";
  t.size = 12;
  t.global_shape = {4, 6};
  t.local_shape = {4, 3};
  t.global_offset = {0, 3};
  EXPECT_EQ(GlobalIndex(t, 0), 3);    // (0, 3)
  EXPECT_EQ(GlobalIndex(t, 2), 5);    // (0, 5)
  EXPECT_EQ(GlobalIndex(t, 3), 9);    // (1, 3)
  EXPECT_EQ(GlobalIndex(t, 11), 23);  // (3, 5)
}

TEST(ShardedTensorTest, GlobalIndexOfAMiddleDimensionSplit) {
  // Q/K/V blocks [3, 4, 2] split on the middle dimension: rank 1 of 2 holds rows 2-3 of
  // each block.
  ShardedTensor t;
  t.global_shape = {3, 4, 2};
  t.local_shape = {3, 2, 2};
  t.global_offset = {0, 2, 0};
  t.size = 12;
  EXPECT_EQ(GlobalIndex(t, 0), 4);    // (0, 2, 0)
  EXPECT_EQ(GlobalIndex(t, 3), 7);    // (0, 3, 1)
  EXPECT_EQ(GlobalIndex(t, 4), 12);   // (1, 2, 0)
  EXPECT_EQ(GlobalIndex(t, 11), 23);  // (2, 3, 1)
}

TEST(ShardedTensorTest, AWholeTensorIsItsOwnIndex) {
  ShardedTensor t;
  t.global_shape = {5};
  t.local_shape = {5};
  t.global_offset = {0};
  t.size = 5;
  for (int64_t i = 0; i < 5; ++i) EXPECT_EQ(GlobalIndex(t, i), i);
}

}  // namespace
}  // namespace mtrain
