// A one-shot event that threads can wait on, with a timeout.
//
// Used instead of absl::Notification because Debian's Abseil is not built with
// ThreadSanitizer annotations: TSan cannot see absl::Mutex synchronize and reports false
// races, while std::mutex goes through pthreads, which TSan understands. The project's own
// code therefore synchronizes with std::mutex / std::condition_variable.
#ifndef MTRAIN_COMMON_NOTIFICATION_H_
#define MTRAIN_COMMON_NOTIFICATION_H_

#include <chrono>
#include <condition_variable>
#include <mutex>

#include "absl/time/time.h"

namespace mtrain {

class Notification {
 public:
  void Notify() {
    std::lock_guard<std::mutex> lock(mutex_);
    notified_ = true;
    changed_.notify_all();
  }

  bool HasBeenNotified() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return notified_;
  }

  // Returns true if notified within `timeout`.
  bool WaitForNotificationWithTimeout(absl::Duration timeout) const {
    std::unique_lock<std::mutex> lock(mutex_);
    return changed_.wait_for(lock, absl::ToChronoNanoseconds(timeout),
                             [this] { return notified_; });
  }

  void WaitForNotification() const {
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait(lock, [this] { return notified_; });
  }

 private:
  mutable std::mutex mutex_;
  mutable std::condition_variable changed_;
  bool notified_ = false;  // Guarded by mutex_.
};

}  // namespace mtrain

#endif  // MTRAIN_COMMON_NOTIFICATION_H_
