#include "plan/rank_grid.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace mtrain {

const char* GroupKindName(GroupKind kind) {
  switch (kind) {
    case GroupKind::kTensor:
      return "tensor";
    case GroupKind::kData:
      return "data";
    case GroupKind::kPipeline:
      return "pipeline";
    case GroupKind::kModelParallel:
      return "model";
    case GroupKind::kEmbedding:
      return "embedding";
  }
  return "unknown";
}

absl::StatusOr<RankGrid> RankGrid::Create(int tensor, int pipeline, int data) {
  if (tensor <= 0 || pipeline <= 0 || data <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank grid degrees must be positive (tensor=", tensor, ", pipeline=", pipeline,
                     ", data=", data, ")"));
  }
  return RankGrid(tensor, pipeline, data);
}

int RankGrid::GlobalRank(const GridCoordinates& c) const {
  return c.tp + tensor_ * (c.dp + data_ * c.pp);
}

GridCoordinates RankGrid::Coordinates(int global_rank) const {
  GridCoordinates c;
  c.tp = global_rank % tensor_;
  c.dp = (global_rank / tensor_) % data_;
  c.pp = global_rank / (tensor_ * data_);
  return c;
}

std::vector<int> RankGrid::GroupMembers(GroupKind kind, int global_rank) const {
  const GridCoordinates me = Coordinates(global_rank);
  std::vector<int> members;
  switch (kind) {
    case GroupKind::kTensor:
      for (int tp = 0; tp < tensor_; ++tp) members.push_back(GlobalRank({tp, me.pp, me.dp}));
      break;
    case GroupKind::kData:
      for (int dp = 0; dp < data_; ++dp) members.push_back(GlobalRank({me.tp, me.pp, dp}));
      break;
    case GroupKind::kPipeline:
      for (int pp = 0; pp < pipeline_; ++pp) members.push_back(GlobalRank({me.tp, pp, me.dp}));
      break;
    case GroupKind::kModelParallel:
      // Pipeline-major, tensor-minor: ascending global ranks.
      for (int pp = 0; pp < pipeline_; ++pp) {
        for (int tp = 0; tp < tensor_; ++tp) members.push_back(GlobalRank({tp, pp, me.dp}));
      }
      break;
    case GroupKind::kEmbedding:
      if (me.pp != 0 && me.pp != pipeline_ - 1) break;
      members.push_back(GlobalRank({me.tp, 0, me.dp}));
      if (pipeline_ > 1) members.push_back(GlobalRank({me.tp, pipeline_ - 1, me.dp}));
      break;
  }
  return members;
}

int RankGrid::GroupIndex(GroupKind kind, int global_rank) const {
  const GridCoordinates c = Coordinates(global_rank);
  switch (kind) {
    case GroupKind::kTensor:
      return c.dp + data_ * c.pp;
    case GroupKind::kData:
      return c.tp + tensor_ * c.pp;
    case GroupKind::kPipeline:
    case GroupKind::kEmbedding:
      return c.tp + tensor_ * c.dp;
    case GroupKind::kModelParallel:
      return c.dp;
  }
  return 0;
}

std::vector<std::vector<int>> RankGrid::AllGroups(GroupKind kind) const {
  std::vector<std::vector<int>> groups;
  for (int rank = 0; rank < world_size(); ++rank) {
    const int index = GroupIndex(kind, rank);
    if (GroupMembers(kind, rank).empty()) continue;
    if (index == static_cast<int>(groups.size())) groups.push_back(GroupMembers(kind, rank));
  }
  return groups;
}

}  // namespace mtrain
