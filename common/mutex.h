// A mutex, its scoped lock and a condition variable that clang's thread-safety analysis
// understands: members marked ABSL_GUARDED_BY(mutex_) and helpers marked
// ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) are checked by tools/checks/thread_safety.sh
// (clang -Wthread-safety; the Bazel build uses GCC, which ignores the annotations).
//
// Why not absl::Mutex: Debian's Abseil is not built with ThreadSanitizer annotations, so
// TSan (make test-tsan) cannot see absl::Mutex synchronize and reports false races. These
// classes are thin wrappers over std::mutex and std::condition_variable, which go through
// pthreads, which TSan understands. The API follows absl::Mutex's (Lock/Unlock, MutexLock,
// CondVar::Wait/Signal), so moving to absl::Mutex later is a rename.
//
//   class Counter {
//    public:
//     void Add() {
//       MutexLock lock(&mutex_);
//       ++count_;
//       changed_.SignalAll();
//     }
//     void AwaitAtLeast(int n) {
//       MutexLock lock(&mutex_);
//       while (count_ < n) changed_.Wait(&mutex_);  // a loop: wake-ups may be spurious
//     }
//    private:
//     Mutex mutex_;
//     CondVar changed_;
//     int count_ ABSL_GUARDED_BY(mutex_) = 0;
//   };
//
// Waits are written as loops in the caller, not as predicates: the analysis cannot tell
// that a predicate lambda runs with the lock held, so it would flag every guarded read in
// one.
#ifndef MTRAIN_COMMON_MUTEX_H_
#define MTRAIN_COMMON_MUTEX_H_

#include <chrono>
#include <condition_variable>
#include <mutex>

#include "absl/base/thread_annotations.h"
#include "absl/time/time.h"

namespace mtrain {

class CondVar;

// Not recursive; not copyable.
class ABSL_LOCKABLE Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void Lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() { mutex_.lock(); }
  void Unlock() ABSL_UNLOCK_FUNCTION() { mutex_.unlock(); }
  // Tells the analysis that the caller holds the lock where it cannot see it (a callback
  // the holder invokes). No check at run time.
  void AssertHeld() const ABSL_ASSERT_EXCLUSIVE_LOCK() {}

 private:
  friend class CondVar;
  std::mutex mutex_;
};

// Holds `mutex` for its scope.
class ABSL_SCOPED_LOCKABLE MutexLock {
 public:
  explicit MutexLock(Mutex* mutex) ABSL_EXCLUSIVE_LOCK_FUNCTION(mutex) : mutex_(mutex) {
    mutex_->Lock();
  }
  ~MutexLock() ABSL_UNLOCK_FUNCTION() { mutex_->Unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex* const mutex_;
};

// A condition variable for Mutex. Every wait releases `mutex` while it blocks and holds it
// again when it returns; callers re-check their condition in a loop.
class CondVar {
 public:
  CondVar() = default;
  CondVar(const CondVar&) = delete;
  CondVar& operator=(const CondVar&) = delete;

  void Wait(Mutex* mutex) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex) {
    std::unique_lock<std::mutex> lock(mutex->mutex_, std::adopt_lock);
    cv_.wait(lock);
    lock.release();  // still held: the caller's MutexLock releases it
  }
  // Returns true if `deadline` passed (the caller's condition may still have come true).
  bool WaitUntil(Mutex* mutex, std::chrono::steady_clock::time_point deadline)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex) {
    std::unique_lock<std::mutex> lock(mutex->mutex_, std::adopt_lock);
    const bool timed_out = cv_.wait_until(lock, deadline) == std::cv_status::timeout;
    lock.release();
    return timed_out;
  }

  void Signal() { cv_.notify_one(); }
  void SignalAll() { cv_.notify_all(); }

 private:
  std::condition_variable cv_;
};

// The steady-clock deadline `timeout` from now, for CondVar::WaitUntil; an infinite or very
// long timeout saturates rather than overflowing.
inline std::chrono::steady_clock::time_point SteadyDeadlineIn(absl::Duration timeout) {
  const auto now = std::chrono::steady_clock::now();
  const absl::Duration room = absl::FromChrono(std::chrono::steady_clock::time_point::max() - now);
  if (timeout >= room) return std::chrono::steady_clock::time_point::max();
  return now + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                   absl::ToChronoNanoseconds(timeout));
}

}  // namespace mtrain

#endif  // MTRAIN_COMMON_MUTEX_H_
