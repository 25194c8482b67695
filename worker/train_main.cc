// `train`: runs training without a coordinator, like torchrun's static mode. This build
// runs the single-rank case: one process holding the whole model.
//
//   train --spec=job.json --metrics_jsonl=metrics.jsonl
//
// Prints a progress line per step; writes one JSON object per step to --metrics_jsonl.
#include <cstdio>
#include <fstream>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "coordinator/plan/job_spec_validation.h"
#include "kernels/cpu_threads.h"
#include "worker/engine/trainer.h"
#include "worker/step_metrics_format.h"

ABSL_FLAG(std::string, spec, "", "job spec JSON file (required)");
ABSL_FLAG(std::string, metrics_jsonl, "", "append one JSON object per step to this file");
ABSL_FLAG(int, threads, 0, "CPU threads for GEMMs and kernels; 0 = all cores");
ABSL_FLAG(std::string, save_weights, "",
          "after the last step, write the weights (global tensor names) as safetensors");
ABSL_FLAG(int, steps, 0, "override train.steps (0 = use the spec)");

namespace mtrain {
namespace {

int Fail(const absl::Status& status) {
  std::fprintf(stderr, "train: %s\n", status.ToString().c_str());
  return 1;
}

int Run() {
  const std::string spec_path = absl::GetFlag(FLAGS_spec);
  if (spec_path.empty()) return Fail(absl::InvalidArgumentError("--spec is required"));
  absl::StatusOr<JobSpec> spec = LoadJobSpecFile(spec_path);
  if (!spec.ok()) return Fail(spec.status());
  if (absl::GetFlag(FLAGS_steps) > 0) spec->mutable_train()->set_steps(absl::GetFlag(FLAGS_steps));
  const int threads = absl::GetFlag(FLAGS_threads);
  cpu::SetCpuThreads(threads > 0 ? threads : cpu::AvailableCores());

  absl::StatusOr<std::unique_ptr<Trainer>> trainer = Trainer::Create(*spec);
  if (!trainer.ok()) return Fail(trainer.status());
  std::ofstream metrics_file;
  const std::string metrics_path = absl::GetFlag(FLAGS_metrics_jsonl);
  if (!metrics_path.empty()) {
    metrics_file.open(metrics_path, std::ios::app);
    if (!metrics_file) {
      return Fail(absl::InvalidArgumentError(absl::StrCat("--metrics_jsonl: cannot open ",
                                                          metrics_path)));
    }
  }
  const long long steps = spec->train().steps();
  std::printf("train: %s, %d layers, hidden %d, %d heads, seq %d, %lld parameters, %lld steps\n",
              spec->name().c_str(), spec->model().num_layers(), spec->model().hidden_size(),
              spec->model().num_heads(), spec->model().seq_length(),
              static_cast<long long>((*trainer)->layout().total_size()), steps);
  std::fflush(stdout);
  while ((*trainer)->completed_steps() < steps) {
    absl::StatusOr<StepMetrics> metrics = (*trainer)->Step();
    if (!metrics.ok()) return Fail(metrics.status());
    std::printf("%s\n", StepProgressLine(*metrics, steps).c_str());
    std::fflush(stdout);
    if (metrics_file.is_open()) {
      metrics_file << StepMetricsJson(*metrics) << "\n";
      metrics_file.flush();
    }
  }
  const std::string weights = absl::GetFlag(FLAGS_save_weights);
  if (!weights.empty()) {
    absl::Status saved = (*trainer)->SaveWeights(weights);
    if (!saved.ok()) return Fail(saved);
  }
  return 0;
}

}  // namespace
}  // namespace mtrain

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("train a GPT model without a coordinator (static mode)");
  absl::ParseCommandLine(argc, argv);
  return mtrain::Run();
}
