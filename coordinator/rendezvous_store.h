// The coordinator's in-memory key-value store for rendezvous: ranks publish their
// addresses (Gloo) or the NCCL unique id under keys prefixed by their generation, and wait
// for each other's keys. Lives only as long as the coordinator: a generation that outlives
// a coordinator restart is re-placed anyway.
//
// Only live generations may use it, within byte limits, so no client (no token is needed
// on a loopback coordinator) can grow the coordinator's memory at will:
//   - the JobManager opens a generation's prefix when it places it and closes it when the
//     generation ends (failure, cancel, success); closing deletes its keys and ends the
//     waits on them;
//   - a key outside every open generation is refused with FAILED_PRECONDITION (a stale
//     rank learns its generation is over; anything else learns the rule);
//   - a generation holds at most the limit it was opened with (keys + values), and all
//     generations together at most the store's total: RESOURCE_EXHAUSTED names the limit.
//
//   RendezvousStore store(/*total_byte_limit=*/256 << 20);
//   store.OpenGeneration("job-1/gen-2/", RendezvousGenerationByteLimit(world_size));
//   RETURN_IF_ERROR(store.Set("job-1/gen-2/rank-0", address));
//   RETURN_IF_ERROR(store.Wait({"job-1/gen-2/rank-1"}, absl::Seconds(30)));
//   store.CloseGeneration("job-1/gen-2/");
//
// Thread-safe; Wait blocks only its caller. WaitAsync blocks nobody: the store indexes its
// waiters by the keys they still miss, so a Set wakes only the waits on that key, and one
// timer thread of the store ends the waits whose time is up.
#ifndef MTRAIN_COORDINATOR_RENDEZVOUS_STORE_H_
#define MTRAIN_COORDINATOR_RENDEZVOUS_STORE_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/mutex.h"

namespace mtrain {

// Default wait, long enough for every rank of a large job to start its process.
inline constexpr absl::Duration kDefaultRendezvousWait = absl::Seconds(30);
// Bounds one value. The largest legitimate one is a Gloo rank's addresses for every peer of
// its largest group: 136 bytes x 4095 peers (the largest world) = 557 KB.
inline constexpr size_t kMaxRendezvousValueBytes = 1 << 20;
// Bounds one key. Ranks use JOB/gen-N/GROUP/gloo/RANK (well under 200 bytes).
inline constexpr size_t kMaxRendezvousKeyBytes = 1024;
// Default bound on all generations together (coordinator --rendezvous_max_bytes). A
// data-parallel world of N ranks stores about 2 x 136 x N^2 bytes (the Gloo address lists
// of its world and data groups; docs/PERFORMANCE.md), so this holds worlds up to about 900
// ranks; a larger installation raises the flag.
inline constexpr uint64_t kDefaultRendezvousTotalBytes = uint64_t{256} << 20;

// What one rank may need besides the Gloo address lists: its NCCL ids, watchdog failure
// reports and key names, with a wide margin (each is at most a few hundred bytes).
inline constexpr uint64_t kRendezvousBytesPerRank = 64 << 10;
// What a pair of ranks in one Gloo group needs: a Gloo TCP address (sockaddr_storage plus
// a sequence number, 136 bytes) plus its share of the key, rounded up.
inline constexpr uint64_t kRendezvousBytesPerPair = 256;
// Gloo groups a rank joins: tensor, data, pipeline, model-parallel, embedding and world
// (worker/parallel/rank_groups.cc). Each kind's groups partition the world, so the pairs of
// one kind number at most world^2.
inline constexpr uint64_t kRendezvousGroupKinds = 6;

// The most a generation of `world_size` ranks may hold: every rank's own keys plus a full
// mesh of addresses for each group kind. Computed in 64 bits: no overflow for any world
// size the spec admits (4096 ranks: about 26 GB, which the total limit caps anyway).
uint64_t RendezvousGenerationByteLimit(int world_size);

class RendezvousStore {
 public:
  explicit RendezvousStore(uint64_t total_byte_limit = kDefaultRendezvousTotalBytes);
  // Ends the waits still pending (CANCELLED) and stops the timer thread.
  ~RendezvousStore();
  RendezvousStore(const RendezvousStore&) = delete;
  RendezvousStore& operator=(const RendezvousStore&) = delete;

  // Lets keys under `prefix` ("JOB/gen-N/") be set, read and waited for, up to
  // `byte_limit` bytes of keys and values. INVALID_ARGUMENT for a prefix that is empty,
  // does not end in '/', or overlaps an open generation (one is a prefix of the other):
  // each key must belong to one generation.
  absl::Status OpenGeneration(const std::string& prefix, uint64_t byte_limit);
  // Ends the generation: its keys are deleted (their bytes freed) and waits on them end
  // with FAILED_PRECONDITION. A prefix that is not open is ignored.
  void CloseGeneration(const std::string& prefix);

  // INVALID_ARGUMENT for an empty or over-long key or a value over
  // kMaxRendezvousValueBytes; FAILED_PRECONDITION for a key outside every open generation;
  // RESOURCE_EXHAUSTED when the generation's or the store's byte limit would be passed
  // (nothing changes).
  absl::Status Set(const std::string& key, std::string value);

  // NOT_FOUND if the key was never set; INVALID_ARGUMENT and FAILED_PRECONDITION as Set.
  absl::StatusOr<std::string> Get(const std::string& key) const;

  // Blocks until every key is set or `timeout` passes. DEADLINE_EXCEEDED names the keys
  // still missing; INVALID_ARGUMENT for no keys or a bad key; FAILED_PRECONDITION for a
  // key outside every open generation, also when its generation closes during the wait.
  // `cancelled`, if given, is asked every kCancelCheck: true ends the wait with CANCELLED
  // (the RPC's client went away, or the coordinator is stopping and must not wait out a
  // 30 s rendezvous).
  absl::Status Wait(const std::vector<std::string>& keys, absl::Duration timeout,
                    const std::function<bool()>& cancelled = nullptr) const;
  static constexpr absl::Duration kCancelCheck = absl::Milliseconds(100);

  // Wait without a waiting thread, for callback RPCs: `done` runs exactly once with what
  // Wait would answer. It runs on the calling thread when the answer is known at once (a bad
  // key, a key outside every open generation, every key already set); otherwise on the
  // thread of the Set that sets the last missing key, of the CloseGeneration that ends a
  // key's generation, of the store's timer when `timeout` passes, or of CancelWait; never
  // with the store's lock held. Returns a ticket for CancelWait (0 if `done` already ran).
  using WaitDone = std::function<void(absl::Status)>;
  uint64_t WaitAsync(const std::vector<std::string>& keys, absl::Duration timeout, WaitDone done);
  // Ends the wait `ticket` with CANCELLED, `done` running on this thread; nothing if it
  // already ended (or 0).
  void CancelWait(uint64_t ticket);
  // Waits pending in WaitAsync.
  size_t PendingWaits() const;

  // Bytes (keys + values) held by the generation `prefix` (0 if not open), and by all.
  uint64_t GenerationBytes(const std::string& prefix) const;
  uint64_t TotalBytes() const;

 private:
  struct Generation {
    uint64_t byte_limit = 0;
    uint64_t bytes = 0;
  };
  using SteadyTime = std::chrono::steady_clock::time_point;
  // One WaitAsync in progress.
  struct Waiter {
    std::vector<std::string> keys;         // as asked (for the DEADLINE_EXCEEDED message)
    std::vector<std::string> generations;  // the prefixes of the keys' generations
    size_t missing = 0;                    // distinct keys not yet set
    absl::Duration timeout;
    SteadyTime deadline;
    WaitDone done;
  };
  // A waiter's answer, run after the lock is released.
  struct Completion {
    WaitDone done;
    absl::Status status;
  };

  // Removes the waiter `ticket` (from every index) and returns its completion with
  // `status`; requires that it exists.
  Completion TakeWaiterLocked(uint64_t ticket, absl::Status status)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // Set's work (it takes the lock); the waits it completes are appended to `completions`,
  // for Set to answer once the lock is released.
  absl::Status SetAndCollect(const std::string& key, std::string value,
                             std::vector<Completion>* completions) ABSL_LOCKS_EXCLUDED(mutex_);
  // DEADLINE_EXCEEDED naming the keys still missing.
  absl::Status MissingKeysLocked(const std::vector<std::string>& keys, absl::Duration timeout) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // The timer thread: ends the waits whose deadline passed.
  void ExpireWaits();

  // All require mutex_. The open generation `key` belongs to, or generations_.end().
  std::map<std::string, Generation>::const_iterator GenerationOfLocked(const std::string& key) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  std::map<std::string, Generation>::iterator GenerationOfLocked(const std::string& key)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // FAILED_PRECONDITION naming the first key outside every open generation.
  absl::Status CheckLiveLocked(const std::vector<std::string>& keys) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  bool AllPresentLocked(const std::vector<std::string>& keys) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);

  const uint64_t total_byte_limit_;
  mutable Mutex mutex_;
  // Notified on every Set and CloseGeneration.
  mutable CondVar changed_;
  std::map<std::string, std::string> values_ ABSL_GUARDED_BY(mutex_);
  std::map<std::string, Generation> generations_ ABSL_GUARDED_BY(mutex_);  // by prefix
  uint64_t total_bytes_ ABSL_GUARDED_BY(mutex_) = 0;

  std::map<uint64_t, Waiter> waiters_ ABSL_GUARDED_BY(mutex_);  // by ticket
  // Each key some waiter still misses -> those waiters' tickets.
  std::map<std::string, std::vector<uint64_t>> waiting_on_ ABSL_GUARDED_BY(mutex_);
  std::multimap<SteadyTime, uint64_t> deadlines_ ABSL_GUARDED_BY(mutex_);
  uint64_t next_ticket_ ABSL_GUARDED_BY(mutex_) = 1;
  bool stopping_ ABSL_GUARDED_BY(mutex_) = false;
  // Notified when the earliest deadline moves earlier, and on stopping.
  CondVar timer_changed_;
  std::thread timer_;  // last: starts once everything above exists
};

}  // namespace mtrain

#endif  // MTRAIN_COORDINATOR_RENDEZVOUS_STORE_H_
