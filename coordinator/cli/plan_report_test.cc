#include "coordinator/cli/plan_report.h"

#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "plan/cluster_description.h"
#include "spec/job_spec_validation.h"

namespace mtrain {
namespace {

ClusterDescription TwoDevices(int64_t memory_bytes) {
  DeviceProfile device;
  device.set_name("test cpu");
  device.set_fp32_flops(1e11);
  device.set_matmul_efficiency(1);
  device.set_memory_bandwidth_bytes_per_second(1e10);
  device.set_memory_bytes(memory_bytes);
  return SingleNodeCluster(device, AssumedIntraHostLink(), 2);
}

JobSpec Spec() {
  absl::StatusOr<JobSpec> spec = ParseJobSpecJson(R"({"parallel": {"global_batch_size": 4}})");
  EXPECT_TRUE(spec.ok()) << spec.status();
  return spec.value_or(JobSpec());
}

TEST(PlanReportTest, ListsTheFastestLayoutsTheTermsAndTheTimeToTrain) {
  const ClusterDescription cluster = TwoDevices(int64_t{1} << 33);
  const LayoutSearch search = SearchLayouts(Spec(), cluster, {});
  ASSERT_FALSE(search.feasible.empty());
  PlanReportOptions options;
  options.tokens = 1e9;
  const std::string report = FormatPlanReport(Spec(), cluster, search, options);
  EXPECT_NE(report.find("2 x test cpu"), std::string::npos) << report;
  EXPECT_NE(report.find("LAYOUT"), std::string::npos) << report;
  EXPECT_NE(report.find(LayoutName(search.feasible.front().spec)), std::string::npos) << report;
  EXPECT_NE(report.find("#1 step: matmuls"), std::string::npos) << report;
  EXPECT_NE(report.find("time to train 1e+09 tokens with #1"), std::string::npos) << report;
  EXPECT_NE(report.find("Megatron's 8 T P / (n X)"), std::string::npos) << report;
}

// Where #1 is pipelined and other schedules were priced for its degrees, the report says
// which schedule won and by how much, with each one's bubble.
TEST(PlanReportTest, ComparesThePipelineSchedulesOfTheBestLayout) {
  const ClusterDescription cluster = TwoDevices(int64_t{1} << 33);
  LayoutSearchOptions options;
  options.try_zero_bubble = true;
  options.try_recompute = false;
  LayoutSearch search = SearchLayouts(Spec(), cluster, options);
  // Only the pipelined layouts, to compare their schedules.
  std::vector<PricedLayout> pipelined;
  for (PricedLayout& layout : search.feasible) {
    if (layout.spec.parallel().pipeline() == 2) pipelined.push_back(std::move(layout));
  }
  search.feasible = std::move(pipelined);
  ASSERT_GE(search.feasible.size(), 2u);
  const std::string report = FormatPlanReport(Spec(), cluster, search, {});
  const size_t line = report.find("schedules at t=1 p=2 d=1 b=");
  ASSERT_NE(line, std::string::npos) << report;
  const std::string comparison = report.substr(line, report.find('\n', line) - line);
  EXPECT_NE(comparison.find("1f1b "), std::string::npos) << comparison;
  EXPECT_NE(comparison.find("zb_h1 "), std::string::npos) << comparison;
  EXPECT_NE(comparison.find("(bubble "), std::string::npos) << comparison;
}

TEST(PlanReportTest, GroupsRejectionsByReason) {
  const ClusterDescription cluster = TwoDevices(4096);  // nothing fits in 4 KiB
  const LayoutSearch search = SearchLayouts(Spec(), cluster, {});
  EXPECT_TRUE(search.feasible.empty());
  const std::string report = FormatPlanReport(Spec(), cluster, search, {});
  EXPECT_NE(report.find("no layout fits"), std::string::npos) << report;
  EXPECT_NE(report.find("rejected: "), std::string::npos) << report;
  EXPECT_NE(report.find("  does not fit: "), std::string::npos) << report;
  EXPECT_NE(report.find("a device has 4.0 KiB"), std::string::npos) << report;
}

TEST(PlanReportTest, CountsParametersWithTheTiedEmbeddingOnce) {
  // Default model: 4 layers of 12 h^2 + 13 h, 256 x 128 embedding, 128 x 128 positions,
  // final LayerNorm.
  EXPECT_DOUBLE_EQ(ModelParameters(Spec()),
                   4 * (12.0 * 128 * 128 + 13 * 128) + 256 * 128 + 128 * 128 + 2 * 128);
}

}  // namespace
}  // namespace mtrain
