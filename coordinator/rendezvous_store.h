// The coordinator's in-memory key-value store for rendezvous: ranks publish their
// addresses (Gloo) or the NCCL unique id under keys prefixed by their generation, and wait
// for each other's keys. Lives only as long as the coordinator: a generation that outlives
// a coordinator restart is re-placed anyway.
//
//   store.Set("job-1/gen-2/rank-0", address);
//   RETURN_IF_ERROR(store.Wait({"job-1/gen-2/rank-1"}, absl::Seconds(30)));
//
// Thread-safe; Wait blocks only its caller.
#ifndef MTRAIN_COORDINATOR_RENDEZVOUS_STORE_H_
#define MTRAIN_COORDINATOR_RENDEZVOUS_STORE_H_

#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace mtrain {

// Default wait, long enough for every rank of a large job to start its process.
inline constexpr absl::Duration kDefaultRendezvousWait = absl::Seconds(30);
// Bounds memory use by misbehaving clients.
inline constexpr size_t kMaxRendezvousValueBytes = 1 << 20;

class RendezvousStore {
 public:
  // INVALID_ARGUMENT for an empty key or a value over kMaxRendezvousValueBytes.
  absl::Status Set(const std::string& key, std::string value);

  // NOT_FOUND if the key was never set.
  absl::StatusOr<std::string> Get(const std::string& key) const;

  // Blocks until every key is set or `timeout` passes. DEADLINE_EXCEEDED names the keys
  // still missing; INVALID_ARGUMENT for no keys or an empty key. `cancelled`, if given, is
  // asked every kCancelCheck: true ends the wait with CANCELLED (the RPC's client went
  // away, or the coordinator is stopping and must not wait out a 30 s rendezvous).
  absl::Status Wait(const std::vector<std::string>& keys, absl::Duration timeout,
                    const std::function<bool()>& cancelled = nullptr) const;
  static constexpr absl::Duration kCancelCheck = absl::Milliseconds(100);

  // Removes every key starting with `prefix` (a finished or failed generation).
  void ErasePrefix(const std::string& prefix);

 private:
  // Requires mutex_.
  bool AllPresent(const std::vector<std::string>& keys) const;

  // std::mutex rather than absl::Mutex: see common/notification.h.
  mutable std::mutex mutex_;
  // Notified on every Set.
  mutable std::condition_variable key_set_;
  std::map<std::string, std::string> values_;  // Guarded by mutex_.
};

}  // namespace mtrain

#endif  // MTRAIN_COORDINATOR_RENDEZVOUS_STORE_H_
