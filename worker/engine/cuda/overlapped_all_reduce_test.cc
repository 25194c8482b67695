// The overlapped all-reduce on the GPU (tagged `gpu`; skipped, visibly, without one), with
// a recording group in place of NCCL: ranges are reduced in the order they were queued,
// each only after the work queued before it on the stream, and the first failure is
// reported by Finish while the ranges after it are skipped. A host group (Gloo's kind)
// gets the ranges staged through host memory and its results copied back; ranges with a
// root (ZeRO-1) are reduced into that member.
#include "worker/engine/cuda/overlapped_all_reduce.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cuda/test_support.h"

namespace mtrain::cuda {
namespace {

// Records what each AllReduce saw in device memory; fails the call numbered `fail_at`.
class RecordingGroup : public Communicator {
 public:
  explicit RecordingGroup(int fail_at = -1) : fail_at_(fail_at) {}
  int rank() const override { return 0; }
  int size() const override { return 2; }
  const std::string& name() const override { return name_; }
  absl::Status AllReduce(float* data, size_t count, ReduceOp op) override {
    std::vector<float> seen(count);
    cudaMemcpy(seen.data(), data, count * sizeof(float), cudaMemcpyDeviceToHost);
    calls.push_back(seen);
    if (static_cast<int>(calls.size()) - 1 == fail_at_) {
      return absl::UnavailableError("peer gone");
    }
    return absl::OkStatus();
  }
  absl::Status AllReduce(double*, size_t, ReduceOp) override { return Unused(); }
  absl::Status AllGather(const float*, float*, size_t) override { return Unused(); }
  absl::Status ReduceScatter(const float*, float*, size_t, ReduceOp) override { return Unused(); }
  absl::Status Broadcast(float*, size_t, int) override { return Unused(); }
  absl::StatusOr<std::unique_ptr<PendingSend>> StartSend(const void*, size_t, int,
                                                         uint64_t) override {
    return Unused();
  }
  absl::Status Recv(void*, size_t, int, uint64_t) override { return Unused(); }
  absl::Status Barrier() override { return Unused(); }
  void Abort() override {}

  std::vector<std::vector<float>> calls;

 private:
  static absl::Status Unused() { return absl::UnimplementedError("not used by the test"); }
  const int fail_at_;
  const std::string name_ = "recording";
};

TEST(OverlappedAllReduceTest, ReducesRangesInOrderOnceTheStreamHasProducedThem) {
  MTRAIN_SKIP_WITHOUT_GPU();
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  const size_t n = size_t{1} << 22;  // big enough that the copies take a while
  testing::DeviceArray<float> grads(n);
  RecordingGroup group;
  {
    OverlappedAllReduce reducer(&group, /*on_device=*/true, 0);
    for (int round = 0; round < 3; ++round) {
      std::vector<float> values(n, static_cast<float>(round + 1));
      ASSERT_EQ(cudaMemcpyAsync(grads.get(), values.data(), n * sizeof(float),
                                cudaMemcpyHostToDevice, stream),
                cudaSuccess);
      ASSERT_TRUE(reducer.Enqueue(stream, grads.get() + round, 4).ok());
      ASSERT_TRUE(reducer.Finish().ok());
    }
  }
  ASSERT_EQ(group.calls.size(), 3u);
  for (int round = 0; round < 3; ++round) {
    EXPECT_EQ(group.calls[round], std::vector<float>(4, static_cast<float>(round + 1)));
  }
  cudaStreamDestroy(stream);
}

TEST(OverlappedAllReduceTest, FinishReportsTheFirstFailureAndSkipsTheRest) {
  MTRAIN_SKIP_WITHOUT_GPU();
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  testing::DeviceArray<float> grads(std::vector<float>(16, 1.0f));
  RecordingGroup group(/*fail_at=*/1);
  OverlappedAllReduce reducer(&group, /*on_device=*/true, 0);
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(reducer.Enqueue(stream, grads.get() + i * 4, 4).ok());
  const absl::Status status = reducer.Finish();
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable) << status;
  EXPECT_EQ(group.calls.size(), 2u);  // the failed call; the two after it were skipped
  cudaStreamDestroy(stream);
}

// A host group of two whose "other replica" holds the same values: AllReduce doubles the
// host buffer it is given.
class DoublingHostGroup : public RecordingGroup {
 public:
  absl::Status AllReduce(float* data, size_t count, ReduceOp op) override {
    for (size_t i = 0; i < count; ++i) data[i] *= 2.0f;
    ++reduced;
    return absl::OkStatus();
  }
  using RecordingGroup::AllReduce;
  int reduced = 0;
};

TEST(OverlappedAllReduceTest, StagesRangesThroughTheHostForAHostGroup) {
  MTRAIN_SKIP_WITHOUT_GPU();
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  const size_t n = size_t{1} << 20;
  std::vector<float> values(n);
  for (size_t i = 0; i < n; ++i) values[i] = static_cast<float>(i % 1000);
  testing::DeviceArray<float> grads(n);
  ASSERT_EQ(cudaMemcpyAsync(grads.get(), values.data(), n * sizeof(float), cudaMemcpyHostToDevice,
                            stream),
            cudaSuccess);
  DoublingHostGroup group;
  OverlappedAllReduce reducer(&group, /*on_device=*/false, 0);
  // Two ranges, a gap between them left alone.
  ASSERT_TRUE(reducer.Enqueue(stream, grads.get(), 1000).ok());
  ASSERT_TRUE(reducer.Enqueue(stream, grads.get() + 5000, n - 5000).ok());
  ASSERT_TRUE(reducer.Finish().ok());
  EXPECT_EQ(group.reduced, 2);
  const std::vector<float> after = grads.Download();
  for (size_t i = 0; i < n; ++i) {
    const float expected = (i < 1000 || i >= 5000) ? 2.0f * values[i] : values[i];
    ASSERT_EQ(after[i], expected) << "element " << i;
  }
  cudaStreamDestroy(stream);
}

// ZeRO-1: a range queued with a root is reduced into that member (Reduce, not AllReduce);
// through a host group only the root copies the result back (the others' data is left as
// it was: unspecified by Reduce, and nothing of use came back).
class ReduceRecordingHostGroup : public DoublingHostGroup {
 public:
  absl::Status Reduce(float* data, size_t count, ReduceOp op, int root) override {
    roots.push_back(root);
    return DoublingHostGroup::AllReduce(data, count, op);
  }
  std::vector<int> roots;
};

TEST(OverlappedAllReduceTest, RangesWithARootAreReducedIntoThatMember) {
  MTRAIN_SKIP_WITHOUT_GPU();
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  testing::DeviceArray<float> grads(std::vector<float>(12, 3.0f));
  ReduceRecordingHostGroup group;  // this member is rank 0
  OverlappedAllReduce reducer(&group, /*on_device=*/false, 0);
  ASSERT_TRUE(reducer.Enqueue(stream, grads.get(), 4, /*root=*/0).ok());
  ASSERT_TRUE(reducer.Enqueue(stream, grads.get() + 4, 4, /*root=*/1).ok());
  ASSERT_TRUE(reducer.Enqueue(stream, grads.get() + 8, 4).ok());  // all-reduced
  ASSERT_TRUE(reducer.Finish().ok());
  EXPECT_EQ(group.roots, (std::vector<int>{0, 1}));
  EXPECT_EQ(group.reduced, 3);
  const std::vector<float> after = grads.Download();
  for (int i = 0; i < 12; ++i) {
    EXPECT_EQ(after[i], i >= 4 && i < 8 ? 3.0f : 6.0f) << "element " << i;
  }
  cudaStreamDestroy(stream);
}

}  // namespace
}  // namespace mtrain::cuda
