// A Communicator that passes every call to another and counts the bytes this member
// sends, as ring algorithms move them (the model of the Megatron papers' communication
// volumes, whatever algorithm the backend picks): an all-reduce of B bytes sends
// 2(n-1)/n * B, an all-gather or reduce-scatter whose whole buffer is B sends (n-1)/n * B,
// a broadcast (n-1)/n * B, a point-to-point message its bytes. A reduce to one member
// counts (n-1)/n * B, a reduce-scatter's share (what each member sends on average when
// the roots take turns, as ZeRO-1's ranges do), or an all-reduce's where the backend runs
// one for it. The counts tell the links
// apart (tensor, pipeline, data: RankGroups) and let a step report what it moved.
//
//   auto counted = std::make_unique<CountingCommunicator>(std::move(group));
//   ... collectives ...
//   counted->bytes_sent();
#ifndef MTRAIN_WORKER_PARALLEL_COUNTING_COMMUNICATOR_H_
#define MTRAIN_WORKER_PARALLEL_COUNTING_COMMUNICATOR_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "worker/parallel/communicator.h"

namespace mtrain {

class CountingCommunicator : public Communicator {
 public:
  explicit CountingCommunicator(std::unique_ptr<Communicator> inner) : inner_(std::move(inner)) {}

  // Since construction; safe to read from any thread.
  int64_t bytes_sent() const { return bytes_sent_.load(std::memory_order_relaxed); }
  Communicator& inner() { return *inner_; }

  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  const std::string& name() const override { return inner_->name(); }
  absl::Status AllReduce(float* data, size_t count, ReduceOp op) override;
  absl::Status AllReduce(double* data, size_t count, ReduceOp op) override;
  absl::Status AllGather(const float* in, float* out, size_t count) override;
  absl::Status ReduceScatter(const float* in, float* out, size_t count, ReduceOp op) override;
  absl::Status Broadcast(float* data, size_t count, int root) override;
  absl::Status Reduce(float* data, size_t count, ReduceOp op, int root) override;
  bool reduce_is_all_reduce() const override { return inner_->reduce_is_all_reduce(); }
  absl::StatusOr<std::unique_ptr<PendingSend>> StartSend(const void* data, size_t bytes, int peer,
                                                         uint64_t tag) override;
  absl::Status Recv(void* data, size_t bytes, int peer, uint64_t tag) override {
    return inner_->Recv(data, bytes, peer, tag);
  }
  absl::Status Barrier() override { return inner_->Barrier(); }
  void Abort() override { inner_->Abort(); }

 private:
  // (n-1)/n of `whole` bytes, times `factor`.
  void CountShare(double whole, double factor);

  std::unique_ptr<Communicator> inner_;
  std::atomic<int64_t> bytes_sent_{0};
};

// The bytes sent so far by `group` if it counts them (a CountingCommunicator), else 0.
int64_t BytesSentBy(const Communicator* group);

}  // namespace mtrain

#endif  // MTRAIN_WORKER_PARALLEL_COUNTING_COMMUNICATOR_H_
