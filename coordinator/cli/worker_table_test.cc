#include "coordinator/cli/worker_table.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace mtrain {
namespace {

using ::testing::HasSubstr;

TEST(WorkerTableTest, FormatsBytesInBinaryUnits) {
  EXPECT_EQ(FormatBytes(512), "512 B");
  EXPECT_EQ(FormatBytes(1536), "1.5 KiB");
  EXPECT_EQ(FormatBytes(80LL << 30), "80.0 GiB");
}

TEST(WorkerTableTest, OneLinePerWorkerWithStateAndDevice) {
  ListWorkersResponse response;
  WorkerStatus* gpu = response.add_workers();
  gpu->mutable_worker()->set_worker_id("gpu-0");
  gpu->mutable_worker()->set_device_kind(DEVICE_KIND_CUDA);
  gpu->mutable_worker()->set_device_count(1);
  gpu->mutable_worker()->set_device_name("NVIDIA H100");
  gpu->set_alive(true);
  gpu->set_state(WORKER_STATE_BUSY);
  gpu->set_job_id("job-7");
  WorkerStatus* cpu = response.add_workers();
  cpu->mutable_worker()->set_worker_id("cpu-0");
  cpu->set_alive(false);
  cpu->set_last_seen_ms_ago(12500);
  const std::string table = FormatWorkerTable(response);
  EXPECT_EQ(std::count(table.begin(), table.end(), '\n'), 3);
  EXPECT_THAT(table, HasSubstr("cuda x1 NVIDIA H100"));
  EXPECT_THAT(table, HasSubstr("busy job-7"));
  EXPECT_THAT(table, HasSubstr("dead"));
  EXPECT_THAT(table, HasSubstr("12.5s ago"));
}

TEST(WorkerTableTest, WideAddsTheMeasuredProfile) {
  ListWorkersResponse response;
  WorkerStatus* measured = response.add_workers();
  measured->mutable_worker()->set_worker_id("cpu-0");
  DeviceProfile* profile = measured->mutable_worker()->mutable_profile();
  profile->set_fp32_flops(196.4e9);
  profile->set_matmul_efficiency(0.75);
  profile->set_matmul_half_size(21);
  profile->set_memory_bandwidth_bytes_per_second(22.3e9);
  profile->set_gemm_library("OpenBLAS 0.3.21");
  profile->set_gemm_kernel("SkylakeX");
  profile->set_isa("avx512_bf16");
  response.add_workers()->mutable_worker()->set_worker_id("cpu-1");  // did not measure
  const std::string narrow = FormatWorkerTable(response);
  EXPECT_THAT(narrow, ::testing::Not(HasSubstr("GEMM GF/S")));
  const std::string wide = FormatWorkerTable(response, /*wide=*/true);
  EXPECT_THAT(wide, HasSubstr("PEAK GF/S"));
  EXPECT_THAT(wide, HasSubstr("GEMM GF/S"));
  EXPECT_THAT(wide, HasSubstr("196.4"));  // the peak
  EXPECT_THAT(wide, HasSubstr("147.3"));  // what the GEMM reaches: 75% of it
  EXPECT_THAT(wide, HasSubstr("22.3"));
  EXPECT_THAT(wide, HasSubstr("OpenBLAS 0.3.21 SkylakeX avx512_bf16"));
  EXPECT_EQ(std::count(wide.begin(), wide.end(), '\n'), 3);
  EXPECT_THAT(wide, HasSubstr("        -         -      -         -  -"));
}

}  // namespace
}  // namespace mtrain
