// Tells callback streams (WatchJob) that a job changed. The job manager queues a
// notification with each change (Notify, cheap, under its own lock); one thread of this
// class then calls the job's watchers with no lock of the job manager held. So a watcher
// holds no thread while its job is quiet (the synchronous WatchJob parked one per
// watcher), and no watcher's work (reading the job's status and steps) runs under the job
// manager's mutex.
//
//   JobWatchers watchers;
//   const uint64_t ticket = watchers.Add("job-1", [&] { /* read the job, write to the stream */ });
//   watchers.Notify("job-1");  // soon after, on the watchers' thread: the lambda runs
//   watchers.Remove(ticket);   // after this the lambda is not running and never runs again
//
// Thread-safe. Notifications of one job coalesce: a watcher learns that something changed,
// not how often, and reads the job's state itself.
#ifndef MTRAIN_COORDINATOR_JOB_WATCHERS_H_
#define MTRAIN_COORDINATOR_JOB_WATCHERS_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "common/mutex.h"

namespace mtrain {

class JobWatchers {
 public:
  using Changed = std::function<void()>;

  JobWatchers();
  // Stops the thread; watchers still registered are not called again.
  ~JobWatchers();
  JobWatchers(const JobWatchers&) = delete;
  JobWatchers& operator=(const JobWatchers&) = delete;

  // Calls `changed` on this class's thread after each Notify(job_id) from now on (changes
  // close together may make one call). Returns the ticket for Remove.
  uint64_t Add(const std::string& job_id, Changed changed);
  // After it returns, the watcher's `changed` is not running and never runs again. Must not
  // be called from inside a `changed` (it waits for the running one).
  void Remove(uint64_t ticket);
  // Queues a call of the job's watchers; takes only this class's queue lock, so it may be
  // called under the caller's own locks.
  void Notify(const std::string& job_id);

  size_t size() const;

 private:
  void Run();

  mutable Mutex queue_mutex_;
  CondVar queued_;
  std::set<std::string> pending_ ABSL_GUARDED_BY(queue_mutex_);
  bool stopping_ ABSL_GUARDED_BY(queue_mutex_) = false;

  // Held while watchers run, so Remove can wait for a running one. Taken before any lock a
  // `changed` takes (and never under one).
  mutable Mutex watchers_mutex_;
  struct Watcher {
    std::string job_id;
    Changed changed;
  };
  std::map<uint64_t, Watcher> watchers_ ABSL_GUARDED_BY(watchers_mutex_);  // by ticket
  std::multimap<std::string, uint64_t> by_job_ ABSL_GUARDED_BY(watchers_mutex_);
  uint64_t next_ticket_ ABSL_GUARDED_BY(watchers_mutex_) = 1;
  // Watchers registered: Notify queues nothing while there are none.
  std::atomic<size_t> count_{0};

  std::thread thread_;  // last: starts once everything above exists
};

}  // namespace mtrain

#endif  // MTRAIN_COORDINATOR_JOB_WATCHERS_H_
