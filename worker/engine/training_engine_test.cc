#include "worker/engine/training_engine.h"

#include "gtest/gtest.h"
#include "worker/engine/rank_layout.h"

namespace mtrain {
namespace {

RankLayout Layout(size_t pad) {
  const ModelShape shape = Gpt2Config(/*num_layers=*/2, /*num_heads=*/2, /*hidden=*/8,
                                      /*seq_length=*/4, /*vocab=*/100, /*padded_vocab=*/128);
  absl::StatusOr<RankLayout> layout =
      RankLayout::Create(shape, ChunkPlacements({{0, 2}}, 2, 1, 0), pad);
  EXPECT_TRUE(layout.ok()) << layout.status();
  return std::move(*layout);
}

TEST(OptimizerSliceTest, WithoutZeroTheWholeModelAndNoShard) {
  const RankLayout layout = Layout(1);
  const OptimizerSlice slice = OptimizerSliceOf(layout, 1, 0);
  EXPECT_EQ(slice.begin, 0u);
  EXPECT_EQ(slice.end, layout.num_params());
  EXPECT_EQ(slice.shard_size, 0u);
}

// Under ZeRO-1 the padded buffer is cut into equal shares; the last share's padding is
// nobody's parameters, so the optimizer's range stops at num_params.
TEST(OptimizerSliceTest, ZeroSharesTileThePaddedBufferAndClipToTheParameters) {
  for (int shards : {2, 3, 7}) {
    const RankLayout layout = Layout(shards);
    ASSERT_EQ(layout.buffer_size() % shards, 0u);
    size_t covered = 0;
    for (int r = 0; r < shards; ++r) {
      const OptimizerSlice slice = OptimizerSliceOf(layout, shards, r);
      EXPECT_EQ(slice.shard_size, layout.buffer_size() / shards);
      EXPECT_EQ(slice.shard_begin, r * slice.shard_size);
      EXPECT_EQ(slice.begin, std::min(slice.shard_begin, layout.num_params()));
      EXPECT_LE(slice.end, layout.num_params());
      EXPECT_EQ(slice.begin, covered) << "shards " << shards << " rank " << r;
      covered = slice.end;
    }
    EXPECT_EQ(covered, layout.num_params());
  }
}

TEST(RankLayoutTest, PadsToTheShardCountAndSharesATiedEmbeddingHeldTwice) {
  const RankLayout layout = Layout(7);
  EXPECT_EQ(layout.buffer_size() % 7, 0u);
  EXPECT_GE(layout.buffer_size(), layout.num_params());
  EXPECT_LT(layout.buffer_size() - layout.num_params(), 7u);
  ASSERT_NE(layout.Find("wte"), nullptr);
  EXPECT_EQ(layout.tensors().back().offset + layout.tensors().back().size, layout.num_params());
  // Two chunks with the embedding and the head share one copy of the tied embedding.
  absl::StatusOr<RankLayout> twice =
      RankLayout::Create(layout.shape(), ChunkPlacements({{0, 1}, {1, 1}}, 2, 1, 0), 1);
  ASSERT_TRUE(twice.ok()) << twice.status();
  EXPECT_TRUE(twice->SharesTiedCopy());
  EXPECT_EQ(twice->num_params(), Layout(1).num_params());
}

}  // namespace
}  // namespace mtrain
