#include "worker/parallel/counting_communicator.h"

#include <cmath>

namespace mtrain {

void CountingCommunicator::CountShare(double whole, double factor) {
  const int n = inner_->size();
  if (n <= 1) return;
  bytes_sent_.fetch_add(static_cast<int64_t>(std::llround(factor * whole * (n - 1) / n)),
                        std::memory_order_relaxed);
}

absl::Status CountingCommunicator::AllReduce(float* data, size_t count, ReduceOp op) {
  CountShare(static_cast<double>(count) * sizeof(float), 2.0);
  return inner_->AllReduce(data, count, op);
}

absl::Status CountingCommunicator::AllReduce(double* data, size_t count, ReduceOp op) {
  CountShare(static_cast<double>(count) * sizeof(double), 2.0);
  return inner_->AllReduce(data, count, op);
}

absl::Status CountingCommunicator::AllGather(const float* in, float* out, size_t count) {
  CountShare(static_cast<double>(count) * inner_->size() * sizeof(float), 1.0);
  return inner_->AllGather(in, out, count);
}

absl::Status CountingCommunicator::ReduceScatter(const float* in, float* out, size_t count,
                                                 ReduceOp op) {
  CountShare(static_cast<double>(count) * inner_->size() * sizeof(float), 1.0);
  return inner_->ReduceScatter(in, out, count, op);
}

absl::Status CountingCommunicator::Reduce(float* data, size_t count, ReduceOp op, int root) {
  CountShare(static_cast<double>(count) * sizeof(float),
             inner_->reduce_is_all_reduce() ? 2.0 : 1.0);
  return inner_->Reduce(data, count, op, root);
}

absl::Status CountingCommunicator::Broadcast(float* data, size_t count, int root) {
  CountShare(static_cast<double>(count) * sizeof(float), 1.0);
  return inner_->Broadcast(data, count, root);
}

absl::StatusOr<std::unique_ptr<PendingSend>> CountingCommunicator::StartSend(const void* data,
                                                                             size_t bytes, int peer,
                                                                             uint64_t tag) {
  bytes_sent_.fetch_add(static_cast<int64_t>(bytes), std::memory_order_relaxed);
  return inner_->StartSend(data, bytes, peer, tag);
}

int64_t BytesSentBy(const Communicator* group) {
  const auto* counting = dynamic_cast<const CountingCommunicator*>(group);
  return counting != nullptr ? counting->bytes_sent() : 0;
}

}  // namespace mtrain
