// A deliberate lock-annotation violation: tools/checks/thread_safety.sh compiles this
// first and fails unless clang refuses it, so a check that silently stopped analysing
// (annotations compiled away, a flag lost) cannot pass. Not part of any Bazel target.
#include "common/mutex.h"

namespace mtrain {

class Counter {
 public:
  void Add() {
    MutexLock lock(&mutex_);
    ++count_;
  }
  // Wrong on purpose: reads count_ without holding mutex_.
  int Unlocked() const { return count_; }

 private:
  mutable Mutex mutex_;
  int count_ ABSL_GUARDED_BY(mutex_) = 0;
};

int Use() {
  Counter counter;
  counter.Add();
  return counter.Unlocked();
}

}  // namespace mtrain
