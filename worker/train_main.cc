// `train`: runs one rank of a static world without a coordinator, like torchrun's static
// mode. Every rank of the world runs this with the same spec and its own --rank; they
// rendezvous through files in --rendezvous_dir and connect over TCP (Gloo).
//
//   train --spec=job.json --metrics_jsonl=metrics.jsonl                  # one rank
//   train --spec=job.json --rank=R --world_size=W --rendezvous_dir=DIR   # rank R of W
//
// `launch` starts all W ranks of a spec on this machine. Ranks that compute the loss (the
// last pipeline stage) append one JSON object per step to --metrics_jsonl; the first of
// them prints a progress line per step.
#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <optional>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "coordinator/plan/assignment_plan.h"
#include "coordinator/plan/job_spec_validation.h"
#include "coordinator/plan/rank_grid.h"
#include "kernels/cpu_threads.h"
#include "worker/parallel/gloo_communicator.h"
#include "worker/parallel/key_value_store.h"
#include "worker/parallel/rank_groups.h"
#include "worker/step_metrics_format.h"
#include "worker/trainer.h"

ABSL_FLAG(std::string, spec, "", "job spec JSON file (required)");
ABSL_FLAG(int, rank, 0, "this process's global rank");
ABSL_FLAG(int, world_size, 0,
          "number of ranks; must equal tensor * pipeline * data of the spec (0: take it "
          "from the spec)");
ABSL_FLAG(std::string, rendezvous_dir, "",
          "directory the ranks rendezvous through (required when the world has more than "
          "one rank; must start empty)");
ABSL_FLAG(std::string, host, "127.0.0.1", "address this rank's connections listen on");
ABSL_FLAG(std::string, metrics_jsonl, "",
          "append one JSON object per step to this file (ranks that compute the loss)");
ABSL_FLAG(int, threads, 0, "CPU threads for GEMMs and kernels; 0 = all cores");
ABSL_FLAG(std::string, save_weights, "",
          "after the last step, write the full weights (global tensor names) as safetensors "
          "(gathered to rank 0, which writes the file)");
ABSL_FLAG(int, steps, 0, "override train.steps (0 = use the spec)");
ABSL_FLAG(absl::Duration, collective_timeout, absl::Minutes(5),
          "bound on rendezvous and on every collective or message");
ABSL_FLAG(double, bucket_mb, 4.0, "data-parallel gradient bucket size in MiB");
ABSL_FLAG(std::string, stage_timings, "",
          "every rank appends one JSON object per step: its pipeline stage, step time and "
          "the part spent computing (for measuring the pipeline bubble)");

namespace mtrain {
namespace {

int Fail(int rank, const absl::Status& status) {
  std::fprintf(stderr, "train[rank %d]: %s\n", rank, status.ToString().c_str());
  return 1;
}

// One write(2) per line on an O_APPEND descriptor: lines of several ranks sharing a file
// never interleave.
class JsonlAppender {
 public:
  absl::Status Open(const std::string& path) {
    fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd_ < 0)
      return absl::InvalidArgumentError(absl::StrCat("--metrics_jsonl: cannot open ", path));
    return absl::OkStatus();
  }
  void Append(const std::string& line) {
    if (fd_ < 0) return;
    const std::string with_newline = line + "\n";
    if (::write(fd_, with_newline.data(), with_newline.size()) < 0) std::perror("metrics_jsonl");
  }
  ~JsonlAppender() {
    if (fd_ >= 0) ::close(fd_);
  }

 private:
  int fd_ = -1;
};

int Run() {
  const int rank = absl::GetFlag(FLAGS_rank);
  const std::string spec_path = absl::GetFlag(FLAGS_spec);
  if (spec_path.empty()) return Fail(rank, absl::InvalidArgumentError("--spec is required"));
  absl::StatusOr<JobSpec> spec = LoadJobSpecFile(spec_path);
  if (!spec.ok()) return Fail(rank, spec.status());
  if (absl::GetFlag(FLAGS_steps) > 0) spec->mutable_train()->set_steps(absl::GetFlag(FLAGS_steps));
  const ParallelSpec& par = spec->parallel();
  const int world = par.tensor() * par.pipeline() * par.data();
  const int world_flag = absl::GetFlag(FLAGS_world_size);
  if (world_flag != 0 && world_flag != world) {
    return Fail(rank,
                absl::InvalidArgumentError(absl::StrCat("--world_size=", world_flag,
                                                        " but the spec needs tensor * pipeline * "
                                                        "data = ",
                                                        par.tensor(), " * ", par.pipeline(), " * ",
                                                        par.data(), " = ", world, " ranks")));
  }
  if (rank < 0 || rank >= world) {
    return Fail(rank, absl::InvalidArgumentError(
                          absl::StrCat("--rank=", rank, " is outside [0, ", world, ")")));
  }
  const std::string rendezvous_dir = absl::GetFlag(FLAGS_rendezvous_dir);
  if (world > 1 && rendezvous_dir.empty()) {
    return Fail(rank, absl::InvalidArgumentError(absl::StrCat(
                          "--rendezvous_dir is required for a world of ", world, " ranks")));
  }
  const int threads = absl::GetFlag(FLAGS_threads);
  cpu::SetCpuThreads(threads > 0 ? threads : cpu::AvailableCores());

  absl::StatusOr<std::vector<Assignment>> plan = PlanAssignments(*spec, "static", 1, {});
  if (!plan.ok()) return Fail(rank, plan.status());
  absl::StatusOr<RankGrid> grid = RankGrid::Create(par.tensor(), par.pipeline(), par.data());
  if (!grid.ok()) return Fail(rank, grid.status());

  std::unique_ptr<DirectoryStore> store;
  std::optional<GlooDevice> device;
  GroupTransport transport;
  transport.timeout = absl::GetFlag(FLAGS_collective_timeout);
  if (world > 1) {
    absl::StatusOr<std::unique_ptr<DirectoryStore>> opened = DirectoryStore::Open(rendezvous_dir);
    if (!opened.ok()) return Fail(rank, opened.status());
    store = std::move(*opened);
    absl::StatusOr<GlooDevice> created = CreateGlooDevice(absl::GetFlag(FLAGS_host));
    if (!created.ok()) return Fail(rank, created.status());
    device = std::move(*created);
    transport.store = store.get();
    transport.device = &*device;
  }
  absl::StatusOr<RankGroups> groups = ConnectRankGroups(*grid, rank, transport);
  if (!groups.ok()) return Fail(rank, groups.status());

  TrainerOptions options;
  options.bucket_elements =
      std::max<size_t>(1, static_cast<size_t>(absl::GetFlag(FLAGS_bucket_mb) * (1 << 20) / 4));
  absl::StatusOr<std::unique_ptr<Trainer>> trainer =
      Trainer::Create((*plan)[rank], std::move(*groups), options);
  if (!trainer.ok()) return Fail(rank, trainer.status());

  JsonlAppender metrics_file;
  const std::string metrics_path = absl::GetFlag(FLAGS_metrics_jsonl);
  if (!metrics_path.empty() && (*trainer)->computes_loss()) {
    absl::Status opened = metrics_file.Open(metrics_path);
    if (!opened.ok()) return Fail(rank, opened);
  }
  JsonlAppender timings_file;
  const std::string timings_path = absl::GetFlag(FLAGS_stage_timings);
  if (!timings_path.empty()) {
    absl::Status opened = timings_file.Open(timings_path);
    if (!opened.ok()) return Fail(rank, opened);
  }
  // One rank narrates: the first that knows the loss.
  const RankCoordinates& coords = (*trainer)->coordinates();
  const bool narrator =
      (*trainer)->computes_loss() && coords.tp_rank() == 0 && coords.dp_rank() == 0;
  const long long steps = spec->train().steps();
  if (narrator) {
    std::printf(
        "train: %s, %d layers, hidden %d, %d heads, seq %d, (t,p,d)=(%d,%d,%d) %s, "
        "%lld steps\n",
        spec->name().c_str(), spec->model().num_layers(), spec->model().hidden_size(),
        spec->model().num_heads(), spec->model().seq_length(), par.tensor(), par.pipeline(),
        par.data(), Schedule_Name(par.schedule()).c_str(), steps);
    std::fflush(stdout);
  }
  while ((*trainer)->completed_steps() < steps) {
    absl::StatusOr<StepMetrics> metrics = (*trainer)->Step();
    if (!metrics.ok()) return Fail(rank, metrics.status());
    if (narrator) {
      std::printf("%s\n", StepProgressLine(*metrics, steps).c_str());
      std::fflush(stdout);
    }
    if ((*trainer)->computes_loss()) metrics_file.Append(StepMetricsJson(*metrics));
    const PipelineTimings& timings = (*trainer)->last_pipeline_timings();
    timings_file.Append(absl::StrFormat(
        "{\"step\":%d,\"rank\":%d,\"pp_stage\":%d,\"step_seconds\":%.6f,"
        "\"pipeline_seconds\":%.6f,\"compute_seconds\":%.6f,\"wait_seconds\":%.6f}",
        metrics->step(), rank, coords.pp_rank(), metrics->step_seconds(),
        timings.compute_seconds + timings.wait_seconds, timings.compute_seconds,
        timings.wait_seconds));
  }
  const std::string weights = absl::GetFlag(FLAGS_save_weights);
  if (!weights.empty()) {
    absl::Status saved = (*trainer)->SaveWeights(weights);
    if (!saved.ok()) return Fail(rank, saved);
  }
  return 0;
}

}  // namespace
}  // namespace mtrain

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "train one rank of a GPT job without a coordinator (static mode); see README");
  absl::ParseCommandLine(argc, argv);
  return mtrain::Run();
}
