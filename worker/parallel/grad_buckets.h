// Data-parallel gradient reduction in contiguous buckets, overlapped with the backward
// pass.
//
// The flat gradient buffer is cut into buckets of about `bucket_elements` each, walking the
// tensors from the END of the buffer (the backward pass produces the last layers' gradients
// first), never splitting a tensor. During the last microbatch's backward the model
// reports each tensor whose gradient is final (GradReadyHook); when every tensor of a bucket
// is final, the bucket's all-reduce starts on a communication thread while the backward
// goes on computing earlier layers. Finish() waits for all of them.
//
// Gradients are summed, not averaged: each replica's loss gradient is already scaled by
// 1 / (tokens in the GLOBAL batch), so the sum over replicas is the average of their mean
// gradients, exactly the single-rank gradient of the global batch.
//
// The buckets know the buffer only as (offset, size) ranges, one per tensor: which engine
// owns the buffer and how it names its tensors is not theirs to know.
//
//   std::vector<GradientRange> ranges;
//   for (const ParamTensor& t : model.tensors()) ranges.push_back({t.offset, t.size});
//   GradientBuckets buckets(ranges, model.grads(), data_group, 1 << 20);
//   buckets.StartStep();
//   ... backward with hook [&](const ParamTensor& t) { buckets.MarkReady(t.offset); } ...
//   RETURN_IF_ERROR(buckets.Finish());
//
// ZeRO-1 (`shard_size` > 0): replica r of the data group keeps (and updates) only shard r,
// elements [r * shard_size, (r + 1) * shard_size) of the buffer (padded to d shards), so it
// needs only that shard's sum: a bucket is then the same piece of every shard (elements
// [k q, (k + 1) q) of each, q about bucket_elements / d), reduce-scattered so that each
// replica receives its own piece's sum, half the bytes of an all-reduce. A bucket is ready
// once every piece is final; the backward finishes the buffer's end first, so the buckets
// start during the backward of the first shard's region (the last 1/d of the backward).
// The other shards' gradients are left partial: only the own shard may be read.
//
// Thread-safety: MarkReady, StartStep and Finish are called from the training thread; the
// communication thread is internal.
#ifndef MTRAIN_WORKER_PARALLEL_GRAD_BUCKETS_H_
#define MTRAIN_WORKER_PARALLEL_GRAD_BUCKETS_H_

#include <cstddef>
#include <deque>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "common/mutex.h"
#include "worker/parallel/communicator.h"

namespace mtrain {

// PyTorch DDP's default is 25 MB; on CPU and small models smaller buckets overlap more.
inline constexpr size_t kDefaultBucketElements = 1 << 20;  // 4 MiB of fp32

// One tensor's gradient in the flat buffer: elements [offset, offset + size).
struct GradientRange {
  size_t offset = 0;
  size_t size = 0;
};

class GradientBuckets {
 public:
  // `tensors` must tile [0, end of the last tensor) of `grads` without gaps (as a
  // RankModel's do). `data_group` may have size 1: then nothing is communicated.
  // `shard_size` > 0: ZeRO-1's reduce-scatter (above); the buffer must hold
  // data_group->size() * shard_size elements.
  GradientBuckets(const std::vector<GradientRange>& tensors, float* grads, Communicator* data_group,
                  size_t bucket_elements, size_t shard_size = 0);
  ~GradientBuckets();
  GradientBuckets(const GradientBuckets&) = delete;
  GradientBuckets& operator=(const GradientBuckets&) = delete;

  // Forgets the previous step's readiness. Requires the previous step to be Finish()ed.
  void StartStep();
  // The gradient of the tensor starting at `offset` is final for this step (an offset that
  // starts no tensor is ignored).
  void MarkReady(size_t offset);
  // Marks every tensor not yet reported ready (a tensor the hook never saw), waits for
  // every bucket's all-reduce and returns the first error.
  absl::Status Finish();

  int num_buckets() const { return static_cast<int>(buckets_.size()); }
  // [begin, end) element ranges of the buckets, in launch order (end of buffer first).
  std::vector<std::pair<size_t, size_t>> BucketRanges() const;
  // Buckets whose all-reduce started before Finish() was called in the last step: a
  // measure of overlap.
  int buckets_launched_early() const { return launched_early_; }

 private:
  struct Bucket {
    size_t begin = 0, end = 0;
  };
  // What a step has done to a bucket so far.
  struct BucketProgress {
    size_t pending = 0;  // elements not yet reported ready this step
    bool launched = false;
  };
  void Launch(int bucket) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  void CommunicationLoop();
  int BucketOf(size_t offset) const;
  // ZeRO-1: the bucket's pieces reduce-scattered; this replica's piece gets their sum.
  absl::Status ReduceScatter(const Bucket& bucket);

  float* const grads_;
  Communicator* const group_;
  const size_t shard_size_;      // 0: buckets are all-reduced
  std::vector<Bucket> buckets_;  // fixed at construction (ZeRO-1: within a shard)
  // ZeRO-1: per tensor (the order of tensor_offsets_), the buckets its elements fall in and
  // how many; and per bucket the tensor elements its pieces hold.
  std::vector<std::vector<std::pair<int, size_t>>> tensor_buckets_;
  std::vector<size_t> bucket_elements_;
  std::vector<float> gathered_, piece_;  // communication thread only
  std::vector<size_t> tensor_offsets_;   // sorted; one per tensor
  std::vector<size_t> tensor_sizes_;     // in the order of tensor_offsets_

  Mutex mutex_;
  CondVar work_or_done_;
  std::vector<BucketProgress> progress_ ABSL_GUARDED_BY(mutex_);  // per bucket
  std::vector<char> tensor_ready_ ABSL_GUARDED_BY(mutex_);        // per tensor, this step
  std::deque<int> queue_ ABSL_GUARDED_BY(mutex_);                 // buckets to all-reduce
  int outstanding_ ABSL_GUARDED_BY(mutex_) = 0;                   // launched, not yet reduced
  absl::Status first_error_ ABSL_GUARDED_BY(mutex_);
  bool stopping_ ABSL_GUARDED_BY(mutex_) = false;
  int launched_early_ = 0;  // training thread only
  std::thread thread_;
};

}  // namespace mtrain

#endif  // MTRAIN_WORKER_PARALLEL_GRAD_BUCKETS_H_
