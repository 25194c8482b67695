// The key-value store ranks rendezvous through: each publishes its address (Gloo) or a
// communicator id (NCCL) under a key and waits for the others'. `train` uses a directory
// on a shared file system (DirectoryStore); worker daemons use the coordinator's
// KeyValue RPCs.
//
//   RETURN_IF_ERROR(store.Set("tensor/0/rank-1", address));
//   RETURN_IF_ERROR(store.Wait({"tensor/0/rank-0"}, absl::Seconds(30)));
//   ASSIGN_OR_RETURN(std::string peer, store.Get("tensor/0/rank-0"));
//
// Implementations are thread-safe.
#ifndef MTRAIN_WORKER_PARALLEL_KEY_VALUE_STORE_H_
#define MTRAIN_WORKER_PARALLEL_KEY_VALUE_STORE_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace mtrain {

class KeyValueStore {
 public:
  virtual ~KeyValueStore() = default;

  // Sets (or overwrites) `key`. INVALID_ARGUMENT for an empty key.
  virtual absl::Status Set(const std::string& key, const std::string& value) = 0;

  // NOT_FOUND if the key is not set.
  virtual absl::StatusOr<std::string> Get(const std::string& key) = 0;

  // Blocks until every key is set. DEADLINE_EXCEEDED after `timeout`, naming the keys
  // still missing.
  virtual absl::Status Wait(const std::vector<std::string>& keys, absl::Duration timeout) = 0;
};

// Keys as files in one directory. Writes are atomic (temporary file + rename), so a reader
// never sees half a value. Every character of a key outside [A-Za-z0-9._-] is escaped, so
// one key is one file. The directory must start empty for each run (stale keys from an
// earlier run would be read as fresh).
class DirectoryStore : public KeyValueStore {
 public:
  // Creates `directory` if missing. INVALID_ARGUMENT if it cannot be created.
  static absl::StatusOr<std::unique_ptr<DirectoryStore>> Open(const std::string& directory);

  absl::Status Set(const std::string& key, const std::string& value) override;
  absl::StatusOr<std::string> Get(const std::string& key) override;
  absl::Status Wait(const std::vector<std::string>& keys, absl::Duration timeout) override;

 private:
  explicit DirectoryStore(std::string directory) : directory_(std::move(directory)) {}
  std::string PathOf(const std::string& key) const;

  const std::string directory_;
};

}  // namespace mtrain

#endif  // MTRAIN_WORKER_PARALLEL_KEY_VALUE_STORE_H_
