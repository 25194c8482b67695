#include "coordinator/step_writer.h"

#include <chrono>
#include <utility>

namespace mtrain {

StepWriter::StepWriter(WriteBatch write, absl::Duration interval)
    : write_(std::move(write)), interval_(interval), thread_([this] { Run(); }) {}

StepWriter::~StepWriter() {
  {
    MutexLock lock(&mutex_);
    stopping_ = true;
    queued_.SignalAll();
  }
  thread_.join();
}

void StepWriter::Write(StepRow row, Done done) {
  MutexLock lock(&mutex_);
  queue_.emplace_back(std::move(row), std::move(done));
  queued_.Signal();
}

StepWriter::Counts StepWriter::counts() const {
  MutexLock lock(&mutex_);
  return counts_;
}

void StepWriter::Run() {
  std::chrono::steady_clock::time_point next_start = std::chrono::steady_clock::now();
  while (true) {
    std::vector<std::pair<StepRow, Done>> batch;
    {
      MutexLock lock(&mutex_);
      while (queue_.empty() && !stopping_) queued_.Wait(&mutex_);
      // A tick after the previous transaction began, so that the rows arriving meanwhile
      // share the next one; stopping does not wait.
      while (!stopping_ && std::chrono::steady_clock::now() < next_start) {
        queued_.WaitUntil(&mutex_, next_start);
      }
      // Stopping still writes what is queued: those ranks are waiting for their answer.
      if (queue_.empty()) return;
      batch.swap(queue_);
    }
    next_start = std::chrono::steady_clock::now() +
                 std::chrono::microseconds(absl::ToInt64Microseconds(interval_));
    std::vector<StepRow> rows;
    rows.reserve(batch.size());
    for (auto& [row, done] : batch) rows.push_back(std::move(row));
    std::vector<absl::Status> stored = write_(rows);
    stored.resize(rows.size(), absl::InternalError("the step writer got no status for a row"));
    {
      MutexLock lock(&mutex_);
      ++counts_.batches;
      counts_.rows += static_cast<int64_t>(rows.size());
    }
    for (size_t i = 0; i < batch.size(); ++i) batch[i].second(stored[i]);
  }
}

}  // namespace mtrain
