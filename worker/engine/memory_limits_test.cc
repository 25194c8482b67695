#include "worker/engine/memory_limits.h"

#include "gtest/gtest.h"

namespace mtrain {
namespace {

TEST(MemoryLimitsTest, ThisMachineHasPhysicalMemory) {
  EXPECT_GT(CurrentMemoryLimits().physical_bytes, uint64_t{1} << 20);
}

TEST(MemoryLimitsTest, FitsUnderBothLimits) {
  MemoryLimits limits;
  limits.physical_bytes = uint64_t{8} << 30;
  EXPECT_TRUE(CheckMemoryFits("rank 0", 1e9, "", limits).ok());
  limits.address_space_left_bytes = uint64_t{2} << 30;
  EXPECT_TRUE(CheckMemoryFits("rank 0", 1e9, "", limits).ok());
}

TEST(MemoryLimitsTest, RefusalNamesTheNeedAndEachLimitExceeded) {
  MemoryLimits limits;
  limits.physical_bytes = uint64_t{8} << 30;
  limits.address_space_left_bytes = uint64_t{1} << 30;
  absl::Status status =
      CheckMemoryFits("rank 3 of job j", 4.0 * (uint64_t{1} << 30), "parameters 4 GiB", limits);
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(status.message().find("rank 3 of job j needs about 4.00 GiB (parameters 4 GiB)"),
            absl::string_view::npos)
      << status;
  EXPECT_NE(status.message().find("RLIMIT_AS (ulimit -v) leaves 1.00 GiB"), absl::string_view::npos)
      << status;
  EXPECT_EQ(status.message().find("physical"), absl::string_view::npos) << status;

  status = CheckMemoryFits("rank 0", 1e30, "", limits);
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(status.message().find("this machine has 8.00 GiB of physical memory and RLIMIT_AS"),
            absl::string_view::npos)
      << status;
}

TEST(MemoryLimitsTest, HumanBytes) {
  EXPECT_EQ(HumanBytes(12), "12 bytes");
  EXPECT_EQ(HumanBytes(1536), "1.50 KiB");
  EXPECT_EQ(HumanBytes(100.0 * (1 << 20)), "100.0 MiB");
}

}  // namespace
}  // namespace mtrain
