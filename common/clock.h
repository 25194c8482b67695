// A source of the current time, injected wherever timeouts are decided so that tests can
// move time by hand instead of sleeping.
//
//   FakeClock clock(absl::FromUnixSeconds(100));
//   WorkerRegistry registry(&clock, options);
//   clock.Advance(absl::Seconds(11));  // every worker's heartbeat is now 11 s old
#ifndef MTRAIN_COMMON_CLOCK_H_
#define MTRAIN_COMMON_CLOCK_H_

#include "absl/base/thread_annotations.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/mutex.h"

namespace mtrain {

// Thread-safe in all implementations.
class Clock {
 public:
  virtual ~Clock() = default;
  virtual absl::Time Now() const = 0;
};

// Wall-clock time.
class RealClock : public Clock {
 public:
  absl::Time Now() const override { return absl::Now(); }
  // A process-wide instance (stateless, never destroyed).
  static RealClock* Get() {
    static RealClock* clock = new RealClock;
    return clock;
  }
};

// Time that moves only when told to.
class FakeClock : public Clock {
 public:
  explicit FakeClock(absl::Time start) : now_(start) {}
  absl::Time Now() const override {
    MutexLock lock(&mutex_);
    return now_;
  }
  void Advance(absl::Duration delta) {
    MutexLock lock(&mutex_);
    now_ += delta;
  }

 private:
  mutable Mutex mutex_;
  absl::Time now_ ABSL_GUARDED_BY(mutex_);
};

}  // namespace mtrain

#endif  // MTRAIN_COMMON_CLOCK_H_
