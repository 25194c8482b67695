#include "plan/layer_partition.h"

#include "gtest/gtest.h"

namespace mtrain {
namespace {

std::vector<std::pair<int, int>> Ranges(int layers, int p, int v, int stage, bool v_shape = false) {
  absl::StatusOr<std::vector<LayerRange>> chunks = PartitionLayers(layers, p, v, stage, v_shape);
  EXPECT_TRUE(chunks.ok()) << chunks.status();
  std::vector<std::pair<int, int>> out;
  for (const LayerRange& r : *chunks) out.emplace_back(r.first_layer(), r.num_layers());
  return out;
}

TEST(LayerPartitionTest, ContiguousStagesWithoutInterleaving) {
  EXPECT_EQ(Ranges(8, 4, 1, 0), (std::vector<std::pair<int, int>>{{0, 2}}));
  EXPECT_EQ(Ranges(8, 4, 1, 3), (std::vector<std::pair<int, int>>{{6, 2}}));
  EXPECT_EQ(Ranges(6, 1, 1, 0), (std::vector<std::pair<int, int>>{{0, 6}}));
}

TEST(LayerPartitionTest, InterleavedChunksAreVirtualStages) {
  EXPECT_EQ(Ranges(8, 2, 2, 0), (std::vector<std::pair<int, int>>{{0, 2}, {4, 2}}));
  EXPECT_EQ(Ranges(8, 2, 2, 1), (std::vector<std::pair<int, int>>{{2, 2}, {6, 2}}));
  EXPECT_EQ(Ranges(12, 3, 2, 2), (std::vector<std::pair<int, int>>{{4, 2}, {10, 2}}));
}

// ZB-V: down the stages in chunk 0, back up in chunk 1; stage 0 holds both ends.
TEST(LayerPartitionTest, TheVPlacementRunsDownAndBackUp) {
  EXPECT_EQ(Ranges(8, 2, 2, 0, true), (std::vector<std::pair<int, int>>{{0, 2}, {6, 2}}));
  EXPECT_EQ(Ranges(8, 2, 2, 1, true), (std::vector<std::pair<int, int>>{{2, 2}, {4, 2}}));
  EXPECT_EQ(Ranges(8, 4, 2, 3, true), (std::vector<std::pair<int, int>>{{3, 1}, {4, 1}}));
  EXPECT_EQ(PartitionLayers(12, 2, 3, 0, true).status().code(), absl::StatusCode::kInvalidArgument);
}

// Every layer lands on exactly one (stage, chunk), in the loop and in the V.
TEST(LayerPartitionTest, CoversEveryLayerOnce) {
  const int layers = 24;
  for (int p : {1, 2, 3, 4}) {
    for (int v : {1, 2}) {
      for (bool v_shape : {false, true}) {
        if (v_shape && v != 2) continue;
        std::vector<int> owner(layers, 0);
        for (int stage = 0; stage < p; ++stage) {
          for (const auto& [first, count] : Ranges(layers, p, v, stage, v_shape)) {
            for (int l = first; l < first + count; ++l) owner[l]++;
          }
        }
        for (int l = 0; l < layers; ++l) {
          EXPECT_EQ(owner[l], 1) << "p=" << p << " v=" << v << " V " << v_shape;
        }
      }
    }
  }
}

TEST(LayerPartitionTest, RejectsIndivisibleLayersAndBadStage) {
  EXPECT_EQ(PartitionLayers(6, 4, 1, 0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(PartitionLayers(8, 2, 2, 2).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace mtrain
