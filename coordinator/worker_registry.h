// The coordinator's view of its workers: who registered, with what devices, and whether
// each is still alive. Pure logic: no gRPC, time from an injected Clock.
//
// A worker is identified by worker_id; its incarnation_id changes every time the worker
// process starts. Liveness:
//
//   Register ---> ALIVE --(no heartbeat for heartbeat_timeout)--> DEAD
//                   ^                                               |
//                   +-------------- heartbeat or Register ----------+
//
// A heartbeat from a different incarnation than the registered one is refused with
// FAILED_PRECONDITION (the worker restarted and must register again, so anything it was
// running counts as lost); a heartbeat from an unknown worker gets NOT_FOUND (e.g. after a
// coordinator restart) and the worker registers again.
//
// Thread-safe.
#ifndef MTRAIN_COORDINATOR_WORKER_REGISTRY_H_
#define MTRAIN_COORDINATOR_WORKER_REGISTRY_H_

#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "proto/coordinator.pb.h"

namespace mtrain {

// Workers heartbeat this often...
inline constexpr absl::Duration kDefaultHeartbeatInterval = absl::Seconds(1);
// ...and are declared dead after missing heartbeats for this long: several intervals, so
// one delayed heartbeat on a loaded machine does not kill a job.
inline constexpr absl::Duration kDefaultHeartbeatTimeout = absl::Seconds(10);

struct WorkerRegistryOptions {
  absl::Duration heartbeat_interval = kDefaultHeartbeatInterval;
  absl::Duration heartbeat_timeout = kDefaultHeartbeatTimeout;
};

class WorkerRegistry {
 public:
  // `clock` must outlive the registry.
  WorkerRegistry(const Clock* clock, WorkerRegistryOptions options);

  // Adds or replaces the worker. A new incarnation under a known worker_id replaces the
  // old record (returns true in *restarted so callers can fail what it ran).
  // INVALID_ARGUMENT if worker_id or incarnation_id is empty or counts are negative.
  absl::Status Register(const WorkerInfo& info, bool* restarted);

  // Records a heartbeat. NOT_FOUND for an unknown worker; FAILED_PRECONDITION for a
  // stale incarnation; INVALID_ARGUMENT for empty ids.
  absl::Status Heartbeat(const HeartbeatRequest& request);

  // Every known worker, ordered by worker_id, with liveness as of now.
  std::vector<WorkerStatus> List() const;

  // Number of workers registered and alive now.
  int CountAlive() const;

  // Forgets a worker that is not alive. INVALID_ARGUMENT for an empty id, NOT_FOUND for an
  // unknown one, FAILED_PRECONDITION (saying when it was last heard from) for a live one:
  // it would register again at once.
  absl::Status Remove(const std::string& worker_id);

  const WorkerRegistryOptions& options() const { return options_; }

 private:
  struct Record {
    WorkerInfo info;
    absl::Time last_seen;
    WorkerState state = WORKER_STATE_IDLE;
    std::string job_id;
  };

  bool IsAlive(const Record& record, absl::Time now) const;

  const Clock* const clock_;
  const WorkerRegistryOptions options_;
  // std::mutex rather than absl::Mutex: see common/notification.h.
  mutable std::mutex mutex_;
  std::map<std::string, Record> workers_;  // Guarded by mutex_.
};

}  // namespace mtrain

#endif  // MTRAIN_COORDINATOR_WORKER_REGISTRY_H_
