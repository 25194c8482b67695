#include "plan/rank_grid.h"

#include <set>

#include "gtest/gtest.h"

namespace mtrain {
namespace {

using Groups = std::vector<std::vector<int>>;

// Megatron-LM's documented example: 16 GPUs, tensor 2, pipeline 4, data 2.
TEST(RankGridTest, MegatronSixteenRankExample) {
  absl::StatusOr<RankGrid> grid = RankGrid::Create(2, 4, 2);
  ASSERT_TRUE(grid.ok());
  EXPECT_EQ(grid->world_size(), 16);
  EXPECT_EQ(grid->AllGroups(GroupKind::kTensor),
            (Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}, {8, 9}, {10, 11}, {12, 13}, {14, 15}}));
  EXPECT_EQ(grid->AllGroups(GroupKind::kData),
            (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}, {8, 10}, {9, 11}, {12, 14}, {13, 15}}));
  EXPECT_EQ(grid->AllGroups(GroupKind::kPipeline),
            (Groups{{0, 4, 8, 12}, {1, 5, 9, 13}, {2, 6, 10, 14}, {3, 7, 11, 15}}));
  EXPECT_EQ(grid->AllGroups(GroupKind::kEmbedding), (Groups{{0, 12}, {1, 13}, {2, 14}, {3, 15}}));
  EXPECT_EQ(grid->AllGroups(GroupKind::kModelParallel),
            (Groups{{0, 1, 4, 5, 8, 9, 12, 13}, {2, 3, 6, 7, 10, 11, 14, 15}}));
}

TEST(RankGridTest, CoordinatesRoundTripAndFollowTheFormula) {
  absl::StatusOr<RankGrid> grid = RankGrid::Create(2, 3, 4);
  ASSERT_TRUE(grid.ok());
  for (int rank = 0; rank < grid->world_size(); ++rank) {
    const GridCoordinates c = grid->Coordinates(rank);
    EXPECT_EQ(rank, c.tp + 2 * (c.dp + 4 * c.pp));
    EXPECT_EQ(grid->GlobalRank(c), rank);
  }
}

// Every kind but the embedding partitions the world: each rank in exactly one group, found
// by its own GroupMembers, at the index GroupIndex says. Embedding groups hold exactly the
// first and last stages.
TEST(RankGridTest, EveryKindPartitionsTheWorld) {
  for (const auto& [t, p, d] : std::vector<std::tuple<int, int, int>>{
           {1, 1, 1}, {2, 1, 1}, {1, 4, 1}, {1, 1, 2}, {2, 2, 2}, {4, 2, 3}}) {
    absl::StatusOr<RankGrid> grid = RankGrid::Create(t, p, d);
    ASSERT_TRUE(grid.ok());
    for (GroupKind kind : kAllGroupKinds) {
      std::multiset<int> seen;
      const Groups groups = grid->AllGroups(kind);
      for (size_t g = 0; g < groups.size(); ++g) {
        for (int rank : groups[g]) {
          seen.insert(rank);
          EXPECT_EQ(grid->GroupMembers(kind, rank), groups[g]);
          EXPECT_EQ(grid->GroupIndex(kind, rank), static_cast<int>(g));
        }
      }
      const int expected = kind != GroupKind::kEmbedding ? grid->world_size()
                           : p == 1                      ? t * d
                                                         : 2 * t * d;
      EXPECT_EQ(static_cast<int>(seen.size()), expected) << GroupKindName(kind);
      EXPECT_EQ(std::set<int>(seen.begin(), seen.end()).size(), seen.size())
          << GroupKindName(kind) << " groups overlap at t=" << t << " p=" << p << " d=" << d;
    }
  }
}

TEST(RankGridTest, EmbeddingGroupIsOneRankWithoutPipelining) {
  absl::StatusOr<RankGrid> grid = RankGrid::Create(2, 1, 2);
  ASSERT_TRUE(grid.ok());
  EXPECT_EQ(grid->GroupMembers(GroupKind::kEmbedding, 3), std::vector<int>{3});
}

TEST(RankGridTest, MiddleStagesHaveNoEmbeddingGroup) {
  absl::StatusOr<RankGrid> grid = RankGrid::Create(1, 4, 1);
  ASSERT_TRUE(grid.ok());
  EXPECT_TRUE(grid->GroupMembers(GroupKind::kEmbedding, 1).empty());
  EXPECT_EQ(grid->GroupMembers(GroupKind::kEmbedding, 3), (std::vector<int>{0, 3}));
}

TEST(RankGridTest, RejectsNonPositiveDegrees) {
  EXPECT_EQ(RankGrid::Create(0, 1, 1).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(RankGrid::Create(1, -1, 1).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace mtrain
