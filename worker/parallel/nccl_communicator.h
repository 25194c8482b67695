// The GPU backend of Communicator: NCCL, device memory buffers.
//
//   GroupSpec spec{"tensor-0", {0, 1}, /*global_rank=*/1, absl::Seconds(60)};
//   ASSIGN_OR_RETURN(std::unique_ptr<Communicator> group,
//                    ConnectNcclGroup(store, spec, /*cuda_device=*/1));
//   RETURN_IF_ERROR(group->AllReduce(device_grad, n, ReduceOp::kSum));
//
// Rendezvous: group rank 0 creates the NCCL unique id and publishes it under
// "<spec.name>/nccl-id"; the others wait for it. Further groups are split off such a
// world communicator (SplitNcclGroup, ncclCommSplit) instead of bootstrapping again. The
// communicator is non-blocking (ncclConfig_t::blocking = 0): initialisation and every operation are
// polled (ncclCommGetAsyncError, cudaStreamQuery) until done, so nothing can hang past the timeout;
// on timeout the communicator is aborted (ncclCommAbort) and the call returns DEADLINE_EXCEEDED
// naming the members that did not arrive, as the Gloo backend does: the members report to the store
// through the group's watchdog (group_watchdog.h). Abort() calls ncclCommAbort (from any thread),
// which also stops kernels in flight.
//
// Buffers are device memory on `cuda_device`. Every operation runs on the communicator's
// own CUDA stream and returns when it has completed there, so: finish (synchronize) the
// work that produces an input before the call; the output is ready when the call returns.
// AllReduce results are bit-identical on every member: each of NCCL's algorithms (ring,
// tree, NVLS) reduces an element once and then broadcasts that result.
//
// Point to point: NCCL has no tags. Messages between a pair arrive in the order they were
// sent, and a receiver must post its Recvs in that order with the sender's exact sizes:
// neither the tag nor the size is checked (a mismatch corrupts data or hangs until the
// timeout). StartSend only records the send; it is issued together with the next Recv
// (one ncclGroupStart/End, so two members may each send then receive without deadlock),
// or by PendingSend::Wait, or before the next collective.
//
// Without a CUDA device the factory fails with UNAVAILABLE ("no CUDA device: ...").
// NCCL 2.28 refuses two members of one group on the same GPU.
#ifndef MTRAIN_WORKER_PARALLEL_NCCL_COMMUNICATOR_H_
#define MTRAIN_WORKER_PARALLEL_NCCL_COMMUNICATOR_H_

#include <memory>

#include "absl/status/statusor.h"
#include "worker/parallel/communicator.h"
#include "worker/parallel/key_value_store.h"

namespace mtrain {

// Connects this member to its group on GPU `cuda_device`. Blocks until every member has
// joined: DEADLINE_EXCEEDED after spec.timeout; INVALID_ARGUMENT for a bad spec or device
// index; UNAVAILABLE without a CUDA device or when NCCL fails to connect.
// `store` must outlive the group: the group's watchdog reports to it after a failure.
absl::StatusOr<std::unique_ptr<Communicator>> ConnectNcclGroup(KeyValueStore& store,
                                                               const GroupSpec& spec,
                                                               int cuda_device);

// Splits a group off `world` (a communicator from ConnectNcclGroup over every rank) with
// ncclCommSplit, so one bootstrap through the store serves every group. Collective over
// `world`: every member calls it, for the same sequence of group kinds. `spec` is this
// member's group (its members, in rank order, pass equal specs and the same `color`, e.g.
// the group's index) or null for a member that joins no group this time; then it returns
// null. The new group lives on world's GPU. INVALID_ARGUMENT if `world` is not NCCL.
absl::StatusOr<std::unique_ptr<Communicator>> SplitNcclGroup(KeyValueStore& store,
                                                             Communicator& world,
                                                             const GroupSpec* spec, int color);

}  // namespace mtrain

#endif  // MTRAIN_WORKER_PARALLEL_NCCL_COMMUNICATOR_H_
