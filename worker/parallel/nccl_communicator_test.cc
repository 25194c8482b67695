// Runs on the GPU machine (tag "gpu"); elsewhere it skips visibly. NCCL 2.28 refuses two
// members on one GPU, so the GPU checks use groups of one member (which still go through
// NCCL's communicator, stream and polling) and the error paths.
#include "worker/parallel/nccl_communicator.h"

#include <cuda_runtime.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "worker/parallel/key_value_store.h"

namespace mtrain {
namespace {

// Empty when a GPU is usable, otherwise why not.
std::string NoGpuReason() {
  int count = 0;
  const cudaError_t error = cudaGetDeviceCount(&count);
  if (error != cudaSuccess) {
    cudaGetLastError();
    return std::string(cudaGetErrorName(error)) + ": " + cudaGetErrorString(error);
  }
  return count == 0 ? "the driver reports 0 devices" : "";
}

#define SKIP_WITHOUT_GPU()                                           \
  do {                                                               \
    const std::string reason = NoGpuReason();                        \
    if (!reason.empty()) {                                           \
      std::printf("SKIPPED GPU part: no GPU: %s\n", reason.c_str()); \
      GTEST_SKIP() << "no GPU: " << reason;                          \
    }                                                                \
  } while (0)

class NcclCommunicatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SKIP_WITHOUT_GPU();
    const char* root = std::getenv("TEST_TMPDIR");
    const std::string directory = absl::StrCat(
        root != nullptr ? root : "/tmp", "/nccl-",
        ::testing::UnitTest::GetInstance()->current_test_info()->name(), "-", ::getpid());
    absl::StatusOr<std::unique_ptr<DirectoryStore>> store = DirectoryStore::Open(directory);
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = std::move(*store);
    GroupSpec spec;
    spec.name = "solo";
    spec.members = {3};
    spec.global_rank = 3;
    spec.timeout = absl::Seconds(30);
    absl::StatusOr<std::unique_ptr<Communicator>> group = ConnectNcclGroup(*store_, spec, 0);
    ASSERT_TRUE(group.ok()) << group.status();
    group_ = std::move(*group);
  }

  void TearDown() override {
    for (void* pointer : allocations_) cudaFree(pointer);
  }

  template <typename T>
  T* ToDevice(const std::vector<T>& host) {
    void* device = nullptr;
    EXPECT_EQ(cudaMalloc(&device, host.size() * sizeof(T) + 1), cudaSuccess);
    allocations_.push_back(device);
    EXPECT_EQ(cudaMemcpy(device, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice),
              cudaSuccess);
    return static_cast<T*>(device);
  }

  template <typename T>
  std::vector<T> ToHost(const T* device, size_t count) {
    std::vector<T> host(count);
    EXPECT_EQ(cudaMemcpy(host.data(), device, count * sizeof(T), cudaMemcpyDeviceToHost),
              cudaSuccess);
    return host;
  }

  std::unique_ptr<DirectoryStore> store_;
  std::unique_ptr<Communicator> group_;
  std::vector<void*> allocations_;
};

TEST_F(NcclCommunicatorTest, GroupOfOneCollectivesOnDeviceMemory) {
  EXPECT_EQ(group_->size(), 1);
  EXPECT_EQ(group_->rank(), 0);
  EXPECT_NE(group_->name().find("solo"), std::string::npos);

  std::vector<float> values = {1.5f, -2.0f, 3.25f, 1e30f};
  float* data = ToDevice(values);
  ASSERT_TRUE(group_->AllReduce(data, values.size(), ReduceOp::kSum).ok());
  EXPECT_EQ(ToHost(data, values.size()), values);
  ASSERT_TRUE(group_->AllReduce(data, values.size(), ReduceOp::kMax).ok());
  EXPECT_EQ(ToHost(data, values.size()), values);

  std::vector<double> doubles = {0.1, 0.2, -0.3};
  double* ddata = ToDevice(doubles);
  ASSERT_TRUE(group_->AllReduce(ddata, doubles.size(), ReduceOp::kSum).ok());
  EXPECT_EQ(ToHost(ddata, doubles.size()), doubles);

  float* gathered = ToDevice(std::vector<float>(values.size(), 0.0f));
  ASSERT_TRUE(group_->AllGather(data, gathered, values.size()).ok());
  EXPECT_EQ(ToHost(gathered, values.size()), values);

  float* scattered = ToDevice(std::vector<float>(values.size(), 0.0f));
  ASSERT_TRUE(group_->ReduceScatter(data, scattered, values.size(), ReduceOp::kSum).ok());
  EXPECT_EQ(ToHost(scattered, values.size()), values);

  std::vector<float> big(1 << 22);
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<float>(i % 1000);
  float* big_data = ToDevice(big);
  ASSERT_TRUE(group_->Broadcast(big_data, big.size(), 0).ok());
  EXPECT_EQ(ToHost(big_data, big.size()), big);
  ASSERT_TRUE(group_->AllReduce(big_data, big.size(), ReduceOp::kSum).ok());
  EXPECT_EQ(ToHost(big_data, big.size()), big);

  ASSERT_TRUE(group_->Barrier().ok());
  EXPECT_EQ(group_->Broadcast(data, 1, 1).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(group_->Recv(data, 4, 0, 0).code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(NcclCommunicatorTest, AbortFailsLaterOperations) {
  group_->Abort();
  float* data = ToDevice(std::vector<float>{1.0f});
  const absl::Status status = group_->AllReduce(data, 1, ReduceOp::kSum);
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition) << status;
  EXPECT_NE(status.message().find("aborted"), absl::string_view::npos) << status;
  EXPECT_EQ(group_->Barrier().code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(NcclCommunicatorTest, RendezvousTimesOutWhenRankZeroNeverPublishes) {
  GroupSpec spec;
  spec.name = "pair";
  spec.members = {0, 1};
  spec.global_rank = 1;
  spec.timeout = absl::Milliseconds(300);
  const absl::StatusOr<std::unique_ptr<Communicator>> group = ConnectNcclGroup(*store_, spec, 0);
  EXPECT_EQ(group.status().code(), absl::StatusCode::kDeadlineExceeded) << group.status();
  EXPECT_NE(group.status().message().find("pair/nccl-id"), absl::string_view::npos);
}

}  // namespace
}  // namespace mtrain

namespace mtrain {
namespace {

// Groups split off the world communicator (ncclCommSplit) work like bootstrapped ones;
// a member that joins no group gets none.
TEST_F(NcclCommunicatorTest, GroupsSplitOffTheWorld) {
  GroupSpec spec;
  spec.name = "data-0";
  spec.members = {3};
  spec.global_rank = 3;
  spec.timeout = absl::Seconds(30);
  absl::StatusOr<std::unique_ptr<Communicator>> data = SplitNcclGroup(*store_, *group_, &spec, 0);
  ASSERT_TRUE(data.ok()) << data.status();
  ASSERT_NE(*data, nullptr);
  EXPECT_EQ((*data)->size(), 1);
  EXPECT_NE((*data)->name().find("data-0"), std::string::npos);
  std::vector<float> values = {1.0f, 2.5f};
  float* device = ToDevice(values);
  ASSERT_TRUE((*data)->AllReduce(device, values.size(), ReduceOp::kSum).ok());
  EXPECT_EQ(ToHost(device, values.size()), values);

  absl::StatusOr<std::unique_ptr<Communicator>> none = SplitNcclGroup(*store_, *group_, nullptr, 0);
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_EQ(*none, nullptr);
  // The world still works after the splits.
  ASSERT_TRUE(group_->AllReduce(device, values.size(), ReduceOp::kSum).ok());
}

}  // namespace
}  // namespace mtrain
