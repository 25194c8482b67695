// The worker daemon's control loop: register with the coordinator, then heartbeat at the
// interval it asks for, registering again whenever the coordinator no longer knows this
// worker (coordinator restart) and retrying with backoff while it is unreachable. A
// coordinator that refuses the worker's token ends the loop: that is a configuration
// error no retry can fix.
//
//   WorkerAgent agent(stub.get(), info);
//   absl::Status ended = agent.Run(&stop);   // OK once `stop` is notified
//
// With a RankProcess the agent also executes the commands heartbeat responses carry:
// `assign` starts the rank in its own process (stopping an older one first), `abort` stops
// the named generation's rank. Heartbeats report BUSY with the job and generation while a
// rank runs. A rank process that dies without reporting (a crash, a signal) is reported
// to the coordinator on its behalf, with its log's path.
#ifndef MTRAIN_WORKER_AGENT_H_
#define MTRAIN_WORKER_AGENT_H_

#include <atomic>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/notification.h"
#include "proto/coordinator.grpc.pb.h"
#include "worker/rank_process.h"

namespace mtrain {

// Longest pause between attempts to reach an unreachable coordinator.
inline constexpr absl::Duration kMaxReconnectBackoff = absl::Seconds(5);
// Deadline of one control RPC: far above a healthy round trip, far below the heartbeat
// timeout, so a hung coordinator is noticed while the worker still counts as alive.
inline constexpr absl::Duration kControlRpcDeadline = absl::Seconds(3);

// Whether the coordinator's answer refuses this worker's credentials (UNAUTHENTICATED: no
// token or not the coordinator's; PERMISSION_DENIED). The token is read once at start,
// so unlike an outage (UNAVAILABLE, DEADLINE_EXCEEDED) waiting never fixes it.
// What the daemon reports for a rank that ended without reporting itself (killed by a
// signal, or exit status 2 from train): INTERNAL naming the worker, how it ended and its
// log with the log's last line; RESOURCE_EXHAUSTED when that line says so (a rank out of
// memory in a worker thread).
RankResult UnreportedRankResult(const RankExit& exit, const std::string& worker_id);

bool IsCredentialRefusal(const absl::Status& status);

// The error Run ends with after `refusal`: its code, and a message that quotes the
// coordinator's answer and names the worker's own flag to fix, e.g. "the coordinator
// refused our token (UNAUTHENTICATED: ...): check worker --token_file". `sent_token`:
// whether the worker had a token to send.
absl::Status ExplainCredentialRefusal(const absl::Status& refusal, bool sent_token);

class WorkerAgent {
 public:
  // `stub` (and `ranks`, if given) must outlive the agent. `info` must carry worker_id and
  // incarnation_id. Without `ranks` the agent only registers and heartbeats (IDLE). A
  // non-empty `token` is sent as a bearer token with every RPC.
  WorkerAgent(Coordinator::StubInterface* stub, WorkerInfo info, RankProcess* ranks = nullptr,
              std::string token = "");

  // Registers and heartbeats until `stop` is notified (then OK), or until the coordinator
  // refuses the token (see IsCredentialRefusal), on registration or on a heartbeat (a
  // coordinator restarted with another token): then ExplainCredentialRefusal's error,
  // which the daemon prints before exiting. Every other error is retried.
  absl::Status Run(Notification* stop);

  // Counters for tests and logs.
  int registrations() const { return registrations_.load(); }
  int heartbeats() const { return heartbeats_.load(); }

 private:
  absl::Status Register();
  absl::Status SendHeartbeat();
  void Execute(const WorkerCommand& command);
  // Reaps an exited rank; reports it if the rank could not report itself.
  void CheckRank();
  void Prepare(grpc::ClientContext* context) const;
  // Prints `message` once per change of connection state, so a long outage is one line.
  void ReportState(const std::string& state, const std::string& message);

  Coordinator::StubInterface* const stub_;
  const WorkerInfo info_;
  RankProcess* const ranks_;
  const std::string token_;
  absl::Duration heartbeat_interval_ = absl::Seconds(1);
  std::string reported_state_;
  // Read by other threads (tests) while Run() writes them.
  std::atomic<int> registrations_{0};
  std::atomic<int> heartbeats_{0};
};

}  // namespace mtrain

#endif  // MTRAIN_WORKER_AGENT_H_
