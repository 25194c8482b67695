// A process group: collectives and point-to-point messages among its members.
//
// One object per group; groups are built from the rank grid (plan/rank_grid.h)
// and passed explicitly to whoever needs them, never reached through globals. Ranks in the
// interface are ranks WITHIN the group (0 .. size()-1).
//
// Every call is bounded by the group's timeout and returns a status instead of hanging:
//   DEADLINE_EXCEEDED  the operation did not complete in time. The message names the
//                      operation with its number (collectives count from 1 in call order,
//                      the same on every member; messages per peer and direction), the
//                      group with its members' global ranks, the timeout, and the
//                      watchdog's verdict on who is to blame (group_watchdog.h): the peers
//                      that did not arrive, by global and group rank, either silent (hung,
//                      dead or behind) or failed in another operation, or that every member
//                      arrived (the transport stalled); for a message, what the peer
//                      reported it was doing, if anything. E.g.
//                        AllReduce #57 in group data-2 (ranks 2,6) did not complete within
//                        5s; did not arrive: global rank 6 (group rank 1): no watchdog
//                        report within 3s (hung, dead or behind)
//                      If the store fails, the message says why the watchdog could not tell.
//                      A member whose collective failed because another member timed out
//                      in it (and closed its connections) reports DEADLINE_EXCEEDED too.
//   UNAVAILABLE        the transport failed (a peer closed its connection or died); the
//                      message carries the watchdog's verdict as for DEADLINE_EXCEEDED.
//   INVALID_ARGUMENT   a bad peer rank, root or size.
//   FAILED_PRECONDITION the group was aborted (Abort) or is unusable after an error.
// After any error the group must not be used again: its members may disagree about
// which operations completed.
//
// Buffers are host memory for Gloo and device memory for NCCL. Collectives must be called
// by every member in the same order. Not thread-safe: one thread at a time per group
// (different groups may be used from different threads concurrently).
//
//   ASSIGN_OR_RETURN(std::unique_ptr<Communicator> tensor_group, ...);
//   RETURN_IF_ERROR(tensor_group->AllReduce(partial, n, ReduceOp::kSum));
#ifndef MTRAIN_WORKER_PARALLEL_COMMUNICATOR_H_
#define MTRAIN_WORKER_PARALLEL_COMMUNICATOR_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "worker/parallel/reduce_op.h"

namespace mtrain {

// A send in progress. The data passed to StartSend must stay valid and unchanged until
// Wait returns. Destroying a PendingSend that was not waited for waits for it.
class PendingSend {
 public:
  virtual ~PendingSend() = default;
  // Blocks until the peer has taken the message, or the group's timeout passes.
  virtual absl::Status Wait() = 0;
};

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Human-readable identity used in error messages, e.g. "tensor group 3 (ranks 6,7)".
  virtual const std::string& name() const = 0;

  // In place: every member ends with the element-wise reduction over all members, and
  // every member's result is bit-identical (members' copies of replicated parameters must
  // never drift apart).
  virtual absl::Status AllReduce(float* data, size_t count, ReduceOp op) = 0;
  virtual absl::Status AllReduce(double* data, size_t count, ReduceOp op) = 0;

  // out[size() * count] receives every member's in[count], in group-rank order. `in` and
  // `out` must not overlap.
  virtual absl::Status AllGather(const float* in, float* out, size_t count) = 0;

  // in[size() * count] is reduced over members; member r receives block r in out[count].
  virtual absl::Status ReduceScatter(const float* in, float* out, size_t count, ReduceOp op) = 0;

  // data[count] of member `root` is copied to every member.
  virtual absl::Status Broadcast(float* data, size_t count, int root) = 0;

  // In place: member `root` ends with the element-wise reduction over all members in
  // data[count]; the other members' data is left unspecified (ZeRO-1's gradient sums,
  // each range reduced to the replica that updates it). A backend without a reduction
  // to one member runs an all-reduce (reduce_is_all_reduce()).
  virtual absl::Status Reduce(float* data, size_t count, ReduceOp op, int root);
  // Whether Reduce moves an all-reduce's bytes (the default) rather than about a
  // reduce-scatter's.
  virtual bool reduce_is_all_reduce() const { return true; }

  // Point to point. A message is matched by (sender, receiver, tag); several messages with
  // one tag between the same pair arrive in order. StartSend returns at once.
  virtual absl::StatusOr<std::unique_ptr<PendingSend>> StartSend(const void* data, size_t bytes,
                                                                 int peer, uint64_t tag) = 0;
  // Blocks until the message (exactly `bytes` long) has arrived.
  virtual absl::Status Recv(void* data, size_t bytes, int peer, uint64_t tag) = 0;
  // StartSend + Wait.
  absl::Status Send(const void* data, size_t bytes, int peer, uint64_t tag);

  virtual absl::Status Barrier() = 0;

  // Unblocks and fails every operation in progress or to come on this member (used when
  // the job's generation is torn down). Safe to call from another thread.
  virtual void Abort() = 0;
};

// See GroupSpec::watchdog_wait.
inline constexpr absl::Duration kDefaultWatchdogWait = absl::Seconds(3);

// What a backend needs to build one member's view of a group (gloo_communicator.h,
// nccl_communicator.h). Every member passes the same name, members and timeout.
struct GroupSpec {
  // Unique among the groups that rendezvous through one store (and one run: a store must
  // not hold keys of an earlier group with the same name). It prefixes the group's
  // rendezvous keys and appears in every error message, e.g. "tensor-3".
  std::string name;
  // Global ranks, in group-rank order: members[r] is group rank r.
  std::vector<int> members;
  // The caller's global rank; must be one of `members`.
  int global_rank = 0;
  // Bound on the rendezvous and on every wait of every operation.
  absl::Duration timeout = absl::Seconds(60);
  // After an operation times out or its transport fails, how long a member waits for its
  // peers' watchdog reports (group_watchdog.h), at most `timeout`. Members stuck in the
  // same operation fail within moments of each other, so a few seconds tell a hung peer
  // from a live one. A failing operation returns up to this much later. Zero turns the
  // watchdog off (the store is then used only to connect).
  absl::Duration watchdog_wait = kDefaultWatchdogWait;
};

// The caller's group rank: the index of spec.global_rank in spec.members.
// INVALID_ARGUMENT (naming the group) for an empty name or member list, duplicate members,
// a caller outside the group or a non-positive timeout.
absl::StatusOr<int> GroupRankOf(const GroupSpec& spec);

// "tensor-3 (ranks 6,7)": the Communicator::name() backends report.
std::string GroupDisplayName(const GroupSpec& spec);

}  // namespace mtrain

#endif  // MTRAIN_WORKER_PARALLEL_COMMUNICATOR_H_
