// Prints Megatron-LM's 2021 weak-scaling table beside the cost model's prediction of each
// row and the planner's own choice (plan/megatron_weak_scaling.h), as docs/PERFORMANCE.md
// shows it:
//   bazel run //plan:megatron_weak_scaling [-- --cluster=deploy/clusters/dgx_a100.json]
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_format.h"
#include "plan/cluster_description.h"
#include "plan/megatron_weak_scaling.h"

ABSL_FLAG(std::string, cluster, "deploy/clusters/dgx_a100.json",
          "Cluster description (protobuf JSON of proto/cluster.proto), relative to the "
          "workspace under `bazel run`.");

ABSL_FLAG(int, max_virtual_stages, 0,
          "Largest interleaving tried for the published layouts (0: any).");

namespace {

std::string Resolve(const std::string& path) {
  const char* workspace = std::getenv("BUILD_WORKSPACE_DIRECTORY");
  if (path.empty() || path[0] == '/' || workspace == nullptr) return path;
  return std::string(workspace) + "/" + path;
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const std::string path = Resolve(absl::GetFlag(FLAGS_cluster));
  std::ifstream file(path);
  if (!file) {
    std::fprintf(stderr, "megatron_weak_scaling: cannot read --cluster=%s\n", path.c_str());
    return 1;
  }
  std::stringstream text;
  text << file.rdbuf();
  absl::StatusOr<mtrain::ClusterDescription> cluster = mtrain::ParseClusterDescription(text.str());
  if (!cluster.ok()) {
    std::fprintf(stderr, "megatron_weak_scaling: %s: %s\n", path.c_str(),
                 std::string(cluster.status().message()).c_str());
    return 1;
  }
  std::printf("cluster: %s\nsource: %s\n\n", cluster->name().c_str(), cluster->source().c_str());
  std::printf(
      "| params | t | p | GPUs | batch | v | bubble | TF/s published | TF/s predicted | error | "
      "planner's choice | its step vs published layout | with zero-bubble schedules | its "
      "step vs published layout |\n"
      "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  double worst = 0;
  for (const mtrain::MegatronRow& row : mtrain::MegatronWeakScalingRows()) {
    const mtrain::MegatronPrediction p =
        mtrain::PredictMegatronRow(row, *cluster, absl::GetFlag(FLAGS_max_virtual_stages));
    worst = std::max(worst, std::fabs(p.error));
    // A planner's choice as two cells: its layout, and its step against the published one.
    const auto cells = [&](bool has, const mtrain::PricedLayout& layout) {
      if (!has) return std::make_pair(std::string("none fits"), std::string());
      return std::make_pair(
          mtrain::LayoutName(layout.spec),
          absl::StrFormat("%+.1f%%", 100 * (layout.cost.step_seconds / p.cost.step_seconds - 1)));
    };
    const auto [choice, gain] = cells(p.has_choice, p.choice);
    const auto [zero_bubble, zero_bubble_gain] =
        cells(p.has_zero_bubble_choice, p.zero_bubble_choice);
    std::printf(
        "| %s | %d | %d | %d | %d | %d | %.1f%% | %.0f | %.1f | %+.1f%% | %s | %s | %s | %s |\n",
        row.parameters.c_str(), row.tensor, row.pipeline, row.gpus, row.batch,
        p.spec.parallel().virtual_stages(), 100 * p.cost.bubble_fraction,
        row.published_tflops_per_gpu, p.cost.hardware_flops_per_device / 1e12, 100 * p.error,
        choice.c_str(), gain.c_str(), zero_bubble.c_str(), zero_bubble_gain.c_str());
  }
  std::printf("\nworst error %.1f%%\n", 100 * worst);
  return 0;
}
