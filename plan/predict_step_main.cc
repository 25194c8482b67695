// Prints the cost model's prediction for a spec's own layout as one JSON object, for
// benchmarks that set predictions beside measurements (tests/bench/planner_vs_launch.py):
//   bazel run //plan:predict_step -- --spec=job.json --cluster=deploy/clusters/cpu_host.json
//       [--ranks_per_device=N]
// --ranks_per_device: ranks sharing one described device (CPU ranks of `launch` on one
// host share its cores and memory bandwidth: each gets 1/N of them).
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_format.h"
#include "plan/cluster_description.h"
#include "plan/rank_memory_estimate.h"
#include "plan/step_cost_model.h"
#include "spec/job_spec_validation.h"

ABSL_FLAG(std::string, spec, "", "job spec JSON file");
ABSL_FLAG(std::string, cluster, "", "cluster description (protobuf JSON)");
ABSL_FLAG(int, ranks_per_device, 1, "ranks sharing each device of the cluster");

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  absl::StatusOr<mtrain::JobSpec> spec = mtrain::LoadJobSpecFile(absl::GetFlag(FLAGS_spec));
  if (!spec.ok()) {
    std::fprintf(stderr, "predict_step: %s\n", spec.status().ToString().c_str());
    return 1;
  }
  std::ifstream file(absl::GetFlag(FLAGS_cluster));
  std::stringstream text;
  text << file.rdbuf();
  absl::StatusOr<mtrain::ClusterDescription> cluster = mtrain::ParseClusterDescription(text.str());
  if (!cluster.ok()) {
    std::fprintf(stderr, "predict_step: %s\n", cluster.status().ToString().c_str());
    return 1;
  }
  const mtrain::ClusterDescription shared =
      mtrain::ShareDevices(*cluster, absl::GetFlag(FLAGS_ranks_per_device));
  mtrain::StepCostOptions options = mtrain::ProjectEngineOptions(*spec);
  options.ranks_per_device = absl::GetFlag(FLAGS_ranks_per_device);
  const mtrain::StepCost c = mtrain::PredictStepCost(*spec, shared, options);
  const mtrain::RankMemoryEstimate memory = mtrain::EstimateRankMemory(*spec);
  // The last stage's ranks report the metrics (and their engine's memory peak).
  const mtrain::RankMemoryEstimate last_stage =
      mtrain::EstimateStageMemory(*spec, spec->parallel().pipeline() - 1);
  std::printf(
      "%s\n",
      absl::StrFormat(
          R"({"step_seconds": %.6g, "matmul_seconds": %.6g, "attention_seconds": %.6g, )"
          R"("elementwise_seconds": %.6g, "tensor_comm_seconds": %.6g, )"
          R"("pipeline_comm_seconds": %.6g, "bubble_seconds": %.6g, "data_comm_seconds": %.6g, )"
          R"("optimizer_seconds": %.6g, "tokens_per_second": %.6g, "memory_bytes": %d, )"
          R"("last_stage_memory_bytes": %d})",
          c.step_seconds, c.matmul_seconds, c.attention_seconds, c.elementwise_seconds,
          c.tensor_comm_seconds, c.pipeline_comm_seconds, c.bubble_seconds, c.data_comm_seconds,
          c.optimizer_seconds, c.tokens_per_second, memory.total_bytes, last_stage.total_bytes)
          .c_str());
  return 0;
}
