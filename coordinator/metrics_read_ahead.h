// What one rank's metrics stream does next (MetricsStream in grpc_service.cc is its
// transport): it reads ahead of the step store by at most `limit` messages, holds its one
// read buffer until the message in it has been handed on, and ends once the rank closed
// its side (or a store refused a row) and every row handed on has been answered.
//
// Events come from two threads: gRPC's (a read done, the message handed on, the stream
// closed) and the step writer's (a row stored). A store answer that arrives while the
// buffer still holds an unhanded message must not start the next read into it: that
// overwrote step N with step N+1 before N was copied, and one step in a few thousand went
// missing from the job's history (slurm_cluster_test, 2026-11-28).
//
//   MetricsReadAhead flow(32);
//   flow.Start();                       // kRead: the first read
//   ... OnReadDone(ok):  flow.Read(); hand on; Act(flow.HandedOn());
//   ... stored:          Act(flow.Stored(status));
//
// Thread-safe.
#ifndef MTRAIN_COORDINATOR_METRICS_READ_AHEAD_H_
#define MTRAIN_COORDINATOR_METRICS_READ_AHEAD_H_

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "common/mutex.h"

namespace mtrain {

class MetricsReadAhead {
 public:
  // What the stream starts after an event: nothing, the next read, or its end (with
  // error(): OK, or the first store refusal).
  enum class Next { kNothing, kRead, kFinish };

  explicit MetricsReadAhead(int limit) : limit_(limit) {}

  // The stream's first read.
  Next Start();
  // A read completed: the buffer holds a message until HandedOn.
  Next Read();
  // The message in the buffer was copied on (its store answer may already have come).
  Next HandedOn();
  // The rank closed its side, or the call was cancelled: no read is outstanding.
  Next Closed();
  // A row handed on was answered by the store.
  Next Stored(const absl::Status& status);

  absl::Status error() const;

 private:
  Next DecideLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);

  const int limit_;
  mutable Mutex mutex_;
  bool reading_ ABSL_GUARDED_BY(mutex_) = false;      // a read into the buffer is outstanding
  bool buffer_held_ ABSL_GUARDED_BY(mutex_) = false;  // a read message not yet handed on
  bool closed_ ABSL_GUARDED_BY(mutex_) = false;
  bool finished_ ABSL_GUARDED_BY(mutex_) = false;
  int pending_ ABSL_GUARDED_BY(mutex_) = 0;  // read, not yet answered by the store
  absl::Status error_ ABSL_GUARDED_BY(mutex_);
};

}  // namespace mtrain

#endif  // MTRAIN_COORDINATOR_METRICS_READ_AHEAD_H_
