#include "coordinator/rendezvous_store.h"

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"

namespace mtrain {
namespace {

constexpr char kLiveRule[] =
    "[rule: rendezvous keys start with the JOB/gen-N/ prefix of a generation the "
    "coordinator placed and that has not ended]";

absl::Status CheckKey(const std::string& key, const char* field) {
  if (key.empty()) return absl::InvalidArgumentError(absl::StrCat(field, ": must not be empty"));
  if (key.size() > kMaxRendezvousKeyBytes) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": ", key.size(),
                                                   " bytes exceeds the limit of ",
                                                   kMaxRendezvousKeyBytes, " bytes per key"));
  }
  return absl::OkStatus();
}

// A key in an error message: an attacker's 1 KB key is cut, not echoed whole.
std::string Shown(const std::string& key) {
  constexpr size_t kShown = 120;
  return key.size() <= kShown ? key : absl::StrCat(key.substr(0, kShown), "...");
}

}  // namespace

uint64_t RendezvousGenerationByteLimit(int world_size) {
  const uint64_t world = static_cast<uint64_t>(std::max(world_size, 1));
  return world * kRendezvousBytesPerRank +
         kRendezvousGroupKinds * world * world * kRendezvousBytesPerPair;
}

RendezvousStore::RendezvousStore(uint64_t total_byte_limit) : total_byte_limit_(total_byte_limit) {
  timer_ = std::thread([this] { ExpireWaits(); });
}

RendezvousStore::~RendezvousStore() {
  std::vector<Completion> completions;
  {
    MutexLock lock(&mutex_);
    stopping_ = true;
    std::vector<uint64_t> tickets;
    for (const auto& [ticket, waiter] : waiters_) tickets.push_back(ticket);
    for (uint64_t ticket : tickets) {
      completions.push_back(TakeWaiterLocked(
          ticket, absl::CancelledError("rendezvous: the coordinator is stopping")));
    }
  }
  timer_changed_.SignalAll();
  timer_.join();
  for (Completion& c : completions) c.done(std::move(c.status));
}

absl::Status RendezvousStore::OpenGeneration(const std::string& prefix, uint64_t byte_limit) {
  if (prefix.empty() || prefix.back() != '/') {
    return absl::InvalidArgumentError(
        absl::StrCat("rendezvous prefix '", Shown(prefix), "' must be non-empty and end in '/'"));
  }
  MutexLock lock(&mutex_);
  for (const auto& [open, generation] : generations_) {
    if (absl::StartsWith(open, prefix) || absl::StartsWith(prefix, open)) {
      return absl::InvalidArgumentError(absl::StrCat("rendezvous prefix '", prefix,
                                                     "' overlaps the open generation '", open,
                                                     "' [rule: a key belongs to one generation]"));
    }
  }
  generations_[prefix].byte_limit = byte_limit;
  return absl::OkStatus();
}

void RendezvousStore::CloseGeneration(const std::string& prefix) {
  std::vector<Completion> completions;
  {
    MutexLock lock(&mutex_);
    const auto generation = generations_.find(prefix);
    if (generation == generations_.end()) return;
    total_bytes_ -= generation->second.bytes;
    generations_.erase(generation);
    auto it = values_.lower_bound(prefix);
    while (it != values_.end() && absl::StartsWith(it->first, prefix)) it = values_.erase(it);
    // Waiters on the generation's keys learn it is over.
    changed_.SignalAll();
    std::vector<uint64_t> ended;
    for (const auto& [ticket, waiter] : waiters_) {
      if (std::find(waiter.generations.begin(), waiter.generations.end(), prefix) !=
          waiter.generations.end()) {
        ended.push_back(ticket);
      }
    }
    for (uint64_t ticket : ended) {
      absl::Status live = CheckLiveLocked(waiters_.at(ticket).keys);
      completions.push_back(TakeWaiterLocked(ticket, std::move(live)));
    }
  }
  for (Completion& c : completions) c.done(std::move(c.status));
}

std::map<std::string, RendezvousStore::Generation>::const_iterator
RendezvousStore::GenerationOfLocked(const std::string& key) const {
  // Open prefixes never overlap, so the one `key` starts with (if any) is the greatest
  // prefix <= key: any prefix between it and the key would have to start with it.
  auto it = generations_.upper_bound(key);
  if (it == generations_.begin()) return generations_.end();
  --it;
  return absl::StartsWith(key, it->first) ? it : generations_.end();
}

std::map<std::string, RendezvousStore::Generation>::iterator RendezvousStore::GenerationOfLocked(
    const std::string& key) {
  auto it = generations_.upper_bound(key);
  if (it == generations_.begin()) return generations_.end();
  --it;
  return absl::StartsWith(key, it->first) ? it : generations_.end();
}

absl::Status RendezvousStore::CheckLiveLocked(const std::vector<std::string>& keys) const {
  for (const std::string& key : keys) {
    if (GenerationOfLocked(key) == generations_.end()) {
      return absl::FailedPreconditionError(
          absl::StrCat("rendezvous key '", Shown(key),
                       "' is outside every live generation (its generation ended, or none "
                       "was placed) ",
                       kLiveRule));
    }
  }
  return absl::OkStatus();
}

absl::Status RendezvousStore::Set(const std::string& key, std::string value) {
  if (absl::Status valid = CheckKey(key, "key"); !valid.ok()) return valid;
  if (value.size() > kMaxRendezvousValueBytes) {
    return absl::InvalidArgumentError(absl::StrCat("value: ", value.size(),
                                                   " bytes exceeds the limit of ",
                                                   kMaxRendezvousValueBytes, " bytes per value"));
  }
  std::vector<Completion> completions;
  absl::Status result = SetAndCollect(key, std::move(value), &completions);
  for (Completion& c : completions) c.done(std::move(c.status));
  return result;
}

absl::Status RendezvousStore::SetAndCollect(const std::string& key, std::string value,
                                            std::vector<Completion>* completions) {
  MutexLock lock(&mutex_);
  const auto generation = GenerationOfLocked(key);
  if (generation == generations_.end()) return CheckLiveLocked({key});
  const auto existing = values_.find(key);
  // Overwriting a key frees its old value first.
  const uint64_t old_bytes = existing == values_.end() ? 0 : key.size() + existing->second.size();
  const uint64_t new_bytes = key.size() + value.size();
  Generation& g = generation->second;
  if (g.bytes - old_bytes + new_bytes > g.byte_limit) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "rendezvous: setting '", Shown(key), "' (", new_bytes, " bytes) would bring generation ",
        generation->first, " to ", g.bytes - old_bytes + new_bytes, " bytes, over its limit of ",
        g.byte_limit, " [rule: per-generation limit of ", kRendezvousBytesPerRank,
        " bytes per rank + ", kRendezvousGroupKinds, " x ", kRendezvousBytesPerPair,
        " bytes per pair of ranks]"));
  }
  if (total_bytes_ - old_bytes + new_bytes > total_byte_limit_) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "rendezvous: setting '", Shown(key), "' (", new_bytes, " bytes) would bring the store to ",
        total_bytes_ - old_bytes + new_bytes, " bytes, over its total limit of ", total_byte_limit_,
        " [rule: coordinator --rendezvous_max_bytes, all live generations together]"));
  }
  g.bytes = g.bytes - old_bytes + new_bytes;
  total_bytes_ = total_bytes_ - old_bytes + new_bytes;
  values_[key] = std::move(value);
  changed_.SignalAll();
  // Only the waits on this key are looked at, and only when it is new.
  if (existing == values_.end()) {
    const auto waiting = waiting_on_.find(key);
    if (waiting != waiting_on_.end()) {
      const std::vector<uint64_t> tickets = std::move(waiting->second);
      waiting_on_.erase(waiting);
      for (uint64_t ticket : tickets) {
        const auto waiter = waiters_.find(ticket);
        if (waiter == waiters_.end()) continue;
        if (--waiter->second.missing == 0) {
          completions->push_back(TakeWaiterLocked(ticket, absl::OkStatus()));
        }
      }
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> RendezvousStore::Get(const std::string& key) const {
  if (absl::Status valid = CheckKey(key, "key"); !valid.ok()) return valid;
  MutexLock lock(&mutex_);
  if (absl::Status live = CheckLiveLocked({key}); !live.ok()) return live;
  auto it = values_.find(key);
  if (it == values_.end()) return absl::NotFoundError(absl::StrCat("key not set: ", key));
  return it->second;
}

bool RendezvousStore::AllPresentLocked(const std::vector<std::string>& keys) const {
  for (const std::string& key : keys) {
    if (values_.find(key) == values_.end()) return false;
  }
  return true;
}

absl::Status RendezvousStore::Wait(const std::vector<std::string>& keys, absl::Duration timeout,
                                   const std::function<bool()>& cancelled) const {
  if (keys.empty()) return absl::InvalidArgumentError("keys: must name at least one key");
  for (const std::string& key : keys) {
    if (absl::Status valid = CheckKey(key, "keys"); !valid.ok()) return valid;
  }
  const absl::Time deadline = absl::Now() + timeout;
  MutexLock lock(&mutex_);
  for (;;) {
    if (absl::Status live = CheckLiveLocked(keys); !live.ok()) return live;
    const absl::Duration left = deadline - absl::Now();
    const absl::Duration slice = cancelled ? std::min(left, kCancelCheck) : left;
    const auto slice_end = SteadyDeadlineIn(std::max(slice, absl::ZeroDuration()));
    // Wakes on every Set or CloseGeneration; the loop re-checks the generations.
    bool ended = false;
    bool ready = false;
    bool timed_out = false;
    for (;;) {
      ended = !CheckLiveLocked(keys).ok();
      ready = ended || AllPresentLocked(keys);
      if (ready || timed_out) break;
      timed_out = changed_.WaitUntil(&mutex_, slice_end);
    }
    if (ready) {
      if (!ended) return absl::OkStatus();
      continue;  // reported at the top
    }
    if (absl::Now() >= deadline) break;
    if (cancelled && cancelled()) {
      return absl::CancelledError(
          "rendezvous: the wait was cancelled (the caller is gone or "
          "the coordinator is stopping)");
    }
  }
  return MissingKeysLocked(keys, timeout);
}

absl::Status RendezvousStore::MissingKeysLocked(const std::vector<std::string>& keys,
                                                absl::Duration timeout) const {
  std::vector<std::string> missing;
  for (const std::string& key : keys) {
    if (values_.find(key) == values_.end()) missing.push_back(key);
  }
  return absl::DeadlineExceededError(absl::StrCat("rendezvous: still missing after ",
                                                  absl::FormatDuration(timeout), ": ",
                                                  absl::StrJoin(missing, ", ")));
}

uint64_t RendezvousStore::WaitAsync(const std::vector<std::string>& keys, absl::Duration timeout,
                                    WaitDone done) {
  if (keys.empty()) {
    done(absl::InvalidArgumentError("keys: must name at least one key"));
    return 0;
  }
  for (const std::string& key : keys) {
    if (absl::Status valid = CheckKey(key, "keys"); !valid.ok()) {
      done(std::move(valid));
      return 0;
    }
  }
  absl::Status now;  // the answer, if known at once
  uint64_t ticket = 0;
  {
    MutexLock lock(&mutex_);
    if (stopping_) {
      now = absl::CancelledError("rendezvous: the coordinator is stopping");
    } else if (absl::Status live = CheckLiveLocked(keys); !live.ok()) {
      now = std::move(live);
    } else {
      Waiter waiter;
      waiter.keys = keys;
      waiter.timeout = timeout;
      waiter.deadline = SteadyDeadlineIn(std::max(timeout, absl::ZeroDuration()));
      ticket = next_ticket_++;
      std::vector<std::string> distinct = keys;
      std::sort(distinct.begin(), distinct.end());
      distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
      for (const std::string& key : distinct) {
        const std::string& prefix = GenerationOfLocked(key)->first;
        if (std::find(waiter.generations.begin(), waiter.generations.end(), prefix) ==
            waiter.generations.end()) {
          waiter.generations.push_back(prefix);
        }
        if (values_.find(key) == values_.end()) {
          waiting_on_[key].push_back(ticket);
          ++waiter.missing;
        }
      }
      if (waiter.missing == 0) {
        ticket = 0;  // every key is set: answered below, nothing indexed
      } else {
        waiter.done = std::move(done);
        const auto deadline = deadlines_.emplace(waiter.deadline, ticket);
        const bool earliest = deadline == deadlines_.begin();
        waiters_.emplace(ticket, std::move(waiter));
        if (earliest) timer_changed_.SignalAll();
        return ticket;
      }
    }
  }
  done(std::move(now));
  return ticket;
}

void RendezvousStore::CancelWait(uint64_t ticket) {
  if (ticket == 0) return;
  Completion completion;
  {
    MutexLock lock(&mutex_);
    if (waiters_.find(ticket) == waiters_.end()) return;
    completion = TakeWaiterLocked(
        ticket, absl::CancelledError("rendezvous: the wait was cancelled (the caller is gone or "
                                     "the coordinator is stopping)"));
  }
  completion.done(std::move(completion.status));
}

size_t RendezvousStore::PendingWaits() const {
  MutexLock lock(&mutex_);
  return waiters_.size();
}

RendezvousStore::Completion RendezvousStore::TakeWaiterLocked(uint64_t ticket,
                                                              absl::Status status) {
  const auto it = waiters_.find(ticket);
  Waiter& waiter = it->second;
  for (const std::string& key : waiter.keys) {
    const auto waiting = waiting_on_.find(key);
    if (waiting == waiting_on_.end()) continue;
    std::vector<uint64_t>& tickets = waiting->second;
    tickets.erase(std::remove(tickets.begin(), tickets.end(), ticket), tickets.end());
    if (tickets.empty()) waiting_on_.erase(waiting);
  }
  for (auto [d, end] = deadlines_.equal_range(waiter.deadline); d != end; ++d) {
    if (d->second == ticket) {
      deadlines_.erase(d);
      break;
    }
  }
  Completion completion{std::move(waiter.done), std::move(status)};
  waiters_.erase(it);
  return completion;
}

void RendezvousStore::ExpireWaits() {
  for (;;) {
    std::vector<Completion> completions;
    {
      MutexLock lock(&mutex_);
      if (stopping_) return;
      const SteadyTime now = std::chrono::steady_clock::now();
      while (!deadlines_.empty() && deadlines_.begin()->first <= now) {
        const uint64_t ticket = deadlines_.begin()->second;
        const Waiter& waiter = waiters_.at(ticket);
        absl::Status missing = MissingKeysLocked(waiter.keys, waiter.timeout);
        completions.push_back(TakeWaiterLocked(ticket, std::move(missing)));
      }
      if (completions.empty()) {
        if (deadlines_.empty()) {
          timer_changed_.Wait(&mutex_);
        } else {
          timer_changed_.WaitUntil(&mutex_, deadlines_.begin()->first);
        }
        continue;
      }
    }
    for (Completion& c : completions) c.done(std::move(c.status));
  }
}

uint64_t RendezvousStore::GenerationBytes(const std::string& prefix) const {
  MutexLock lock(&mutex_);
  const auto it = generations_.find(prefix);
  return it == generations_.end() ? 0 : it->second.bytes;
}

uint64_t RendezvousStore::TotalBytes() const {
  MutexLock lock(&mutex_);
  return total_bytes_;
}

}  // namespace mtrain
