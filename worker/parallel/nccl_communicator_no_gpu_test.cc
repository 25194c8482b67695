// Runs everywhere: where there is no CUDA device, ConnectNcclGroup must fail with a clean
// status, never crash; where there is one, it must succeed.
#include <cuda_runtime.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "gtest/gtest.h"
#include "worker/parallel/key_value_store.h"
#include "worker/parallel/nccl_communicator.h"
#include "worker/parallel/solo_communicator.h"

namespace mtrain {
namespace {

bool HaveGpu() {
  int count = 0;
  const cudaError_t error = cudaGetDeviceCount(&count);
  if (error != cudaSuccess) cudaGetLastError();
  return error == cudaSuccess && count > 0;
}

std::unique_ptr<DirectoryStore> OpenStore(const std::string& name) {
  const char* root = std::getenv("TEST_TMPDIR");
  absl::StatusOr<std::unique_ptr<DirectoryStore>> store = DirectoryStore::Open(
      std::string(root != nullptr ? root : "/tmp") + "/" + name + "-" + std::to_string(::getpid()));
  EXPECT_TRUE(store.ok()) << store.status();
  return store.ok() ? std::move(*store) : nullptr;
}

TEST(NcclWithoutGpuTest, ConnectFailsCleanlyOrWorks) {
  std::unique_ptr<DirectoryStore> store = OpenStore("nccl-no-gpu");
  ASSERT_NE(store, nullptr);
  GroupSpec spec;
  spec.name = "solo";
  spec.members = {0};
  spec.global_rank = 0;
  spec.timeout = absl::Seconds(10);
  absl::StatusOr<std::unique_ptr<Communicator>> group = ConnectNcclGroup(*store, spec, 0);
  if (HaveGpu()) {
    EXPECT_TRUE(group.ok()) << group.status();
    return;
  }
  std::printf("no GPU: ConnectNcclGroup said %s\n", group.status().ToString().c_str());
  ASSERT_FALSE(group.ok());
  EXPECT_EQ(group.status().code(), absl::StatusCode::kUnavailable) << group.status();
  EXPECT_NE(group.status().message().find("no CUDA device"), absl::string_view::npos)
      << group.status();
  EXPECT_NE(group.status().message().find("solo"), absl::string_view::npos) << group.status();
  // Nothing was published: rank 0 failed before creating an NCCL id.
  EXPECT_EQ(store->Get("solo/nccl-id").status().code(), absl::StatusCode::kNotFound);
  // A second attempt fails the same way (no poisoned CUDA state, no crash).
  EXPECT_EQ(ConnectNcclGroup(*store, spec, 0).status().code(), absl::StatusCode::kUnavailable);
}

TEST(NcclWithoutGpuTest, BadSpecIsRejectedBeforeTouchingCuda) {
  std::unique_ptr<DirectoryStore> store = OpenStore("nccl-bad-spec");
  ASSERT_NE(store, nullptr);
  GroupSpec spec;
  spec.name = "bad";
  spec.members = {0, 1};
  spec.global_rank = 7;
  EXPECT_EQ(ConnectNcclGroup(*store, spec, 0).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace mtrain

namespace mtrain {
namespace {

// Splitting needs an NCCL world: anything else is refused with a status, no GPU needed.
TEST(NcclWithoutGpuTest, SplitRefusesANonNcclWorld) {
  std::unique_ptr<DirectoryStore> store = OpenStore("split");
  ASSERT_NE(store, nullptr);
  std::unique_ptr<Communicator> solo = MakeSoloCommunicator("world (rank 0)");
  GroupSpec spec;
  spec.name = "data-0";
  spec.members = {0};
  spec.global_rank = 0;
  absl::StatusOr<std::unique_ptr<Communicator>> split = SplitNcclGroup(*store, *solo, &spec, 0);
  EXPECT_EQ(split.status().code(), absl::StatusCode::kInvalidArgument) << split.status();
  EXPECT_NE(split.status().message().find("not an NCCL communicator"), std::string::npos);
}

}  // namespace
}  // namespace mtrain
