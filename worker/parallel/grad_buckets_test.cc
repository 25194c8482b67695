#include "worker/parallel/grad_buckets.h"

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "common/mutex.h"
#include "gtest/gtest.h"
#include "worker/parallel/counting_communicator.h"
#include "worker/parallel/gloo_communicator.h"
#include "worker/parallel/key_value_store.h"

namespace mtrain {
namespace {

// A data-parallel group of two whose all-reduce doubles the data (as summing two identical
// replicas would) and records which ranges were reduced, and when.
class RecordingGroup : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 2; }
  const std::string& name() const override { return name_; }
  absl::Status AllReduce(float* data, size_t count, ReduceOp) override {
    MutexLock lock(&mutex_);
    if (!fail_with_.ok()) return fail_with_;
    for (size_t i = 0; i < count; ++i) data[i] *= 2;
    reduced_.emplace_back(data, count);
    return absl::OkStatus();
  }
  absl::Status AllReduce(double*, size_t, ReduceOp) override { return absl::OkStatus(); }
  absl::Status AllGather(const float*, float*, size_t) override { return absl::OkStatus(); }
  absl::Status ReduceScatter(const float*, float*, size_t, ReduceOp) override {
    return absl::OkStatus();
  }
  absl::Status Broadcast(float*, size_t, int) override { return absl::OkStatus(); }
  absl::StatusOr<std::unique_ptr<PendingSend>> StartSend(const void*, size_t, int,
                                                         uint64_t) override {
    return absl::UnimplementedError("no p2p");
  }
  absl::Status Recv(void*, size_t, int, uint64_t) override {
    return absl::UnimplementedError("no p2p");
  }
  absl::Status Barrier() override { return absl::OkStatus(); }
  void Abort() override {}

  std::vector<std::pair<float*, size_t>> reduced() {
    MutexLock lock(&mutex_);
    return reduced_;
  }
  void FailWith(absl::Status s) {
    MutexLock lock(&mutex_);
    fail_with_ = std::move(s);
  }

 private:
  std::string name_ = "data-0 (ranks 0,1)";
  Mutex mutex_;  // AllReduce runs on the buckets' communication thread
  std::vector<std::pair<float*, size_t>> reduced_ ABSL_GUARDED_BY(mutex_);
  absl::Status fail_with_ ABSL_GUARDED_BY(mutex_);
};

std::vector<GradientRange> Tensors(const std::vector<size_t>& sizes) {
  std::vector<GradientRange> tensors;
  size_t offset = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    GradientRange t;
    t.offset = offset;
    t.size = sizes[i];
    offset += sizes[i];
    tensors.push_back(t);
  }
  return tensors;
}

TEST(GradientBucketsTest, BucketsTileTheBufferFromTheEndWithoutSplittingTensors) {
  const auto tensors = Tensors({4, 4, 10, 3, 3});  // [0,4) [4,8) [8,18) [18,21) [21,24)
  std::vector<float> grads(24, 1.0f);
  RecordingGroup group;
  GradientBuckets buckets(tensors, grads.data(), &group, 6);
  // From the end: t4+t3 = 6 -> bucket; t2 = 10 -> bucket; t1+t0 = 8 -> bucket.
  EXPECT_EQ(buckets.BucketRanges(),
            (std::vector<std::pair<size_t, size_t>>{{18, 24}, {8, 18}, {0, 8}}));
}

TEST(GradientBucketsTest, ABucketIsReducedAsSoonAsAllItsTensorsAreReady) {
  const auto tensors = Tensors({4, 4, 10, 3, 3});
  std::vector<float> grads(24, 1.0f);
  RecordingGroup group;
  GradientBuckets buckets(tensors, grads.data(), &group, 6);
  buckets.StartStep();
  buckets.MarkReady(tensors[4].offset);
  buckets.MarkReady(tensors[3].offset);
  buckets.MarkReady(tensors[3].offset);  // reported twice: counted once
  buckets.MarkReady(tensors[2].offset);
  ASSERT_TRUE(buckets.Finish().ok());
  EXPECT_EQ(buckets.buckets_launched_early(), 2);
  // Every element reduced exactly once, the last bucket only at Finish.
  for (float g : grads) EXPECT_EQ(g, 2.0f);
  const auto reduced = group.reduced();
  ASSERT_EQ(reduced.size(), 3u);
  EXPECT_EQ(reduced[0].first, grads.data() + 18);
  EXPECT_EQ(reduced[1].first, grads.data() + 8);
  EXPECT_EQ(reduced[2].first, grads.data() + 0);
  // A second step starts afresh.
  buckets.StartStep();
  ASSERT_TRUE(buckets.Finish().ok());
  for (float g : grads) EXPECT_EQ(g, 4.0f);
}

// ZeRO-1 on a real Gloo group of two: each replica ends with the sum in its own shard
// (and only there), having sent half the bytes an all-reduce would.
TEST(GradientBucketsTest, ZeroOneReduceScattersEachReplicasShard) {
  const auto tensors = Tensors({4, 4, 10, 3, 3});  // 24 elements; t2 straddles the shards
  const std::string dir = absl::StrCat(::testing::TempDir(), "/zero-store");
  absl::StatusOr<std::unique_ptr<DirectoryStore>> store = DirectoryStore::Open(dir);
  ASSERT_TRUE(store.ok()) << store.status();
  std::vector<std::thread> threads;
  for (int rank = 0; rank < 2; ++rank) {
    threads.emplace_back([&, rank] {
      absl::StatusOr<GlooDevice> device = CreateGlooDevice("127.0.0.1");
      ASSERT_TRUE(device.ok()) << device.status();
      GroupSpec spec;
      spec.name = "zero";
      spec.members = {0, 1};
      spec.global_rank = rank;
      spec.timeout = absl::Seconds(30);
      absl::StatusOr<std::unique_ptr<Communicator>> group =
          ConnectGlooGroup(**store, *device, spec);
      ASSERT_TRUE(group.ok()) << group.status();
      CountingCommunicator counted(std::move(*group));
      std::vector<float> grads(24);
      for (size_t i = 0; i < grads.size(); ++i) grads[i] = static_cast<float>((rank + 1) * i);
      GradientBuckets buckets(tensors, grads.data(), &counted, /*bucket_elements=*/4,
                              /*shard_size=*/12);
      buckets.StartStep();
      // The backward's order; the first shard's tensors come last.
      for (int t = 4; t >= 0; --t) buckets.MarkReady(tensors[t].offset);
      ASSERT_TRUE(buckets.Finish().ok());
      EXPECT_GT(buckets.buckets_launched_early(), 0);
      for (size_t i = 0; i < grads.size(); ++i) {
        const bool mine = i / 12 == static_cast<size_t>(rank);
        EXPECT_EQ(grads[i], mine ? 3.0f * i : static_cast<float>((rank + 1) * i))
            << "rank " << rank << ", element " << i;
      }
      // A reduce-scatter of the 24 elements: (2-1)/2 of them, half of an all-reduce's 96.
      EXPECT_EQ(counted.bytes_sent(), 48);
    });
  }
  for (std::thread& thread : threads) thread.join();
}

TEST(GradientBucketsTest, ACommunicationErrorReachesFinish) {
  const auto tensors = Tensors({5, 5});
  std::vector<float> grads(10, 1.0f);
  RecordingGroup group;
  group.FailWith(absl::DeadlineExceededError("all-reduce in data-0 timed out"));
  GradientBuckets buckets(tensors, grads.data(), &group, 5);
  buckets.StartStep();
  buckets.MarkReady(tensors[1].offset);
  const absl::Status status = buckets.Finish();
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(status.message().find("data-0"), absl::string_view::npos);
}

TEST(GradientBucketsTest, AGroupOfOneCommunicatesNothing) {
  const auto tensors = Tensors({5});
  std::vector<float> grads(5, 1.0f);
  GradientBuckets buckets(tensors, grads.data(), nullptr, 5);
  buckets.StartStep();
  ASSERT_TRUE(buckets.Finish().ok());
  for (float g : grads) EXPECT_EQ(g, 1.0f);
}

}  // namespace
}  // namespace mtrain
