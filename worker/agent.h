// The worker daemon's control loop: register with the coordinator, then heartbeat at the
// interval it asks for, registering again whenever the coordinator no longer knows this
// worker (coordinator restart) and retrying with backoff while it is unreachable.
//
//   WorkerAgent agent(stub.get(), info);
//   agent.Run(&stop);   // returns once `stop` is notified
//
// Later issues add executing the Assignment carried by heartbeat responses.
#ifndef MTRAIN_WORKER_AGENT_H_
#define MTRAIN_WORKER_AGENT_H_

#include <atomic>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/notification.h"
#include "proto/coordinator.grpc.pb.h"

namespace mtrain {

// Longest pause between attempts to reach an unreachable coordinator.
inline constexpr absl::Duration kMaxReconnectBackoff = absl::Seconds(5);
// Deadline of one control RPC: far above a healthy round trip, far below the heartbeat
// timeout, so a hung coordinator is noticed while the worker still counts as alive.
inline constexpr absl::Duration kControlRpcDeadline = absl::Seconds(3);

class WorkerAgent {
 public:
  // `stub` must outlive the agent. `info` must carry worker_id and incarnation_id.
  WorkerAgent(Coordinator::StubInterface* stub, WorkerInfo info);

  // Registers and heartbeats until `stop` is notified.
  void Run(Notification* stop);

  // Counters for tests and logs.
  int registrations() const { return registrations_.load(); }
  int heartbeats() const { return heartbeats_.load(); }

 private:
  absl::Status Register();
  absl::Status SendHeartbeat();
  // Prints `message` once per change of connection state, so a long outage is one line.
  void ReportState(const std::string& state, const std::string& message);

  Coordinator::StubInterface* const stub_;
  const WorkerInfo info_;
  absl::Duration heartbeat_interval_ = absl::Seconds(1);
  std::string reported_state_;
  // Read by other threads (tests) while Run() writes them.
  std::atomic<int> registrations_{0};
  std::atomic<int> heartbeats_{0};
};

}  // namespace mtrain

#endif  // MTRAIN_WORKER_AGENT_H_
