// The (tensor, pipeline, data) grid of a job's ranks, and every process group derived from
// it by one function.
//
//   global_rank = tp_rank + tensor * (dp_rank + data * pp_rank)
//
// Tensor parallel is innermost, so a tensor group is `tensor` consecutive ranks (one host,
// where its heavy all-reduces belong); pipeline is outermost (point-to-point across hosts).
// Megatron's example, 16 ranks as t=2, p=4, d=2:
//   tensor groups   [0,1] [2,3] ... [14,15]
//   data groups     [0,2] [1,3] [4,6] ... [13,15]
//   pipeline groups [0,4,8,12] [1,5,9,13] [2,6,10,14] [3,7,11,15]
//
//   ASSIGN_OR_RETURN(RankGrid grid, RankGrid::Create(2, 4, 2));
//   std::vector<int> peers = grid.GroupMembers(GroupKind::kData, my_rank);
#ifndef MTRAIN_PLAN_RANK_GRID_H_
#define MTRAIN_PLAN_RANK_GRID_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace mtrain {

struct GridCoordinates {
  int tp = 0;
  int pp = 0;
  int dp = 0;
};

enum class GroupKind {
  kTensor,         // same (pp, dp): splits a layer; all-reduces every layer
  kData,           // same (tp, pp): replicas; all-reduce gradients
  kPipeline,       // same (tp, dp): stages in order; point-to-point activations
  kModelParallel,  // same dp: one whole model replica (t * p ranks); gradient norm
  kEmbedding,      // first and last stage of a pipeline group (one rank when p == 1):
                   // all-reduce the tied embedding's gradient. Ranks of middle stages
                   // belong to no embedding group (GroupMembers returns none).
};

// Every kind, in the order groups must be created (each member creates its groups in this
// one order, so rendezvous never waits on a group a peer has not reached).
inline constexpr GroupKind kAllGroupKinds[] = {GroupKind::kTensor, GroupKind::kData,
                                               GroupKind::kPipeline, GroupKind::kModelParallel,
                                               GroupKind::kEmbedding};

const char* GroupKindName(GroupKind kind);

class RankGrid {
 public:
  // INVALID_ARGUMENT unless every degree is positive.
  static absl::StatusOr<RankGrid> Create(int tensor, int pipeline, int data);

  int tensor() const { return tensor_; }
  int pipeline() const { return pipeline_; }
  int data() const { return data_; }
  int world_size() const { return tensor_ * pipeline_ * data_; }

  int GlobalRank(const GridCoordinates& c) const;
  // Requires 0 <= global_rank < world_size().
  GridCoordinates Coordinates(int global_rank) const;

  // The members of `global_rank`'s group of `kind`, as global ranks in group-rank order
  // (so the caller's rank in the group is its index here). The one function every group
  // is derived from.
  std::vector<int> GroupMembers(GroupKind kind, int global_rank) const;

  // Which group of `kind` `global_rank` belongs to, 0-based and dense; names the group in
  // rendezvous keys and error messages.
  int GroupIndex(GroupKind kind, int global_rank) const;

  // Every group of `kind`, each in group-rank order, ordered by GroupIndex.
  std::vector<std::vector<int>> AllGroups(GroupKind kind) const;

 private:
  RankGrid(int tensor, int pipeline, int data)
      : tensor_(tensor), pipeline_(pipeline), data_(data) {}

  int tensor_;
  int pipeline_;
  int data_;
};

}  // namespace mtrain

#endif  // MTRAIN_PLAN_RANK_GRID_H_
