#include "worker/parallel/grad_buckets.h"

#include <algorithm>

#include "common/status_macros.h"

namespace mtrain {

GradientBuckets::GradientBuckets(const std::vector<GradientRange>& tensors, float* grads,
                                 Communicator* data_group, size_t bucket_elements,
                                 size_t shard_size)
    : grads_(grads),
      group_(data_group),
      shard_size_(data_group != nullptr && data_group->size() > 1 ? shard_size : 0) {
  std::vector<const GradientRange*> order;
  for (const GradientRange& t : tensors) order.push_back(&t);
  std::sort(order.begin(), order.end(),
            [](const GradientRange* a, const GradientRange* b) { return a->offset > b->offset; });
  for (auto t = order.rbegin(); t != order.rend(); ++t) {
    tensor_offsets_.push_back((*t)->offset);
    tensor_sizes_.push_back((*t)->size);
  }
  if (shard_size_ > 0) {
    // The same piece of every shard, from the shards' ends down (the backward's order).
    const size_t piece = std::max<size_t>(1, bucket_elements / group_->size());
    const size_t pieces = (shard_size_ + piece - 1) / piece;
    for (size_t k = pieces; k-- > 0;) {
      buckets_.push_back(Bucket{k * piece, std::min((k + 1) * piece, shard_size_)});
    }
    bucket_elements_.assign(buckets_.size(), 0);
    const auto bucket_at = [&](size_t within) {
      return static_cast<int>(pieces - 1 - within / piece);  // buckets_ run downwards
    };
    for (size_t i = 0; i < tensor_offsets_.size(); ++i) {
      std::vector<std::pair<int, size_t>> spans;
      const size_t end = tensor_offsets_[i] + tensor_sizes_[i];
      for (size_t at = tensor_offsets_[i]; at < end;) {
        const size_t within = at % shard_size_;
        const int b = bucket_at(within);
        const size_t piece_end = at - within + buckets_[b].end;
        const size_t take = std::min(end, piece_end) - at;
        spans.emplace_back(b, take);
        bucket_elements_[b] += take;
        at += take;
      }
      tensor_buckets_.push_back(std::move(spans));
    }
    tensor_ready_.assign(tensor_offsets_.size(), 0);
    progress_.resize(buckets_.size());
    thread_ = std::thread([this] { CommunicationLoop(); });
    return;
  }
  // From the end of the buffer down: close a bucket once it reaches the target size.
  Bucket current;
  bool open = false;
  for (const GradientRange* t : order) {
    if (!open) {
      current = Bucket{};
      current.end = t->offset + t->size;
      open = true;
    }
    current.begin = t->offset;
    if (current.end - current.begin >= bucket_elements) {
      buckets_.push_back(current);
      open = false;
    }
  }
  if (open) buckets_.push_back(current);
  tensor_ready_.assign(tensor_offsets_.size(), 0);
  progress_.resize(buckets_.size());
  if (group_ != nullptr && group_->size() > 1) {
    thread_ = std::thread([this] { CommunicationLoop(); });
  }
}

GradientBuckets::~GradientBuckets() {
  {
    MutexLock lock(&mutex_);
    stopping_ = true;
  }
  work_or_done_.SignalAll();
  if (thread_.joinable()) thread_.join();
}

std::vector<std::pair<size_t, size_t>> GradientBuckets::BucketRanges() const {
  std::vector<std::pair<size_t, size_t>> ranges;
  for (const Bucket& b : buckets_) ranges.emplace_back(b.begin, b.end);
  return ranges;
}

int GradientBuckets::BucketOf(size_t offset) const {
  // Buckets are in descending order of position.
  for (size_t i = 0; i < buckets_.size(); ++i) {
    if (offset >= buckets_[i].begin && offset < buckets_[i].end) return static_cast<int>(i);
  }
  return -1;
}

void GradientBuckets::StartStep() {
  MutexLock lock(&mutex_);
  for (size_t b = 0; b < buckets_.size(); ++b) {
    progress_[b].pending =
        shard_size_ > 0 ? bucket_elements_[b] : buckets_[b].end - buckets_[b].begin;
    progress_[b].launched = false;
  }
  std::fill(tensor_ready_.begin(), tensor_ready_.end(), 0);
  first_error_ = absl::OkStatus();
  launched_early_ = 0;
}

void GradientBuckets::MarkReady(size_t offset) {
  const auto it = std::lower_bound(tensor_offsets_.begin(), tensor_offsets_.end(), offset);
  if (it == tensor_offsets_.end() || *it != offset) return;
  const size_t index = it - tensor_offsets_.begin();
  MutexLock lock(&mutex_);
  if (tensor_ready_[index]) return;  // reported twice: count it once
  tensor_ready_[index] = 1;
  if (shard_size_ > 0) {
    for (const auto& [b, elements] : tensor_buckets_[index]) {
      progress_[b].pending -= elements;
      if (progress_[b].pending == 0) {
        ++launched_early_;
        Launch(b);
      }
    }
    return;
  }
  const int b = BucketOf(offset);
  if (b < 0) return;
  progress_[b].pending -= tensor_sizes_[index];
  if (progress_[b].pending == 0) {
    ++launched_early_;
    Launch(b);
  }
}

void GradientBuckets::Launch(int bucket) {
  progress_[bucket].launched = true;
  if (!thread_.joinable()) return;  // size-1 group: nothing to reduce
  queue_.push_back(bucket);
  ++outstanding_;
  work_or_done_.SignalAll();
}

absl::Status GradientBuckets::Finish() {
  MutexLock lock(&mutex_);
  for (size_t b = 0; b < buckets_.size(); ++b) {
    if (!progress_[b].launched) Launch(static_cast<int>(b));
  }
  while (outstanding_ != 0) work_or_done_.Wait(&mutex_);
  return first_error_;
}

void GradientBuckets::CommunicationLoop() {
  MutexLock lock(&mutex_);
  while (true) {
    while (!stopping_ && queue_.empty()) work_or_done_.Wait(&mutex_);
    if (queue_.empty()) return;  // stopping with nothing left
    const int b = queue_.front();
    queue_.pop_front();
    const Bucket bucket = buckets_[b];
    const bool skip = !first_error_.ok();  // the group is unusable after an error
    // The all-reduce runs unlocked so that the training thread can go on marking tensors.
    mutex_.Unlock();
    absl::Status status = absl::OkStatus();
    if (!skip) {
      status = shard_size_ > 0 ? ReduceScatter(bucket)
                               : group_->AllReduce(grads_ + bucket.begin, bucket.end - bucket.begin,
                                                   ReduceOp::kSum);
    }
    mutex_.Lock();
    if (!status.ok() && first_error_.ok()) first_error_ = status;
    --outstanding_;
    work_or_done_.SignalAll();
  }
}

absl::Status GradientBuckets::ReduceScatter(const Bucket& bucket) {
  const size_t length = bucket.end - bucket.begin;
  const int replicas = group_->size();
  gathered_.resize(length * replicas);
  piece_.resize(length);
  for (int r = 0; r < replicas; ++r) {
    const float* from = grads_ + r * shard_size_ + bucket.begin;
    std::copy(from, from + length, gathered_.begin() + r * length);
  }
  RETURN_IF_ERROR(group_->ReduceScatter(gathered_.data(), piece_.data(), length, ReduceOp::kSum));
  std::copy(piece_.begin(), piece_.end(), grads_ + group_->rank() * shard_size_ + bucket.begin);
  return absl::OkStatus();
}

}  // namespace mtrain
