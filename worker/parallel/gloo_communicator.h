// The CPU backend of Communicator: Gloo over TCP, host memory buffers.
//
//   ASSIGN_OR_RETURN(GlooDevice device, CreateGlooDevice("10.0.0.7"));  // once per process
//   GroupSpec spec{"tensor-3", {6, 7}, /*global_rank=*/7, absl::Seconds(60)};
//   ASSIGN_OR_RETURN(std::unique_ptr<Communicator> group,
//                    ConnectGlooGroup(store, device, spec));
//   RETURN_IF_ERROR(group->AllReduce(grad, n, ReduceOp::kSum));
//
// Rendezvous: every member publishes its TCP addresses under "<spec.name>/gloo/..." in the
// store and waits for the others', then connects a full mesh (one TCP connection per pair
// of members). ConnectGlooGroup blocks until all members have joined (or spec.timeout), so
// a process that creates several groups one after another must do so in an order that
// agrees with its peers' (e.g. every process walks the same global list of groups);
// groups created from separate threads have no such constraint. Keys are never deleted:
// a new generation of a job needs new group names (or a fresh store directory). The group
// keeps the store: after a failure its watchdog reports under "<spec.name>/watchdog/..."
// (group_watchdog.h).
//
// Algorithms (each chosen so that results do not depend on timing):
//   AllReduce      Gloo's ring (reduce-scatter then all-gather): every element is reduced
//                  by exactly one member, in a fixed order along the ring, and that result
//                  is what every member receives, so results are bit-identical everywhere.
//   ReduceScatter  a ring over Gloo unbound buffers written here (this Gloo snapshot has
//                  no reduce-scatter in its new-style API): (n-1)/n of the data moves per
//                  member, half of what all-reduce-then-copy would.
//   AllGather, Broadcast, Barrier  Gloo's own (allgather ring, broadcast, barrier).
//   Send/Recv      Gloo unbound buffers; each message travels as an 8-byte length header
//                  then the payload, so a receiver that expects another size fails cleanly
//                  (INVALID_ARGUMENT) instead of overrunning its buffer. Tags must be below
//                  2^55; each tag is its own Gloo slot, so messages with different tags can
//                  be received in any order.
//
// Timeouts: spec.timeout bounds every single wait inside an operation (an operation that
// keeps making progress is not cut off; one stalled for spec.timeout is). A timed-out
// member closes its connections, so a peer fails (UNAVAILABLE) at its next transfer to it
// instead of waiting out its own timeout; a peer already blocked in a wait is not woken
// (Gloo does not) and times out on its own clock. Every member that reached the operation
// then reports to the group's watchdog and waits up to spec.watchdog_wait for the others'
// reports, so each returns DEADLINE_EXCEEDED naming the members that never arrived (a
// stopped, dead or lagging rank), e.g. "AllReduce #57 in group data-2 (ranks 2,6) did not
// complete within 5s; did not arrive: global rank 6 (group rank 1): no watchdog report
// within 3s (hung, dead or behind)". A member that failed with UNAVAILABLE in a collective
// another member timed out in returns DEADLINE_EXCEEDED too; one whose connections failed
// otherwise (a peer died) returns UNAVAILABLE with the same verdict.
//
// A group of one member needs no network: collectives are local copies. Point-to-point
// needs a peer other than oneself (INVALID_ARGUMENT otherwise).
#ifndef MTRAIN_WORKER_PARALLEL_GLOO_COMMUNICATOR_H_
#define MTRAIN_WORKER_PARALLEL_GLOO_COMMUNICATOR_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "worker/parallel/communicator.h"
#include "worker/parallel/key_value_store.h"

namespace gloo {
namespace transport {
class Device;
}  // namespace transport
}  // namespace gloo

namespace mtrain {

// A Gloo TCP device: the network interface a process's groups use, with Gloo's event-loop
// thread. Create one per process and share it among all groups (copies share the device).
class GlooDevice {
 public:
  const std::shared_ptr<gloo::transport::Device>& device() const { return device_; }

 private:
  friend absl::StatusOr<GlooDevice> CreateGlooDevice(const std::string& host);
  explicit GlooDevice(std::shared_ptr<gloo::transport::Device> device)
      : device_(std::move(device)) {}

  std::shared_ptr<gloo::transport::Device> device_;
};

// `host` is the address (or host name) peers reach this process at, e.g. "127.0.0.1".
// INVALID_ARGUMENT if it does not resolve to a local address.
absl::StatusOr<GlooDevice> CreateGlooDevice(const std::string& host);

// Connects this member to its group (see the file comment). Blocks until every member has
// connected: DEADLINE_EXCEEDED naming the group and the members still missing after
// spec.timeout; INVALID_ARGUMENT for a bad spec; UNAVAILABLE if a connection fails.
// `store` must outlive the group: the group's watchdog reports to it after a failure
// (nothing touches it between this call and a failure).
absl::StatusOr<std::unique_ptr<Communicator>> ConnectGlooGroup(KeyValueStore& store,
                                                               const GlooDevice& device,
                                                               const GroupSpec& spec);

}  // namespace mtrain

#endif  // MTRAIN_WORKER_PARALLEL_GLOO_COMMUNICATOR_H_
