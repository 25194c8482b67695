#include "worker/device_probe.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <string>

#include "gmock/gmock.h"
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
  // fp32_flops is the peak of the one core used, from its parts; the GEMM reaches a
  // fraction of it.
  EXPECT_EQ(profile.threads(), 1);
  EXPECT_GE(profile.cores(), 1);
  EXPECT_GE(profile.flops_per_cycle(), 8);
  EXPECT_NEAR(profile.fp32_flops(), profile.flops_per_cycle() * profile.clock_hz(),
              1e-6 * profile.fp32_flops());
  EXPECT_GT(profile.matmul_efficiency(), 0.0);
  EXPECT_LE(profile.matmul_efficiency(), 1.0);
  // What the matrix multiplies run on, named.
  EXPECT_FALSE(profile.processor().empty());
  EXPECT_FALSE(profile.isa().empty());
  // OpenBLAS, or oneDNN on processors with AVX-512 (kernels/cpu_gemm_library.h).
  EXPECT_THAT(profile.gemm_library(), ::testing::AnyOf(::testing::StartsWith("OpenBLAS "),
                                                       ::testing::StartsWith("oneDNN ")));
  EXPECT_FALSE(profile.gemm_kernel().empty());
  EXPECT_GE(profile.matmul_half_size(), 0);
  EXPECT_TRUE(std::isfinite(profile.matmul_half_size()));
  EXPECT_GT(profile.memory_bandwidth_bytes_per_second(), 1e8);
  EXPECT_NE(profile.name().find("measured"), std::string::npos);
}

// Probes on one host take turns: while another process holds the lock, a probe waits (up
// to its bound, then measures anyway); a free lock costs nothing.
TEST(DeviceProbeTest, ProbesOfOneHostTakeTurns) {
  const char* dir = std::getenv("TEST_TMPDIR");
  const std::string path = std::string(dir != nullptr ? dir : "/tmp") + "/probe.lock";
  const int held = ::open(path.c_str(), O_RDWR | O_CREAT, 0666);
  ASSERT_GE(held, 0);
  ASSERT_EQ(::flock(held, LOCK_EX), 0);
  // flock locks belong to open files: the probe's own open() of the path contends.
  const auto start = std::chrono::steady_clock::now();
  const DeviceProfile waited = ProbeCpu(
      {.threads = 1, .seconds_per_measurement = 0.01, .lock_file = path, .lock_wait_seconds = 0.4});
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_GE(seconds, 0.4) << "the probe did not wait for the host's lock";
  EXPECT_GT(waited.fp32_flops(), 0) << "after the wait it measures anyway";
  ::close(held);
  const auto free_start = std::chrono::steady_clock::now();
  ProbeCpu(
      {.threads = 1, .seconds_per_measurement = 0.01, .lock_file = path, .lock_wait_seconds = 30});
  // Waiting for it would take the whole 30 s bound.
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - free_start).count(),
            10)
      << "a free lock is taken at once";
}

// A stand-in for `train --measure_cuda_device` (a shell script): the logic of running it
// and reading its profile, on machines without a GPU.
std::string FakeRankBinary(const std::string& name, const std::string& body) {
  const char* dir = std::getenv("TEST_TMPDIR");
  const std::string path = std::string(dir != nullptr ? dir : "/tmp") + "/" + name;
  std::ofstream(path) << "#!/bin/sh\n" << body << "\n";
  ::chmod(path.c_str(), 0755);
  return path;
}

TEST(DeviceProbeTest, ReadsTheProfileTheRankBinaryPrints) {
  const std::string train = FakeRankBinary(
      "prints-profile", R"(test "$1" = "--measure_cuda_device=0" || exit 3
echo "cuBLAS warming up"
echo '{"name":"NVIDIA H100","fp32Flops":5e13,"halfFlops":7e14,"matmulEfficiency":1,)"
                        R"("matmulHalfSize":96,"memoryBandwidthBytesPerSecond":3e12,)"
                        R"("memoryBytes":"80000000000"}')");
  absl::StatusOr<DeviceProfile> profile = MeasureCudaWithRankBinary(train, 0);
  ASSERT_TRUE(profile.ok()) << profile.status();
  EXPECT_EQ(profile->name(), "NVIDIA H100");
  EXPECT_EQ(profile->half_flops(), 7e14);
  EXPECT_EQ(profile->matmul_half_size(), 96);
  EXPECT_EQ(profile->memory_bytes(), 80000000000);
}

TEST(DeviceProbeTest, ARankBinaryThatFailsOrPrintsNoProfileIsAnError) {
  absl::StatusOr<DeviceProfile> failed = MeasureCudaWithRankBinary(
      FakeRankBinary("fails", "echo 'no CUDA device 0 (0 visible)' >&2; exit 1"), 0);
  EXPECT_EQ(failed.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(failed.status().message()),
              ::testing::HasSubstr("no CUDA device 0 (0 visible)"));
  absl::StatusOr<DeviceProfile> garbage =
      MeasureCudaWithRankBinary(FakeRankBinary("garbage", "echo 'not json'"), 0);
  EXPECT_EQ(garbage.status().code(), absl::StatusCode::kInternal);
  absl::StatusOr<DeviceProfile> zero = MeasureCudaWithRankBinary(
      FakeRankBinary("zero", R"(echo '{"name": "x", "fp32Flops": 0}')"), 0);
  EXPECT_EQ(zero.status().code(), absl::StatusCode::kInternal);
  EXPECT_THAT(std::string(zero.status().message()), ::testing::HasSubstr("positive rates"));
  absl::StatusOr<DeviceProfile> missing = MeasureCudaWithRankBinary("/nonexistent/train", 0);
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(missing.status().message()), ::testing::HasSubstr("cannot run"));
}

}  // namespace
}  // namespace mtrain
