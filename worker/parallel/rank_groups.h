// Every process group one rank belongs to, built from the rank grid (one function derives
// them all: RankGrid::GroupMembers) and handed to the trainer explicitly.
//
// Groups are created in the fixed order of kAllGroupKinds on every rank, so no rank waits
// in a rendezvous for a group its peers have not reached. A group of one member is a
// SoloCommunicator: no transport at all (a single-rank run needs no network).
//
//   ASSIGN_OR_RETURN(RankGroups groups, ConnectRankGroups(grid, rank, transport));
//   groups.tensor->AllReduce(...);
#ifndef MTRAIN_WORKER_PARALLEL_RANK_GROUPS_H_
#define MTRAIN_WORKER_PARALLEL_RANK_GROUPS_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "plan/rank_grid.h"
#include "worker/parallel/communicator.h"
#include "worker/parallel/gloo_communicator.h"
#include "worker/parallel/key_value_store.h"

namespace mtrain {

struct RankGroups {
  std::unique_ptr<Communicator> tensor;
  std::unique_ptr<Communicator> data;
  std::unique_ptr<Communicator> pipeline;
  std::unique_ptr<Communicator> model;      // tensor x pipeline: one replica
  std::unique_ptr<Communicator> embedding;  // null on middle pipeline stages
  std::unique_ptr<Communicator> world;      // point-to-point by global rank; gathers
  // GPU collectives (NCCL) for the CUDA engine's device buffers, next to the host groups
  // above (which carry losses, norms, checkpoints, and the CPU engine's pipeline
  // messages): a world communicator bootstrapped once (the CUDA engine's pipeline
  // messages go over it) and the data-parallel and tensor-parallel groups split off it.
  // Null unless ConnectDeviceGroups made them.
  std::unique_ptr<Communicator> device_world;
  std::unique_ptr<Communicator> device_data;
  std::unique_ptr<Communicator> device_tensor;

  // Aborts every group (unblocks operations in progress). Safe from another thread.
  void AbortAll();
};

struct GroupTransport {
  // Rendezvous, and the groups' watchdog reports after a failure (group_watchdog.h), so it
  // must outlive the groups. Unused when the world is one rank.
  KeyValueStore* store = nullptr;
  const GlooDevice* device = nullptr;  // unused when the world is one rank
  std::string key_prefix;              // keeps generations of a job apart in one store
  absl::Duration timeout = absl::Minutes(5);
  // GroupSpec::watchdog_wait of every group.
  absl::Duration watchdog_wait = kDefaultWatchdogWait;
};

absl::StatusOr<RankGroups> ConnectRankGroups(const RankGrid& grid, int global_rank,
                                             const GroupTransport& transport);

// Fills groups->device_world (which also carries the CUDA engine's pipeline messages
// point to point), and device_data / device_tensor where that degree is above 1, with
// NCCL communicators on `cuda_device` (the unique id through transport.store). Every rank
// of the world calls it. Nothing to do (OK, all stay null) with a world of one rank.
absl::Status ConnectDeviceGroups(const RankGrid& grid, int global_rank,
                                 const GroupTransport& transport, int cuda_device,
                                 RankGroups* groups);

}  // namespace mtrain

#endif  // MTRAIN_WORKER_PARALLEL_RANK_GROUPS_H_
