#include "kernels/cuda_device_query.h"

#include <cstdio>

#include "gtest/gtest.h"

namespace mtrain {
namespace {

// Runs everywhere: without a GPU the query must fail cleanly (UNAVAILABLE, with CUDA's
// reason), never crash; with one, every device must be described and pass the kernel
// self-test.
TEST(CudaDeviceQueryTest, ReportsDevicesOrCleanUnavailability) {
  absl::StatusOr<std::vector<CudaDeviceInfo>> devices = QueryCudaDevices();
  if (!devices.ok()) {
    EXPECT_EQ(devices.status().code(), absl::StatusCode::kUnavailable);
    EXPECT_NE(devices.status().message().find("no CUDA device"), absl::string_view::npos);
    std::printf("SKIPPED GPU part: %s\n", std::string(devices.status().message()).c_str());
    GTEST_SKIP() << "no GPU here: " << devices.status();
  }
  ASSERT_FALSE(devices->empty());
  for (const CudaDeviceInfo& device : *devices) {
    EXPECT_FALSE(device.name.empty());
    EXPECT_GT(device.total_memory_bytes, 0);
    EXPECT_GE(device.compute_capability_major, 7);
    EXPECT_TRUE(RunCudaSelfTest(device.index).ok()) << RunCudaSelfTest(device.index);
  }
}

}  // namespace
}  // namespace mtrain
