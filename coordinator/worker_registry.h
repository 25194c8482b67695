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
// The coordinator's own pauses do not count against workers: if the registry finds that
// it has not looked at the clock for pause_threshold or longer (the coordinator was
// stopped with SIGSTOP, frozen by a VM migration, starved of CPU), the heartbeats that
// arrived meanwhile were never processed, so the gap does not count as silence: every
// worker that was alive when the gap began has its last heartbeat moved forward by the
// gap (a worker that heartbeated just before it gets a whole fresh window) before anyone
// is declared dead. The coordinator looks several times a second (its tick, every
// heartbeat RPC), so a gap of half the heartbeat timeout is not its normal rhythm; a
// worker that is really dead is then declared so up to one gap later than it would have
// been, which is the price of never blaming a healthy worker for the coordinator's pause.
//
// A heartbeat from a different incarnation than the registered one is refused with
// FAILED_PRECONDITION (the worker restarted and must register again, so anything it was
// running counts as lost); a heartbeat from an unknown worker gets NOT_FOUND (e.g. after a
// coordinator restart) and the worker registers again.
//
// Thread-safe.
#ifndef MTRAIN_COORDINATOR_WORKER_REGISTRY_H_
#define MTRAIN_COORDINATOR_WORKER_REGISTRY_H_

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/mutex.h"
#include "proto/coordinator.pb.h"

namespace mtrain {

// Workers heartbeat this often...
inline constexpr absl::Duration kDefaultHeartbeatInterval = absl::Seconds(1);
// ...and are declared dead after missing heartbeats for this long: several intervals, so
// one delayed heartbeat on a loaded machine does not kill a job.
inline constexpr absl::Duration kDefaultHeartbeatTimeout = absl::Seconds(10);

// Bounds on what a registration may carry, so that a client cannot grow the registry (and
// every ListWorkers reply, heartbeat lookup and metric label) without limit: ids and names
// longer than any host name or UUID-derived id...
inline constexpr size_t kMaxWorkerStringBytes = 256;
// ...and more workers than any cluster of ours holds. When full, a new worker takes the
// place of the one dead the longest; with none dead it is refused (RESOURCE_EXHAUSTED).
inline constexpr int kDefaultMaxWorkers = 16384;

struct WorkerRegistryOptions {
  absl::Duration heartbeat_interval = kDefaultHeartbeatInterval;
  absl::Duration heartbeat_timeout = kDefaultHeartbeatTimeout;
  // A gap this long between two looks at the clock is a pause of the coordinator (see
  // the file comment). Zero: heartbeat_timeout / 2. InfiniteDuration(): never (tests that
  // move a fake clock in one jump past the heartbeat timeout).
  absl::Duration pause_threshold = absl::ZeroDuration();
  int max_workers = kDefaultMaxWorkers;
};

class WorkerRegistry {
 public:
  // `clock` must outlive the registry.
  WorkerRegistry(const Clock* clock, WorkerRegistryOptions options);

  // Adds or replaces the worker. A new incarnation under a known worker_id replaces the
  // old record (returns true in *restarted so callers can fail what it ran).
  // INVALID_ARGUMENT if worker_id or incarnation_id is empty, a string is longer than
  // kMaxWorkerStringBytes, device_kind is not a DeviceKind or counts are negative;
  // RESOURCE_EXHAUSTED for a new worker when max_workers are registered and none is dead.
  absl::Status Register(const WorkerInfo& info, bool* restarted);

  // Records a heartbeat. NOT_FOUND for an unknown worker; FAILED_PRECONDITION for a
  // stale incarnation; INVALID_ARGUMENT for empty ids.
  absl::Status Heartbeat(const HeartbeatRequest& request);

  // Every known worker, ordered by worker_id, with liveness as of now.
  std::vector<WorkerStatus> List() const;

  // Number of workers registered and alive now.
  int CountAlive() const;

  // The workers registered and alive now, and the ids of the dead ones: what the job
  // manager's tick needs, in one pass that copies no live worker's id or description.
  struct Census {
    int registered = 0;
    int alive = 0;
    std::set<std::string> dead;
    // Workers forgotten so far (Remove, or a dead one making room): while this count is
    // unchanged, a worker found registered is still registered.
    int64_t removals = 0;
  };
  Census TakeCensus() const;
  // Whether `worker_id` is registered (alive or not).
  bool IsRegistered(const std::string& worker_id) const;
  // The same for each of `worker_ids`, under one acquisition of the registry's lock (the
  // job manager's tick asks for every rank of every running job).
  std::vector<bool> AreRegistered(const std::vector<std::string>& worker_ids) const;

  // Forgets a worker that is not alive. INVALID_ARGUMENT for an empty id, NOT_FOUND for an
  // unknown one, FAILED_PRECONDITION (saying when it was last heard from) for a live one:
  // it would register again at once.
  absl::Status Remove(const std::string& worker_id);

  const WorkerRegistryOptions& options() const { return options_; }

  // Pauses of the coordinator found so far, and the length of the newest.
  struct Pauses {
    int64_t count = 0;
    absl::Duration newest = absl::ZeroDuration();
  };
  Pauses pauses() const;

 private:
  struct Record {
    WorkerInfo info;
    absl::Time last_seen;
    WorkerState state = WORKER_STATE_IDLE;
    std::string job_id;
  };

  bool IsAlive(const Record& record, absl::Time now) const;
  // Every method that reads the clock calls this first (requires mutex_): a long gap since
  // the previous look gives the workers alive before it a fresh heartbeat window.
  void LookLocked(absl::Time now) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);

  const Clock* const clock_;
  const WorkerRegistryOptions options_;
  const absl::Duration pause_threshold_;
  mutable Mutex mutex_;
  // Mutable: looking at the clock, which even a const read does, is what finds a pause and
  // moves the heartbeat windows.
  mutable std::map<std::string, Record> workers_ ABSL_GUARDED_BY(mutex_);
  int64_t removals_ ABSL_GUARDED_BY(mutex_) = 0;
  // TakeCensus's shortcut (it runs five times a second under the job manager's lock, and
  // walking 4,096 records took about a millisecond of this lock, which every heartbeat
  // takes too). Every worker outside known_dead_ has last_seen >= live_seen_floor_: a
  // last_seen only grows (heartbeats, pause shifts), and whatever sets one lowers the floor
  // first. While now - floor is within the timeout none of them can be dead, and the known
  // dead stay dead until they heartbeat or register again (which takes them out), so the
  // census needs no walk. InfinitePast(): unknown, walk.
  mutable absl::Time live_seen_floor_ ABSL_GUARDED_BY(mutex_) = absl::InfinitePast();
  mutable std::set<std::string> known_dead_ ABSL_GUARDED_BY(mutex_);
  // InfinitePast() before the first look.
  mutable absl::Time last_look_ ABSL_GUARDED_BY(mutex_);
  mutable Pauses pauses_ ABSL_GUARDED_BY(mutex_);
};

}  // namespace mtrain

#endif  // MTRAIN_COORDINATOR_WORKER_REGISTRY_H_
