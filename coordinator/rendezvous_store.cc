#include "coordinator/rendezvous_store.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"

namespace mtrain {

absl::Status RendezvousStore::Set(const std::string& key, std::string value) {
  if (key.empty()) return absl::InvalidArgumentError("key: must not be empty");
  if (value.size() > kMaxRendezvousValueBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "value: ", value.size(), " bytes exceeds the limit of ", kMaxRendezvousValueBytes));
  }
  std::lock_guard<std::mutex> lock(mutex_);
  values_[key] = std::move(value);
  key_set_.notify_all();
  return absl::OkStatus();
}

absl::StatusOr<std::string> RendezvousStore::Get(const std::string& key) const {
  if (key.empty()) return absl::InvalidArgumentError("key: must not be empty");
  std::lock_guard<std::mutex> lock(mutex_);
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

absl::Status RendezvousStore::Wait(const std::vector<std::string>& keys, absl::Duration timeout,
                                   const std::function<bool()>& cancelled) const {
  if (keys.empty()) return absl::InvalidArgumentError("keys: must name at least one key");
  for (const std::string& key : keys) {
    if (key.empty()) return absl::InvalidArgumentError("keys: must not contain an empty key");
  }
  const absl::Time deadline = absl::Now() + timeout;
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    const absl::Duration left = deadline - absl::Now();
    const absl::Duration slice = cancelled ? std::min(left, kCancelCheck) : left;
    if (key_set_.wait_for(lock, absl::ToChronoNanoseconds(std::max(slice, absl::ZeroDuration())),
                          [&] { return AllPresent(keys); })) {
      return absl::OkStatus();
    }
    if (absl::Now() >= deadline) break;
    if (cancelled && cancelled()) {
      return absl::CancelledError(
          "rendezvous: the wait was cancelled (the caller is gone or "
          "the coordinator is stopping)");
    }
  }
  std::vector<std::string> missing;
  for (const std::string& key : keys) {
    if (values_.find(key) == values_.end()) missing.push_back(key);
  }
  return absl::DeadlineExceededError(absl::StrCat("rendezvous: still missing after ",
                                                  absl::FormatDuration(timeout), ": ",
                                                  absl::StrJoin(missing, ", ")));
}

void RendezvousStore::ErasePrefix(const std::string& prefix) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = values_.lower_bound(prefix);
  while (it != values_.end() && it->first.compare(0, prefix.size(), prefix) == 0) {
    it = values_.erase(it);
  }
}

}  // namespace mtrain
