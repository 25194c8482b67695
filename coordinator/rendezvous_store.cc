#include "coordinator/rendezvous_store.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace mtrain {

absl::Status RendezvousStore::Set(const std::string& key, std::string value) {
  if (key.empty()) return absl::InvalidArgumentError("key: must not be empty");
  if (value.size() > kMaxRendezvousValueBytes) {
    return absl::InvalidArgumentError(absl::StrCat("value: ", value.size(),
                                                   " bytes exceeds the limit of ",
                                                   kMaxRendezvousValueBytes));
  }
  absl::MutexLock lock(&mutex_);
  values_[key] = std::move(value);
  key_set_.SignalAll();
  return absl::OkStatus();
}

absl::StatusOr<std::string> RendezvousStore::Get(const std::string& key) const {
  if (key.empty()) return absl::InvalidArgumentError("key: must not be empty");
  absl::MutexLock lock(&mutex_);
  auto it = values_.find(key);
  if (it == values_.end()) return absl::NotFoundError(absl::StrCat("key not set: ", key));
  return it->second;
}

bool RendezvousStore::AllPresent(const std::vector<std::string>& keys) const {
  for (const std::string& key : keys) {
    if (values_.find(key) == values_.end()) return false;
  }
  return true;
}

absl::Status RendezvousStore::Wait(const std::vector<std::string>& keys,
                                   absl::Duration timeout) const {
  if (keys.empty()) return absl::InvalidArgumentError("keys: must name at least one key");
  for (const std::string& key : keys) {
    if (key.empty()) return absl::InvalidArgumentError("keys: must not contain an empty key");
  }
  const absl::Time deadline = absl::Now() + timeout;
  absl::MutexLock lock(&mutex_);
  while (!AllPresent(keys)) {
    // WaitWithDeadline returns true on timeout; re-check once more after it.
    if (key_set_.WaitWithDeadline(&mutex_, deadline) && !AllPresent(keys)) break;
  }
  if (AllPresent(keys)) return absl::OkStatus();
  std::vector<std::string> missing;
  for (const std::string& key : keys) {
    if (values_.find(key) == values_.end()) missing.push_back(key);
  }
  return absl::DeadlineExceededError(absl::StrCat("rendezvous: still missing after ",
                                                  absl::FormatDuration(timeout), ": ",
                                                  absl::StrJoin(missing, ", ")));
}

void RendezvousStore::ErasePrefix(const std::string& prefix) {
  absl::MutexLock lock(&mutex_);
  auto it = values_.lower_bound(prefix);
  while (it != values_.end() && it->first.compare(0, prefix.size(), prefix) == 0) {
    it = values_.erase(it);
  }
}

}  // namespace mtrain
