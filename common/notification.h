// A one-shot event that threads can wait on, with a timeout.
//
// Used instead of absl::Notification because Debian's Abseil is not built with
// ThreadSanitizer annotations: TSan cannot see absl::Mutex synchronize and reports false
// races. The project's own code therefore synchronizes with common/mutex.h (std::mutex
// underneath, which TSan understands, with annotations the compiler checks).
#ifndef MTRAIN_COMMON_NOTIFICATION_H_
#define MTRAIN_COMMON_NOTIFICATION_H_

#include "absl/base/thread_annotations.h"
#include "absl/time/time.h"
#include "common/mutex.h"

namespace mtrain {

class Notification {
 public:
  void Notify() {
    MutexLock lock(&mutex_);
    notified_ = true;
    changed_.SignalAll();
  }

  bool HasBeenNotified() const {
    MutexLock lock(&mutex_);
    return notified_;
  }

  // Returns true if notified within `timeout`.
  bool WaitForNotificationWithTimeout(absl::Duration timeout) const {
    const auto deadline = SteadyDeadlineIn(timeout);
    MutexLock lock(&mutex_);
    while (!notified_) {
      if (changed_.WaitUntil(&mutex_, deadline)) return notified_;
    }
    return true;
  }

  void WaitForNotification() const {
    MutexLock lock(&mutex_);
    while (!notified_) changed_.Wait(&mutex_);
  }

 private:
  mutable Mutex mutex_;
  mutable CondVar changed_;
  bool notified_ ABSL_GUARDED_BY(mutex_) = false;
};

}  // namespace mtrain

#endif  // MTRAIN_COMMON_NOTIFICATION_H_
