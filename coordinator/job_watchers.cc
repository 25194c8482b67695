#include "coordinator/job_watchers.h"

#include <utility>
#include <vector>

namespace mtrain {

JobWatchers::JobWatchers() {
  thread_ = std::thread([this] { Run(); });
}

JobWatchers::~JobWatchers() {
  {
    MutexLock lock(&queue_mutex_);
    stopping_ = true;
  }
  queued_.SignalAll();
  thread_.join();
}

uint64_t JobWatchers::Add(const std::string& job_id, Changed changed) {
  MutexLock lock(&watchers_mutex_);
  const uint64_t ticket = next_ticket_++;
  watchers_.emplace(ticket, Watcher{job_id, std::move(changed)});
  by_job_.emplace(job_id, ticket);
  count_.fetch_add(1);
  return ticket;
}

void JobWatchers::Remove(uint64_t ticket) {
  MutexLock lock(&watchers_mutex_);
  const auto it = watchers_.find(ticket);
  if (it == watchers_.end()) return;
  for (auto [job, end] = by_job_.equal_range(it->second.job_id); job != end; ++job) {
    if (job->second == ticket) {
      by_job_.erase(job);
      break;
    }
  }
  watchers_.erase(it);
  count_.fetch_sub(1);
}

void JobWatchers::Notify(const std::string& job_id) {
  if (count_.load() == 0) return;
  {
    MutexLock lock(&queue_mutex_);
    if (!pending_.insert(job_id).second) return;  // already queued
  }
  queued_.Signal();
}

size_t JobWatchers::size() const { return count_.load(); }

void JobWatchers::Run() {
  for (;;) {
    std::set<std::string> jobs;
    {
      MutexLock lock(&queue_mutex_);
      while (pending_.empty() && !stopping_) queued_.Wait(&queue_mutex_);
      if (stopping_) return;
      jobs.swap(pending_);
    }
    MutexLock lock(&watchers_mutex_);
    for (const std::string& job : jobs) {
      // Tickets first: a watcher's call may not change the registry (Remove waits for this
      // lock), but the copy keeps the loop independent of that rule.
      std::vector<uint64_t> tickets;
      for (auto [it, end] = by_job_.equal_range(job); it != end; ++it)
        tickets.push_back(it->second);
      for (uint64_t ticket : tickets) {
        const auto watcher = watchers_.find(ticket);
        if (watcher != watchers_.end()) watcher->second.changed();
      }
    }
  }
}

}  // namespace mtrain
