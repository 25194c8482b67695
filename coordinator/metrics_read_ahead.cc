#include "coordinator/metrics_read_ahead.h"

namespace mtrain {

MetricsReadAhead::Next MetricsReadAhead::Start() {
  MutexLock lock(&mutex_);
  return DecideLocked();
}

MetricsReadAhead::Next MetricsReadAhead::Read() {
  MutexLock lock(&mutex_);
  reading_ = false;
  buffer_held_ = true;
  ++pending_;
  // Nothing starts yet: the buffer holds this message until it is handed on.
  return Next::kNothing;
}

MetricsReadAhead::Next MetricsReadAhead::HandedOn() {
  MutexLock lock(&mutex_);
  buffer_held_ = false;
  return DecideLocked();
}

MetricsReadAhead::Next MetricsReadAhead::Closed() {
  MutexLock lock(&mutex_);
  reading_ = false;
  closed_ = true;
  return DecideLocked();
}

MetricsReadAhead::Next MetricsReadAhead::Stored(const absl::Status& status) {
  MutexLock lock(&mutex_);
  --pending_;
  // A stale generation ends the stream: the rank learns it must stop.
  if (!status.ok() && error_.ok()) error_ = status;
  return DecideLocked();
}

absl::Status MetricsReadAhead::error() const {
  MutexLock lock(&mutex_);
  return error_;
}

MetricsReadAhead::Next MetricsReadAhead::DecideLocked() {
  if (finished_) return Next::kNothing;
  // Finish only once no message is in the buffer or in the store's hands: every `done`
  // has run, so nothing calls back into a finished stream.
  if ((closed_ || !error_.ok()) && pending_ == 0 && !buffer_held_) {
    finished_ = true;
    return Next::kFinish;
  }
  if (!reading_ && !buffer_held_ && !closed_ && error_.ok() && pending_ < limit_) {
    reading_ = true;
    return Next::kRead;
  }
  return Next::kNothing;
}

}  // namespace mtrain
