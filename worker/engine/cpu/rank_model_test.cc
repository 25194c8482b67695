#include "worker/engine/cpu/rank_model.h"

#include "gtest/gtest.h"

namespace mtrain {
namespace {

ModelShape Shape() {
  const ModelShape s = Gpt2Config(/*num_layers=*/4, /*num_heads=*/4, /*hidden=*/16,
                                  /*seq_length=*/8, /*vocab=*/200, /*padded_vocab=*/256);
  return s;
}

std::unique_ptr<RankModel> Make(const std::vector<ChunkLayers>& layers, int t, int tp_rank,
                                size_t pad = 1) {
  const ModelShape shape = Shape();
  absl::StatusOr<std::unique_ptr<RankModel>> model = RankModel::Create(
      shape, ChunkPlacements(layers, shape.num_layers, t, tp_rank), 2, ModelOptions{},
      TensorParallelGroup<float>{t, tp_rank, nullptr, nullptr, nullptr}, pad);
  EXPECT_TRUE(model.ok()) << model.status();
  (*model)->Initialize(42);
  return std::move(*model);
}

// For the same seed, every shard of every layout holds exactly the single-rank values.
TEST(RankModelTest, EveryShardStartsFromTheSingleRankWeights) {
  const auto whole = Make({{0, 4}}, 1, 0);
  int checked = 0;
  for (int t : {2, 4}) {
    for (int tp_rank = 0; tp_rank < t; ++tp_rank) {
      // Interleaved stage 1 of 2 with two chunks: layers 1 and 3.
      const auto shard = Make({{1, 1}, {3, 1}}, t, tp_rank);
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
  const auto model = Make({{1, 1}, {3, 1}}, 1, 0, /*pad=*/3);
  EXPECT_EQ(model->num_chunks(), 2);
  EXPECT_EQ(model->buffer_size() % 3, 0u);
  EXPECT_GE(model->buffer_size(), model->num_params());
  EXPECT_EQ(model->chunk_layout(1).begin_offset(), model->chunk_layout(0).end_offset());
  // The last stage's last chunk holds the head (and the tied table); the middle none.
  EXPECT_NE(model->Find("lnf.weight"), nullptr);
  EXPECT_NE(model->Find("wte"), nullptr);
  EXPECT_EQ(model->Find("wpe"), nullptr);
}

TEST(RankModelTest, TwoChunksOfOneRankShareTheTiedEmbedding) {
  // ZB-V's stage 0 of 2: chunk 0 = layer 0 with the embedding, chunk 1 = layer 3 with the
  // head; the tied embedding is laid out once and both chunks point at it.
  const auto model = Make({{0, 1}, {3, 1}}, 1, 0);
  int copies = 0;
  for (const ParamTensor& t : model->tensors()) copies += t.name == "wte" ? 1 : 0;
  EXPECT_EQ(copies, 1);
  const RankLayout& layout = model->layout();
  ASSERT_EQ(layout.num_chunks(), 2);
  const ParamTensor* embedding = layout.chunk(0).Find("wte");
  const ParamTensor* head = layout.chunk(1).Find("wte");
  ASSERT_NE(embedding, nullptr);
  ASSERT_NE(head, nullptr);
  EXPECT_EQ(head->offset, embedding->offset);
  EXPECT_TRUE(head->shared_with_earlier_chunk);
  EXPECT_FALSE(embedding->shared_with_earlier_chunk);
  EXPECT_TRUE(layout.SharesTiedCopy());
  // The buffer holds each tensor once: the whole model's count.
  const auto whole = Make({{0, 4}}, 1, 0);
  size_t parts = 0;
  for (const ParamTensor& t : model->tensors()) parts += t.size;
  EXPECT_EQ(parts, model->layout().num_params());
  EXPECT_FALSE(whole->layout().SharesTiedCopy());
}

}  // namespace
}  // namespace mtrain
