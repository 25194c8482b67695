#include "plan/cluster_description.h"

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace mtrain {
namespace {

std::string ReadFile(const std::string& path) {
  std::ifstream file(path);
  std::stringstream text;
  text << file.rdbuf();
  return text.str();
}

constexpr char kValid[] = R"({
  "name": "two", "nodes": 2, "devices_per_node": 4,
  "device": {"name": "gpu", "fp32_flops": 1e12, "half_flops": 0, "matmul_efficiency": 0.5,
             "matmul_half_size": 64, "memory_bandwidth_bytes_per_second": 1e11,
             "memory_bytes": "1000000000"},
  "intra_node": {"bandwidth_bytes_per_second": 1e10, "latency_seconds": 1e-6},
  "inter_node": {"bandwidth_bytes_per_second": 1e9, "latency_seconds": 1e-5}
})";

TEST(ClusterDescriptionTest, ParsesAValidDescription) {
  absl::StatusOr<ClusterDescription> cluster = ParseClusterDescription(kValid);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  EXPECT_EQ(cluster->nodes(), 2);
  EXPECT_EQ(cluster->device().memory_bytes(), 1000000000);
  EXPECT_DOUBLE_EQ(cluster->inter_node().latency_seconds(), 1e-5);
}

TEST(ClusterDescriptionTest, TheShippedDescriptionsParse) {
  for (const char* path : {"deploy/clusters/dgx_a100.json", "deploy/clusters/cpu_host.json"}) {
    const std::string text = ReadFile(path);
    ASSERT_FALSE(text.empty()) << path;
    absl::StatusOr<ClusterDescription> cluster = ParseClusterDescription(text);
    EXPECT_TRUE(cluster.ok()) << path << ": " << cluster.status();
    EXPECT_FALSE(cluster->source().empty()) << path << " must say where its numbers come from";
  }
}

TEST(ClusterDescriptionTest, RefusalsNameTheFieldAndTheRule) {
  struct Case {
    std::string from, to, field;
  };
  for (const Case& c : std::initializer_list<Case>{
           {"\"nodes\": 2", "\"nodes\": 0", "nodes must be > 0"},
           {"\"matmul_efficiency\": 0.5", "\"matmul_efficiency\": 1.5",
            "device.matmul_efficiency must be in (0, 1]"},
           {"\"fp32_flops\": 1e12", "\"fp32_flops\": -1", "device.fp32_flops must be a positive"},
           {"\"bandwidth_bytes_per_second\": 1e9", "\"bandwidth_bytes_per_second\": 0",
            "inter_node.bandwidth_bytes_per_second"},
           {"\"latency_seconds\": 1e-6", "\"latency_seconds\": -1", "intra_node.latency_seconds"},
           {"\"name\": \"two\"", "\"name\": \"two\", \"gpus\": 3", "ClusterDescription"},
       }) {
    std::string json = kValid;
    const size_t at = json.find(c.from);
    ASSERT_NE(at, std::string::npos) << c.from;
    json.replace(at, c.from.size(), c.to);
    absl::StatusOr<ClusterDescription> cluster = ParseClusterDescription(json);
    ASSERT_FALSE(cluster.ok()) << c.to;
    EXPECT_EQ(cluster.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(cluster.status().message().find(c.field), std::string::npos) << cluster.status();
  }
  EXPECT_FALSE(ParseClusterDescription("{not json").ok());
}

TEST(ClusterDescriptionTest, SingleNodeClusterHoldsTheDevices) {
  DeviceProfile device;
  device.set_name("cpu");
  LinkProfile link;
  link.set_bandwidth_bytes_per_second(1e9);
  const ClusterDescription cluster = SingleNodeCluster(device, link, 4);
  EXPECT_EQ(cluster.nodes(), 1);
  EXPECT_EQ(cluster.devices_per_node(), 4);
  EXPECT_EQ(cluster.device().name(), "cpu");
}

TEST(ClusterDescriptionTest, CpuCoresPerRankIsTheThreadsUpToAnEqualShareOfTheHost) {
  EXPECT_DOUBLE_EQ(CpuCoresPerRank(2, 2, 1), 2);    // one rank on all cores
  EXPECT_DOUBLE_EQ(CpuCoresPerRank(2, 0, 1), 2);    // 0 threads: every core
  EXPECT_DOUBLE_EQ(CpuCoresPerRank(2, 2, 4), 0.5);  // four ranks time-share two cores
  EXPECT_DOUBLE_EQ(CpuCoresPerRank(16, 1, 2), 1);   // two single-threaded ranks use two
  EXPECT_DOUBLE_EQ(CpuCoresPerRank(2, 8, 1), 2);    // more threads than cores
}

// The issue-32 case: four CPU workers on one 2-core host, each measured with all its
// cores. Each rank owns half a core, so the planner's peak (and MFU) counts the host once.
TEST(ClusterDescriptionTest, CpuWorkersOnOneHostShareItsCores) {
  DeviceProfile measured;
  measured.set_name("cpu (2 threads of 2 cores, measured)");
  measured.set_fp32_flops(2 * 96e9);
  measured.set_matmul_efficiency(0.7);
  measured.set_memory_bandwidth_bytes_per_second(20e9);
  measured.set_memory_bytes(int64_t{24} << 30);
  measured.set_cores(2);
  measured.set_threads(2);
  std::vector<PlannedWorker> workers(4, PlannedWorker{"10.0.0.1", measured});
  absl::StatusOr<ClusterDescription> cluster = ClusterFromWorkers(workers);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  EXPECT_EQ(cluster->nodes(), 1);
  EXPECT_EQ(cluster->devices_per_node(), 4);
  EXPECT_DOUBLE_EQ(cluster->device().fp32_flops(), 0.5 * 96e9);
  EXPECT_DOUBLE_EQ(cluster->device().matmul_efficiency(), 0.7);
  EXPECT_DOUBLE_EQ(cluster->device().memory_bandwidth_bytes_per_second(), 5e9);
  EXPECT_EQ(cluster->device().memory_bytes(), int64_t{6} << 30);

  // One worker alone keeps its whole profile; profiles without cores (hand-written, GPUs)
  // are used as they are.
  workers.resize(1);
  EXPECT_DOUBLE_EQ(ClusterFromWorkers(workers)->device().fp32_flops(), 2 * 96e9);
  DeviceProfile gpu;
  gpu.set_fp32_flops(50e12);
  std::vector<PlannedWorker> gpus(2, PlannedWorker{"10.0.0.2", gpu});
  EXPECT_DOUBLE_EQ(ClusterFromWorkers(gpus)->device().fp32_flops(), 50e12);
}

}  // namespace
}  // namespace mtrain
