#include "worker/device_probe.h"

#include <cmath>

#include "gtest/gtest.h"

namespace mtrain {
namespace {

TEST(DeviceProbeTest, HalfSizeInvertsTheEfficiencyCurve) {
  // With h = 32, a 64-cube runs at (64/96)^3 / (1024/1056)^3 of a 1024-cube's rate.
  const double h = 32;
  const double ratio = std::pow((64.0 / (64 + h)) / (1024.0 / (1024 + h)), 3);
  EXPECT_NEAR(MatmulHalfSize(64, 100 * ratio, 1024, 100), h, 1e-6);
  EXPECT_EQ(MatmulHalfSize(64, 120, 1024, 100), 0) << "a small cube that is not slower";
  EXPECT_EQ(MatmulHalfSize(64, 0, 1024, 100), 0);
}

TEST(DeviceProbeTest, MeasuresThisMachine) {
  const DeviceProfile profile = ProbeCpu({.threads = 1, .seconds_per_measurement = 0.02});
  // Any x86-64 core multiplies faster than 0.1 GFLOP/s and copies faster than 0.1 GB/s;
  // nothing here is faster than 100 TFLOP/s. The values must be finite and used as is.
  EXPECT_GT(profile.fp32_flops(), 1e8);
  EXPECT_LT(profile.fp32_flops(), 1e14);
  EXPECT_EQ(profile.matmul_efficiency(), 1.0);
  EXPECT_GE(profile.matmul_half_size(), 0);
  EXPECT_TRUE(std::isfinite(profile.matmul_half_size()));
  EXPECT_GT(profile.memory_bandwidth_bytes_per_second(), 1e8);
  EXPECT_NE(profile.name().find("measured"), std::string::npos);
}

}  // namespace
}  // namespace mtrain
