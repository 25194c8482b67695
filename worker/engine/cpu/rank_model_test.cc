#include "worker/engine/cpu/rank_model.h"

#include "gtest/gtest.h"

namespace mtrain {
namespace {

ModelShape Shape() {
  const ModelShape s = Gpt2Config(/*num_layers=*/4, /*num_heads=*/4, /*hidden=*/16,
                                  /*seq_length=*/8, /*vocab=*/200, /*padded_vocab=*/256);
  return s;
}

std::unique_ptr<RankModel> Make(const std::vector<ChunkLayers>& layers, int stage, int pipeline,
                                int t, int tp_rank, size_t pad = 1) {
  const ModelShape shape = Shape();
  absl::StatusOr<std::unique_ptr<RankModel>> model = RankModel::Create(
      shape, ChunkPlacements(layers, stage, pipeline, t, tp_rank), 2, ModelOptions{},
      TensorParallelGroup<float>{t, tp_rank, nullptr, nullptr, nullptr}, pad);
  EXPECT_TRUE(model.ok()) << model.status();
  (*model)->Initialize(42);
  return std::move(*model);
}

// For the same seed, every shard of every layout holds exactly the single-rank values.
TEST(RankModelTest, EveryShardStartsFromTheSingleRankWeights) {
  const auto whole = Make({{0, 4}}, 0, 1, 1, 0);
  int checked = 0;
  for (int t : {2, 4}) {
    for (int tp_rank = 0; tp_rank < t; ++tp_rank) {
      // Interleaved stage 1 of 2 with two chunks: layers 1 and 3.
      const auto shard = Make({{1, 1}, {3, 1}}, 1, 2, t, tp_rank);
      for (const ParamTensor& s : shard->tensors()) {
        const ParamTensor* w = whole->Find(s.name);
        ASSERT_NE(w, nullptr) << s.name;
        for (size_t i = 0; i < s.size; ++i) {
          ASSERT_EQ(shard->params()[s.offset + i],
                    whole->params()[w->offset + GlobalIndex(s, static_cast<int64_t>(i))])
              << s.name << " t=" << t << " rank " << tp_rank;
          ++checked;
        }
      }
    }
  }
  EXPECT_GT(checked, 0);
}

TEST(RankModelTest, ChunksShareOneBufferPaddedForZeroShards) {
  const auto model = Make({{1, 1}, {3, 1}}, 1, 2, 1, 0, /*pad=*/3);
  EXPECT_EQ(model->num_chunks(), 2);
  EXPECT_EQ(model->buffer_size() % 3, 0u);
  EXPECT_GE(model->buffer_size(), model->num_params());
  EXPECT_EQ(model->chunk_layout(1).begin_offset(), model->chunk_layout(0).end_offset());
  // The last stage's last chunk holds the head (and the tied table); the middle none.
  EXPECT_NE(model->Find("lnf.weight"), nullptr);
  EXPECT_NE(model->Find("wte"), nullptr);
  EXPECT_EQ(model->Find("wpe"), nullptr);
}

TEST(RankModelTest, RefusesTheTiedEmbeddingTwiceOnOneRank) {
  const ModelShape shape = Shape();
  // One stage with two chunks: chunk 0 would hold the embedding, chunk 1 the head.
  absl::StatusOr<std::unique_ptr<RankModel>> model =
      RankModel::Create(shape, ChunkPlacements({{0, 2}, {2, 2}}, 0, 1, 1, 0), 2, ModelOptions{},
                        TensorParallelGroup<float>{}, 1);
  EXPECT_EQ(model.status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace mtrain
