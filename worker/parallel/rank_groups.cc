#include "worker/parallel/rank_groups.h"

#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "worker/parallel/counting_communicator.h"
#include "worker/parallel/nccl_communicator.h"
#include "worker/parallel/solo_communicator.h"

namespace mtrain {
namespace {

absl::StatusOr<std::unique_ptr<Communicator>> Connect(const std::string& name,
                                                      std::vector<int> members, int rank,
                                                      const GroupTransport& transport) {
  if (members.size() == 1) return MakeSoloCommunicator(absl::StrCat(name, " (rank ", rank, ")"));
  if (transport.store == nullptr || transport.device == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("group ", name, " has ", members.size(),
                     " members but no rendezvous store or transport was given"));
  }
  GroupSpec spec;
  spec.name = transport.key_prefix + name;
  spec.members = std::move(members);
  spec.global_rank = rank;
  spec.timeout = transport.timeout;
  spec.watchdog_wait = transport.watchdog_wait;
  return ConnectGlooGroup(*transport.store, *transport.device, spec);
}

}  // namespace

void RankGroups::AbortAll() {
  for (Communicator* group :
       {tensor.get(), data.get(), pipeline.get(), model.get(), embedding.get(), world.get(),
        device_data.get(), device_tensor.get(), device_world.get()}) {
    if (group != nullptr) group->Abort();
  }
}

absl::StatusOr<RankGroups> ConnectRankGroups(const RankGrid& grid, int global_rank,
                                             const GroupTransport& transport) {
  if (global_rank < 0 || global_rank >= grid.world_size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", global_rank, " is outside [0, ", grid.world_size(), ")"));
  }
  RankGroups groups;
  for (GroupKind kind : kAllGroupKinds) {
    std::vector<int> members = grid.GroupMembers(kind, global_rank);
    if (members.empty()) continue;  // middle stages have no embedding group
    const std::string name =
        absl::StrCat(GroupKindName(kind), "-", grid.GroupIndex(kind, global_rank));
    ASSIGN_OR_RETURN(std::unique_ptr<Communicator> group,
                     Connect(name, std::move(members), global_rank, transport));
    // The links a step reports its bytes on (StepMetrics: tensor, pipeline, data); the
    // model group carries only a few scalars a step.
    if (kind != GroupKind::kModelParallel) {
      group = std::make_unique<CountingCommunicator>(std::move(group));
    }
    switch (kind) {
      case GroupKind::kTensor:
        groups.tensor = std::move(group);
        break;
      case GroupKind::kData:
        groups.data = std::move(group);
        break;
      case GroupKind::kPipeline:
        groups.pipeline = std::move(group);
        break;
      case GroupKind::kModelParallel:
        groups.model = std::move(group);
        break;
      case GroupKind::kEmbedding:
        groups.embedding = std::move(group);
        break;
    }
  }
  std::vector<int> everyone;
  for (int r = 0; r < grid.world_size(); ++r) everyone.push_back(r);
  ASSIGN_OR_RETURN(groups.world, Connect("world", std::move(everyone), global_rank, transport));
  // The pipeline's messages go point to point over the world group.
  groups.world = std::make_unique<CountingCommunicator>(std::move(groups.world));
  return groups;
}

absl::Status ConnectDeviceGroups(const RankGrid& grid, int global_rank,
                                 const GroupTransport& transport, int cuda_device,
                                 RankGroups* groups) {
  std::vector<int> data_members = grid.GroupMembers(GroupKind::kData, global_rank);
  std::vector<int> tensor_members = grid.GroupMembers(GroupKind::kTensor, global_rank);
  // The same decision on every rank: the degrees are the job's.
  if (grid.world_size() <= 1) return absl::OkStatus();
  if (transport.store == nullptr) {
    return absl::FailedPreconditionError("GPU groups need a rendezvous store");
  }
  GroupSpec world;
  world.name = transport.key_prefix + "nccl-world";
  for (int r = 0; r < grid.world_size(); ++r) world.members.push_back(r);
  world.global_rank = global_rank;
  world.timeout = transport.timeout;
  world.watchdog_wait = transport.watchdog_wait;
  ASSIGN_OR_RETURN(groups->device_world, ConnectNcclGroup(*transport.store, world, cuda_device));
  // Each split colours the world by the group index (every rank is in exactly one group
  // of each kind).
  auto split = [&](GroupKind kind, const char* name, std::vector<int> members,
                   std::unique_ptr<Communicator>* out) -> absl::Status {
    const int index = grid.GroupIndex(kind, global_rank);
    GroupSpec spec = world;
    spec.name = absl::StrCat(transport.key_prefix, name, index);
    spec.members = std::move(members);
    ASSIGN_OR_RETURN(std::unique_ptr<Communicator> group,
                     SplitNcclGroup(*transport.store, *groups->device_world, &spec, index));
    *out = std::make_unique<CountingCommunicator>(std::move(group));
    return absl::OkStatus();
  };
  // Splits in a fixed order (data, then tensor): every rank makes the same calls.
  if (data_members.size() > 1) {
    RETURN_IF_ERROR(
        split(GroupKind::kData, "nccl-data-", std::move(data_members), &groups->device_data));
  }
  if (tensor_members.size() > 1) {
    RETURN_IF_ERROR(split(GroupKind::kTensor, "nccl-tensor-", std::move(tensor_members),
                          &groups->device_tensor));
  }
  // The world carries the pipeline messages point to point: counted as the others (after
  // the splits, which need the NCCL communicator itself).
  groups->device_world = std::make_unique<CountingCommunicator>(std::move(groups->device_world));
  return absl::OkStatus();
}

}  // namespace mtrain
