#include "coordinator/worker_registry.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace mtrain {

WorkerRegistry::WorkerRegistry(const Clock* clock, WorkerRegistryOptions options)
    : clock_(clock),
      options_(options),
      pause_threshold_(options.pause_threshold > absl::ZeroDuration()
                           ? options.pause_threshold
                           : options.heartbeat_timeout / 2),
      last_look_(absl::InfinitePast()) {}

void WorkerRegistry::LookLocked(absl::Time now) const {
  // The first look has nothing to compare with (the daemon's start may take a while).
  const absl::Duration gap =
      last_look_ == absl::InfinitePast() ? absl::ZeroDuration() : now - last_look_;
  if (gap >= pause_threshold_) {
    // Heartbeats sent during the gap were not processed, so silence then proves nothing:
    // the gap is not counted. Shifting (rather than resetting every window to now) keeps
    // the time the coordinator did run counting, so even a coordinator that keeps
    // stalling still finds a dead worker. Workers already dead when it began stay dead.
    for (auto& [id, record] : workers_) {
      if (IsAlive(record, last_look_)) record.last_seen = std::min(now, record.last_seen + gap);
    }
    ++pauses_.count;
    pauses_.newest = gap;
  }
  last_look_ = std::max(last_look_, now);
}

WorkerRegistry::Pauses WorkerRegistry::pauses() const {
  MutexLock lock(&mutex_);
  return pauses_;
}

namespace {

// A measured profile is only ever read by the planner's arithmetic: every number must be
// finite and not negative, the efficiency a fraction.
absl::Status CheckDeviceProfile(const DeviceProfile& profile) {
  const std::pair<const char*, const std::string*> strings[] = {
      {"worker.profile.name", &profile.name()},
      {"worker.profile.processor", &profile.processor()},
      {"worker.profile.isa", &profile.isa()},
      {"worker.profile.gemm_library", &profile.gemm_library()},
      {"worker.profile.gemm_kernel", &profile.gemm_kernel()}};
  for (const auto& [field, value] : strings) {
    if (value->size() > kMaxWorkerStringBytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, ": ", value->size(), " bytes [rule: at most ", kMaxWorkerStringBytes, " bytes]"));
    }
  }
  const std::pair<const char*, double> numbers[] = {
      {"worker.profile.fp32_flops", profile.fp32_flops()},
      {"worker.profile.half_flops", profile.half_flops()},
      {"worker.profile.matmul_efficiency", profile.matmul_efficiency()},
      {"worker.profile.matmul_half_size", profile.matmul_half_size()},
      {"worker.profile.memory_bandwidth_bytes_per_second",
       profile.memory_bandwidth_bytes_per_second()},
      {"worker.profile.memory_bytes", static_cast<double>(profile.memory_bytes())},
      {"worker.profile.cores", static_cast<double>(profile.cores())},
      {"worker.profile.threads", static_cast<double>(profile.threads())},
      {"worker.profile.flops_per_cycle", static_cast<double>(profile.flops_per_cycle())},
      {"worker.profile.clock_hz", profile.clock_hz()}};
  for (const auto& [field, value] : numbers) {
    if (!std::isfinite(value) || value < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ": must be finite and >= 0 (got ", value, ")"));
    }
  }
  if (profile.matmul_efficiency() > 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("worker.profile.matmul_efficiency: must be in [0, 1] (got ",
                     profile.matmul_efficiency(), ")"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status WorkerRegistry::Register(const WorkerInfo& info, bool* restarted) {
  if (info.worker_id().empty()) {
    return absl::InvalidArgumentError("worker.worker_id: must not be empty");
  }
  if (info.incarnation_id().empty()) {
    return absl::InvalidArgumentError("worker.incarnation_id: must not be empty");
  }
  const std::pair<const char*, const std::string*> strings[] = {
      {"worker.worker_id", &info.worker_id()},
      {"worker.incarnation_id", &info.incarnation_id()},
      {"worker.host", &info.host()},
      {"worker.device_name", &info.device_name()}};
  for (const auto& [field, value] : strings) {
    if (value->size() > kMaxWorkerStringBytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, ": ", value->size(), " bytes [rule: at most ", kMaxWorkerStringBytes, " bytes]"));
    }
  }
  if (!DeviceKind_IsValid(info.device_kind())) {
    return absl::InvalidArgumentError(
        absl::StrCat("worker.device_kind: ", info.device_kind(), " is not a DeviceKind value"));
  }
  if (info.device_count() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("worker.device_count: must be >= 0 (got ", info.device_count(), ")"));
  }
  if (info.memory_bytes() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("worker.memory_bytes: must be >= 0 (got ", info.memory_bytes(), ")"));
  }
  if (absl::Status profile = CheckDeviceProfile(info.profile()); !profile.ok()) return profile;
  const absl::Time now = clock_->Now();
  MutexLock lock(&mutex_);
  LookLocked(now);
  auto it = workers_.find(info.worker_id());
  if (it == workers_.end() && static_cast<int>(workers_.size()) >= options_.max_workers) {
    auto longest_dead = workers_.end();
    for (auto w = workers_.begin(); w != workers_.end(); ++w) {
      if (IsAlive(w->second, now)) continue;
      if (longest_dead == workers_.end() || w->second.last_seen < longest_dead->second.last_seen) {
        longest_dead = w;
      }
    }
    if (longest_dead == workers_.end()) {
      return absl::ResourceExhaustedError(
          absl::StrCat("worker.worker_id: ", info.worker_id(), " is new, but ", workers_.size(),
                       " live workers are registered [rule: at most ", options_.max_workers,
                       " workers; a dead one makes room]"));
    }
    known_dead_.erase(longest_dead->first);
    workers_.erase(longest_dead);
    ++removals_;
  }
  *restarted = it != workers_.end() && it->second.info.incarnation_id() != info.incarnation_id();
  Record& record = workers_[info.worker_id()];
  record = Record{info, now, WORKER_STATE_IDLE, ""};
  live_seen_floor_ = std::min(live_seen_floor_, now);
  known_dead_.erase(info.worker_id());
  return absl::OkStatus();
}

absl::Status WorkerRegistry::Heartbeat(const HeartbeatRequest& request) {
  if (request.worker_id().empty()) {
    return absl::InvalidArgumentError("worker_id: must not be empty");
  }
  if (request.incarnation_id().empty()) {
    return absl::InvalidArgumentError("incarnation_id: must not be empty");
  }
  const absl::Time now = clock_->Now();
  MutexLock lock(&mutex_);
  LookLocked(now);
  auto it = workers_.find(request.worker_id());
  if (it == workers_.end()) {
    return absl::NotFoundError(
        absl::StrCat("worker ", request.worker_id(), " is not registered; register again"));
  }
  Record& record = it->second;
  if (record.info.incarnation_id() != request.incarnation_id()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "worker ", request.worker_id(), " heartbeat from incarnation ", request.incarnation_id(),
        " but incarnation ", record.info.incarnation_id(), " is registered; register again"));
  }
  record.last_seen = now;
  live_seen_floor_ = std::min(live_seen_floor_, now);
  known_dead_.erase(request.worker_id());
  record.state = request.state() == WORKER_STATE_UNSPECIFIED ? WORKER_STATE_IDLE : request.state();
  record.job_id = request.job_id();
  return absl::OkStatus();
}

bool WorkerRegistry::IsAlive(const Record& record, absl::Time now) const {
  return now - record.last_seen <= options_.heartbeat_timeout;
}

std::vector<WorkerStatus> WorkerRegistry::List() const {
  const absl::Time now = clock_->Now();
  MutexLock lock(&mutex_);
  LookLocked(now);
  std::vector<WorkerStatus> result;
  result.reserve(workers_.size());
  for (const auto& [id, record] : workers_) {
    WorkerStatus status;
    *status.mutable_worker() = record.info;
    status.set_alive(IsAlive(record, now));
    status.set_state(record.state);
    status.set_last_seen_ms_ago(absl::ToInt64Milliseconds(now - record.last_seen));
    status.set_job_id(record.job_id);
    result.push_back(std::move(status));
  }
  return result;
}

absl::Status WorkerRegistry::Remove(const std::string& worker_id) {
  if (worker_id.empty()) return absl::InvalidArgumentError("worker_id is empty");
  const absl::Time now = clock_->Now();
  MutexLock lock(&mutex_);
  LookLocked(now);
  const auto it = workers_.find(worker_id);
  if (it == workers_.end()) {
    return absl::NotFoundError(absl::StrCat("worker ", worker_id, " is not registered"));
  }
  if (IsAlive(it->second, now)) {
    return absl::FailedPreconditionError(
        absl::StrCat("worker ", worker_id, " is alive (last heard from ",
                     absl::StrFormat("%.1f s", absl::ToDoubleSeconds(now - it->second.last_seen)),
                     " ago): stop it first [rule: only dead workers can be removed]"));
  }
  known_dead_.erase(it->first);
  workers_.erase(it);
  ++removals_;
  return absl::OkStatus();
}

WorkerRegistry::Census WorkerRegistry::TakeCensus() const {
  const absl::Time now = clock_->Now();
  MutexLock lock(&mutex_);
  LookLocked(now);
  Census census;
  census.registered = static_cast<int>(workers_.size());
  census.removals = removals_;
  if (now - live_seen_floor_ <= options_.heartbeat_timeout) {
    census.alive = census.registered - static_cast<int>(known_dead_.size());
    census.dead = known_dead_;
    return census;
  }
  absl::Time floor = absl::InfiniteFuture();
  for (const auto& [id, record] : workers_) {
    if (IsAlive(record, now)) {
      ++census.alive;
      floor = std::min(floor, record.last_seen);
    } else {
      census.dead.insert(id);
    }
  }
  live_seen_floor_ = floor;
  known_dead_ = census.dead;
  return census;
}

bool WorkerRegistry::IsRegistered(const std::string& worker_id) const {
  MutexLock lock(&mutex_);
  return workers_.count(worker_id) > 0;
}

std::vector<bool> WorkerRegistry::AreRegistered(const std::vector<std::string>& worker_ids) const {
  std::vector<bool> registered(worker_ids.size());
  MutexLock lock(&mutex_);
  for (size_t i = 0; i < worker_ids.size(); ++i) {
    registered[i] = workers_.count(worker_ids[i]) > 0;
  }
  return registered;
}

int WorkerRegistry::CountAlive() const {
  const absl::Time now = clock_->Now();
  MutexLock lock(&mutex_);
  LookLocked(now);
  int alive = 0;
  for (const auto& [id, record] : workers_) alive += IsAlive(record, now) ? 1 : 0;
  return alive;
}

}  // namespace mtrain
