#include "checkpoint/shard_from_full.h"

#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace mtrain {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// A [4, 3] tensor 0..11.
FullTensor Counting(int64_t rows, int64_t cols) {
  FullTensor full{{rows, cols}, {}};
  for (int64_t i = 0; i < rows * cols; ++i) full.values.push_back(static_cast<float>(i));
  return full;
}

TEST(ShardFromFullTest, CopiesTheHyperRectangleAtTheOffset) {
  ShardedTensor columns{"fc", 2, 4, {4, 3}, {2, 2}, {1, 1}};  // rows 1-2, columns 1-2
  std::vector<float> params(6, -1);
  ASSERT_TRUE(CopyShardFromFull(Counting(4, 3), columns, params.data()).ok());
  EXPECT_THAT(params, ElementsAre(-1, -1, 4, 5, 7, 8));
  ShardedTensor vector{"bias", 0, 2, {6}, {2}, {3}};
  FullTensor bias{{6}, {0, 1, 2, 3, 4, 5}};
  ASSERT_TRUE(CopyShardFromFull(bias, vector, params.data()).ok());
  EXPECT_THAT(params, ElementsAre(3, 4, 4, 5, 7, 8));
}

TEST(ShardFromFullTest, RowsPastTheRealVocabularyAreZero) {
  // wte: 3 real rows, the layout pads to 4; the second tensor rank holds rows 2-3.
  ShardedTensor wte{"wte", 0, 4, {4, 2}, {2, 2}, {2, 0}};
  std::vector<float> params(4, -1);
  ASSERT_TRUE(CopyShardFromFull(Counting(3, 2), wte, params.data()).ok());
  EXPECT_THAT(params, ElementsAre(4, 5, 0, 0));
}

TEST(ShardFromFullTest, DisagreeingShapesAreNamed) {
  std::vector<float> params(8);
  ShardedTensor wide{"layers.0.fc.weight", 0, 4, {4, 4}, {1, 4}, {0, 0}};
  const absl::Status status = CopyShardFromFull(Counting(4, 3), wide, params.data());
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("layers.0.fc.weight: shape [4, 3] does not fit"));
  ShardedTensor outside{"x", 0, 4, {4, 3}, {2, 2}, {3, 0}};
  EXPECT_FALSE(CopyShardFromFull(Counting(4, 3), outside, params.data()).ok());
}

}  // namespace
}  // namespace mtrain
