#include "worker/engine/cuda/cuda_device_probe.h"

#include "gtest/gtest.h"
#include "kernels/cuda/test_support.h"

namespace mtrain::cuda {
namespace {

// The probe measures a real device: its rates are positive and within what any GPU this
// project targets can do (an fp32 rate above the bf16 tensor-core rate, or either above 5
// PFLOP/s, would be a timing bug), and the small cube is no faster than the large one.
TEST(CudaDeviceProbeTest, MeasuresRatesBandwidthAndMemory) {
  MTRAIN_SKIP_WITHOUT_GPU();
  absl::StatusOr<CudaDeviceMeasurement> m = MeasureCudaDevice(0, {.seconds_per_measurement = 0.02});
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_FALSE(m->name.empty());
  EXPECT_GT(m->total_memory_bytes, int64_t{1} << 30);
  EXPECT_GT(m->free_memory_bytes, 0);
  EXPECT_LE(m->free_memory_bytes, m->total_memory_bytes);
  EXPECT_GT(m->fp32_flops, 1e11);
  EXPECT_GT(m->bf16_flops, m->fp32_flops);
  EXPECT_LT(m->bf16_flops, 5e15);
  EXPECT_GT(m->bf16_small_flops, 0);
  EXPECT_LT(m->bf16_small_flops, m->bf16_flops);
  EXPECT_GT(m->copy_bytes_per_second, 1e11);
  std::printf("%s: fp32 %.1f TFLOP/s, bf16 %.1f (256^3: %.1f), copy %.0f GB/s, %.1f GiB free\n",
              m->name.c_str(), m->fp32_flops / 1e12, m->bf16_flops / 1e12,
              m->bf16_small_flops / 1e12, m->copy_bytes_per_second / 1e9,
              m->free_memory_bytes / double(1 << 30));
}

TEST(CudaDeviceProbeTest, AnAbsentDeviceIsAFailedPrecondition) {
  absl::StatusOr<CudaDeviceMeasurement> m = MeasureCudaDevice(1000, {});
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), absl::StatusCode::kFailedPrecondition) << m.status();
}

}  // namespace
}  // namespace mtrain::cuda
