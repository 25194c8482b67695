#include "plan/megatron_weak_scaling.h"

#include <cmath>
#include <fstream>
#include <sstream>

#include "gtest/gtest.h"
#include "plan/cluster_description.h"

namespace mtrain {
namespace {

ClusterDescription DgxA100() {
  std::ifstream file("deploy/clusters/dgx_a100.json");
  std::stringstream text;
  text << file.rdbuf();
  absl::StatusOr<ClusterDescription> cluster = ParseClusterDescription(text.str());
  EXPECT_TRUE(cluster.ok()) << cluster.status();
  return cluster.value_or(ClusterDescription());
}

TEST(MegatronWeakScalingTest, TheRowsAreThePapersLayouts) {
  for (const MegatronRow& row : MegatronWeakScalingRows()) {
    EXPECT_EQ(row.gpus % (row.tensor * row.pipeline), 0) << row.parameters;
    EXPECT_EQ(row.layers % row.pipeline, 0) << row.parameters;
    EXPECT_EQ(row.heads % row.tensor, 0) << row.parameters;
    const int data = row.gpus / (row.tensor * row.pipeline);
    EXPECT_EQ(row.batch % data, 0) << row.parameters;
  }
}

// The model predicts every row within 10% from the cluster description alone
// (docs/PERFORMANCE.md lists each row).
TEST(MegatronWeakScalingTest, EveryRowIsPredictedWithinTheDocumentedError) {
  const ClusterDescription cluster = DgxA100();
  for (const MegatronRow& row : MegatronWeakScalingRows()) {
    const MegatronPrediction prediction = PredictMegatronRow(row, cluster);
    EXPECT_LT(std::fabs(prediction.error), 0.10)
        << row.parameters << ": predicted " << prediction.cost.hardware_flops_per_device / 1e12
        << " TFLOP/s per GPU, published " << row.published_tflops_per_gpu;
    EXPECT_EQ(prediction.cost.devices, row.gpus);
    // The published layout ran, so the memory model must let it fit an 80 GB A100.
    EXPECT_LE(prediction.memory.total_bytes, cluster.device().memory_bytes())
        << row.parameters << ": " << prediction.memory.ToString();
    // The planner's own choice is never slower than the published layout it also tried.
    ASSERT_TRUE(prediction.has_choice) << row.parameters;
    EXPECT_LE(prediction.choice.cost.step_seconds, prediction.cost.step_seconds * (1 + 1e-9))
        << row.parameters << ": " << LayoutName(prediction.choice.spec);
    // With the zero-bubble schedules allowed the search has every layout it had before, so
    // its choice is never slower.
    ASSERT_TRUE(prediction.has_zero_bubble_choice) << row.parameters;
    EXPECT_LE(prediction.zero_bubble_choice.cost.step_seconds,
              prediction.choice.cost.step_seconds * (1 + 1e-9))
        << row.parameters << ": " << LayoutName(prediction.zero_bubble_choice.spec);
  }
}

}  // namespace
}  // namespace mtrain
