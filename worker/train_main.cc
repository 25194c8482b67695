// `train`: runs one rank of a static world without a coordinator, like torchrun's static
// mode. Every rank of the world runs this with the same spec and its own --rank; they
// rendezvous through files in --rendezvous_dir and connect over TCP (Gloo).
//
//   train --spec=job.json --metrics_jsonl=metrics.jsonl                  # one rank
//   train --spec=job.json --rank=R --world_size=W --rendezvous_dir=DIR   # rank R of W
//   train --assignment=FILE --coordinator=HOST:PORT    # a rank a worker daemon was given
//
// With --assignment (written by the worker daemon: a binary Assignment proto) the rank
// rendezvouses through the coordinator's key-value RPCs, streams every step's metrics to
// it and reports its result at the end; the coordinator ending the metrics stream (the
// generation is no longer live) stops the rank. It resumes from the coordinator's
// checkpoint named in the assignment (downloading only the files its shards overlap) and
// uploads its checkpoints to the coordinator's store.
//
// SIGTERM or SIGINT aborts every communicator of the rank (a collective in progress
// returns at once), so the rank reports "aborted" and exits instead of hanging.
//
// `launch` starts all W ranks of a spec on this machine. Ranks that compute the loss (the
// last pipeline stage) append one JSON object per step to --metrics_jsonl; the first of
// them prints a progress line per step.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <new>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "common/scratch_dir.h"
#include "common/shutdown_signal.h"
#include "common/status_macros.h"
#include "plan/assignment_plan.h"
#include "spec/job_spec_validation.h"
#include "plan/rank_grid.h"
#include "kernels/cpu_threads.h"
#include "kernels/cuda_device_query.h"
#include "checkpoint/checkpoint_transfer.h"
#include "worker/coordinator_client.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/checkpoint_tensors.h"
#include "worker/engine/data/data_roots.h"
#include "worker/engine/engine_choice.h"
#include "checkpoint/hf_gpt2.h"
#include "worker/engine/memory_limits.h"
#include "worker/engine/rank_allocation_estimate.h"
#include "checkpoint/safetensors.h"
#include "worker/parallel/gloo_communicator.h"
#include "worker/parallel/key_value_store.h"
#include "worker/parallel/rank_groups.h"
#include "common/step_metrics_format.h"
#include "worker/trainer.h"

ABSL_FLAG(std::string, spec, "", "job spec JSON file (static mode)");
ABSL_FLAG(std::string, assignment, "",
          "binary Assignment proto from the worker daemon (coordinator mode; replaces "
          "--spec, --rank, --world_size and --rendezvous_dir)");
ABSL_FLAG(std::string, coordinator, "127.0.0.1:7070", "coordinator address (coordinator mode)");
ABSL_FLAG(std::string, token_file, "", "bearer token for the coordinator (coordinator mode)");
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
ABSL_FLAG(std::string, gpu_collectives, "nccl",
          "how CUDA ranks sum their gradients and tensor-parallel activations: nccl (on the "
          "GPU; data-parallel sums overlapped with the backward) or gloo (through host "
          "memory; for several ranks sharing one GPU, which NCCL up to 2.29 refuses). "
          "Pipeline messages go through host memory either way");
ABSL_FLAG(std::string, checkpoint_dir, "",
          "write checkpoints here (DIR/step-NNNNNNNN, docs/CHECKPOINT_FORMAT.md) every "
          "train.checkpoint_every steps and after the last step; a directory all ranks share");
ABSL_FLAG(std::string, resume_from, "",
          "a checkpoint directory (DIR/step-NNNNNNNN), written under any parallel layout, to "
          "continue from");
ABSL_FLAG(std::string, data_root, "",
          "comma-separated directories that data.path (and train.init_from, which static "
          "mode reads) must resolve inside (realpath, symlinks followed). Empty: with --spec "
          "not confined; with --assignment the directory of the shipped corpus and "
          "$MTRAIN_DATA_DIR (the worker daemon passes its own --data_root)");
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

// The trainer a signal must abort, once it exists.
std::mutex abort_mutex;
Trainer* abortable_trainer = nullptr;  // guarded by abort_mutex
bool abort_requested = false;          // guarded by abort_mutex

// SIGTERM/SIGINT (the worker daemon's abort, launch's shutdown, Ctrl-C): abort the
// communicators so a blocked collective returns and the rank can report; give up after a
// few seconds.
void WatchForAbort(ShutdownSignal* signals) {
  std::thread([signals] {
    const int number = signals->WaitForSignal();
    std::fprintf(stderr, "train: signal %d: aborting communicators\n", number);
    {
      std::lock_guard<std::mutex> lock(abort_mutex);
      abort_requested = true;
      if (abortable_trainer != nullptr) abortable_trainer->Abort();
    }
    absl::SleepFor(absl::Seconds(5));
    std::fprintf(stderr, "train: still running 5s after the abort: exiting\n");
    std::_Exit(128 + number);
  }).detach();
}

// Uploads this rank's checkpoint files to the coordinator's store (coordinator mode).
class CoordinatorCheckpointUploader : public CheckpointUploader {
 public:
  CoordinatorCheckpointUploader(CoordinatorClient* client, const Assignment& assignment)
      : client_(client), assignment_(assignment) {}

  absl::Status UploadShard(int64_t step, const std::string& dir, const std::string& file) override {
    return UploadCheckpointFile(client_->stub(), Prepare(), assignment_.job_id(),
                                assignment_.generation(), step, file, dir + "/" + file);
  }
  absl::Status CommitManifest(int64_t step, const CheckpointManifest& manifest) override {
    return UploadCheckpointBytes(client_->stub(), Prepare(), assignment_.job_id(),
                                 assignment_.generation(), step, kManifestFileName,
                                 SerializeManifest(manifest));
  }

 private:
  PrepareContext Prepare() const {
    return [this](grpc::ClientContext* context) { client_->Prepare(context, absl::Hours(1)); };
  }
  CoordinatorClient* const client_;
  const Assignment& assignment_;
};

// Where this rank's plan and rendezvous come from.
struct RankSetup {
  Assignment assignment;
  std::unique_ptr<KeyValueStore> store;            // null for a single-rank static run
  std::unique_ptr<CoordinatorClient> coordinator;  // coordinator mode only
  std::string host;                                // where this rank's connections listen
  std::vector<std::string> data_roots;             // coordinator mode: data.path's confines
};

absl::StatusOr<RankSetup> StaticSetup(int rank) {
  const std::string spec_path = absl::GetFlag(FLAGS_spec);
  if (spec_path.empty()) return absl::InvalidArgumentError("--spec (or --assignment) is required");
  ASSIGN_OR_RETURN(JobSpec spec, LoadJobSpecFile(spec_path));
  if (const int steps = absl::GetFlag(FLAGS_steps); steps < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--steps=", steps, ": must be >= 0 (0 keeps the spec's train.steps)"));
  } else if (steps > 0) {
    spec.mutable_train()->set_steps(steps);
  }
  const ParallelSpec& par = spec.parallel();
  const int world = par.tensor() * par.pipeline() * par.data();
  const int world_flag = absl::GetFlag(FLAGS_world_size);
  if (world_flag != 0 && world_flag != world) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--world_size=", world_flag, " but the spec needs tensor * pipeline * data = ",
        par.tensor(), " * ", par.pipeline(), " * ", par.data(), " = ", world, " ranks"));
  }
  if (rank < 0 || rank >= world) {
    return absl::InvalidArgumentError(
        absl::StrCat("--rank=", rank, " is outside [0, ", world, ")"));
  }
  const std::string rendezvous_dir = absl::GetFlag(FLAGS_rendezvous_dir);
  if (world > 1 && rendezvous_dir.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--rendezvous_dir is required for a world of ", world, " ranks"));
  }
  if (const std::string roots_flag = absl::GetFlag(FLAGS_data_root); !roots_flag.empty()) {
    ASSIGN_OR_RETURN(const std::vector<std::string> roots, ParseDataRoots(roots_flag));
    ASSIGN_OR_RETURN(*spec.mutable_data(), ConfineDataSpec(spec.data(), roots));
    if (!spec.train().init_from().empty()) {
      ASSIGN_OR_RETURN(*spec.mutable_train()->mutable_init_from(),
                       ConfineToDataRoots("train.init_from", spec.train().init_from(), roots));
    }
  }
  ASSIGN_OR_RETURN(std::vector<Assignment> plan, PlanAssignments(spec, "static", 1, {}));
  RankSetup setup;
  setup.assignment = std::move(plan[rank]);
  setup.host = absl::GetFlag(FLAGS_host);
  if (world > 1) {
    ASSIGN_OR_RETURN(setup.store, DirectoryStore::Open(rendezvous_dir));
  }
  return setup;
}

absl::StatusOr<RankSetup> CoordinatorSetup(const std::string& path) {
  if (absl::GetFlag(FLAGS_steps) != 0) {
    return absl::InvalidArgumentError(
        "--steps: only with --spec (an assignment's steps are the submitted job's)");
  }
  std::ifstream in(path, std::ios::binary);
  RankSetup setup;
  if (!in || !setup.assignment.ParseFromIstream(&in)) {
    return absl::InvalidArgumentError(absl::StrCat("--assignment: cannot read ", path));
  }
  // The coordinator planned with a resolved spec; resolving again checks it.
  ASSIGN_OR_RETURN(*setup.assignment.mutable_spec(), ResolveJobSpec(setup.assignment.spec()));
  // Under a coordinator the spec is anyone's who can submit: data.path is always confined
  // (Train checks it, so that the refusal is reported as the rank's result).
  const std::string roots_flag = absl::GetFlag(FLAGS_data_root);
  setup.data_roots = DefaultDataRoots();
  if (!roots_flag.empty()) {
    ASSIGN_OR_RETURN(setup.data_roots, ParseDataRoots(roots_flag));
  }
  ASSIGN_OR_RETURN(std::string token, ReadTokenFile(absl::GetFlag(FLAGS_token_file)));
  setup.coordinator =
      std::make_unique<CoordinatorClient>(absl::GetFlag(FLAGS_coordinator), std::move(token));
  setup.store = std::make_unique<CoordinatorKeyValueStore>(setup.coordinator.get(),
                                                           setup.assignment.rendezvous_prefix());
  const int rank = setup.assignment.rank().global_rank();
  setup.host = rank < setup.assignment.peers_size() ? setup.assignment.peers(rank).host() : "";
  if (setup.host.empty()) setup.host = "127.0.0.1";
  return setup;
}

absl::Status Train(RankSetup& setup) {
  if (setup.coordinator != nullptr) {
    // Before the rendezvous: the other ranks are told at once through the coordinator.
    ASSIGN_OR_RETURN(*setup.assignment.mutable_spec()->mutable_data(),
                     ConfineDataSpec(setup.assignment.spec().data(), setup.data_roots));
  }
  const Assignment& assignment = setup.assignment;
  const JobSpec& spec = assignment.spec();
  const ParallelSpec& par = spec.parallel();
  const int rank = assignment.rank().global_rank();
  ASSIGN_OR_RETURN(const RankGrid grid, RankGrid::Create(par.tensor(), par.pipeline(), par.data()));
  std::optional<GlooDevice> device;
  GroupTransport transport;
  transport.timeout = assignment.collective_timeout_ms() > 0
                          ? absl::Milliseconds(assignment.collective_timeout_ms())
                          : absl::GetFlag(FLAGS_collective_timeout);
  if (grid.world_size() > 1) {
    ASSIGN_OR_RETURN(device, CreateGlooDevice(setup.host));
    transport.store = setup.store.get();
    transport.device = &*device;
  }
  ASSIGN_OR_RETURN(RankGroups groups, ConnectRankGroups(grid, rank, transport));
  // The engine is chosen here, once, and handed to the Trainer. CUDA ranks sum their
  // gradients and tensor-parallel activations with NCCL on the GPU; every rank of the job
  // decides alike, so all or none join the NCCL world.
  const std::string gpu_collectives = absl::GetFlag(FLAGS_gpu_collectives);
  if (gpu_collectives != "nccl" && gpu_collectives != "gloo") {
    return absl::InvalidArgumentError(
        absl::StrCat("--gpu_collectives=", gpu_collectives, ": must be nccl or gloo"));
  }
  const absl::StatusOr<std::vector<CudaDeviceInfo>> gpus = QueryCudaDevices();
  ASSIGN_OR_RETURN(const EngineChoice engine, ChooseEngine(spec, gpus.status()));
  TrainerOptions options;
  options.engine = engine;
  if (engine.kind == EngineKind::kCuda) {
    options.cuda_device = CudaDeviceForRank(rank, static_cast<int>(gpus->size()));
  }
  if (engine.kind == EngineKind::kCuda && gpu_collectives == "nccl" &&
      (par.data() > 1 || par.tensor() > 1)) {
    RETURN_IF_ERROR(ConnectDeviceGroups(grid, rank, transport, options.cuda_device, &groups));
  }
  options.bucket_elements =
      std::max<size_t>(1, static_cast<size_t>(absl::GetFlag(FLAGS_bucket_mb) * (1 << 20) / 4));
  ASSIGN_OR_RETURN(std::unique_ptr<Trainer> trainer,
                   Trainer::Create(assignment, std::move(groups), options));
  if (rank == 0) {
    std::printf("%s\n", trainer->engine_note().c_str());
    const RankAllocationEstimate& memory = trainer->memory_estimate();
    std::printf("memory: about %s on this rank (%s)\n", HumanBytes(memory.total()).c_str(),
                memory.Describe().c_str());
    std::fflush(stdout);
  }
  {
    std::lock_guard<std::mutex> lock(abort_mutex);
    if (abort_requested) return absl::AbortedError("aborted by a signal before training");
    abortable_trainer = trainer.get();
  }
  struct ForgetTrainer {
    ~ForgetTrainer() {
      std::lock_guard<std::mutex> lock(abort_mutex);
      abortable_trainer = nullptr;
    }
  } forget_trainer;

  if (const std::string resume = absl::GetFlag(FLAGS_resume_from); !resume.empty()) {
    RETURN_IF_ERROR(trainer->LoadCheckpoint(resume));
  } else if (setup.coordinator == nullptr && !spec.train().init_from().empty()) {
    // Static mode reads the initial weights itself (under a coordinator they arrive as
    // the job's step-0 checkpoint); a parameters-only checkpoint re-slices them for this
    // rank like any other.
    // The file, its float copy and the re-laid-out tensors are alive together.
    std::error_code size_error;
    const uintmax_t init_bytes = std::filesystem::file_size(spec.train().init_from(), size_error);
    if (!size_error) {
      RETURN_IF_ERROR(CheckMemoryFits(absl::StrCat("train.init_from ", spec.train().init_from()),
                                      3.0 * static_cast<double>(init_bytes),
                                      absl::StrCat("3 x its ", init_bytes, " bytes"),
                                      CurrentMemoryLimits()));
    }
    absl::StatusOr<SafetensorsFile> file = ReadSafetensors(spec.train().init_from());
    if (!file.ok()) {
      return absl::Status(file.status().code(),
                          absl::StrCat("train.init_from: ", file.status().message()));
    }
    ASSIGN_OR_RETURN(const auto weights, FromHuggingFaceGpt2(*file, spec.model()));
    ASSIGN_OR_RETURN(ScratchDir init, ScratchDir::Create(absl::StrCat("init-r", rank)));
    RETURN_IF_ERROR(
        WriteParameterCheckpoint(init.path(), "static", 0, weights, spec.train().seed()).status());
    RETURN_IF_ERROR(trainer->LoadCheckpoint(init.path()));
  }
  std::string checkpoint_dir = absl::GetFlag(FLAGS_checkpoint_dir);
  if (!checkpoint_dir.empty()) {
    // Found out now, not after the last step (whose checkpoint may be the only one).
    std::error_code error;
    std::filesystem::create_directories(checkpoint_dir, error);
    const std::string probe = absl::StrCat(checkpoint_dir, "/.writable-r", rank);
    if (error || !std::ofstream(probe).good()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--checkpoint_dir=", checkpoint_dir, ": cannot write there",
                       error ? absl::StrCat(" (", error.message(), ")") : std::string()));
    }
    std::filesystem::remove(probe, error);
  }
  std::optional<ScratchDir> scratch;
  std::unique_ptr<CheckpointUploader> uploader;
  if (setup.coordinator != nullptr) {
    // Checkpoints live in the coordinator's store; this machine only stages them.
    ASSIGN_OR_RETURN(ScratchDir created,
                     ScratchDir::Create(absl::StrCat(assignment.job_id(), "-g",
                                                     assignment.generation(), "-r", rank)));
    scratch.emplace(std::move(created));
    checkpoint_dir = scratch->path() + "/save";
    uploader = std::make_unique<CoordinatorCheckpointUploader>(setup.coordinator.get(), assignment);
    if (assignment.has_resume_step()) {
      const std::string dir = scratch->path() + "/resume";
      const PrepareContext prepare = [&](grpc::ClientContext* context) {
        setup.coordinator->Prepare(context, absl::Hours(1));
      };
      auto needed = [&](const CheckpointManifest& manifest, const std::string& file) {
        const std::vector<std::string> files = trainer->CheckpointFilesNeeded(manifest);
        return std::find(files.begin(), files.end(), file) != files.end();
      };
      RETURN_IF_ERROR(DownloadCheckpoint(setup.coordinator->stub(), prepare, assignment.job_id(),
                                         assignment.resume_step(), dir, needed)
                          .status());
      RETURN_IF_ERROR(trainer->LoadCheckpoint(dir, /*subset=*/true));
      std::error_code ignored;
      std::filesystem::remove_all(dir, ignored);
    }
  }
  const int64_t checkpoint_every = spec.train().checkpoint_every();
  // A resumed run does not save the step it resumed from again.
  int64_t last_saved = trainer->completed_steps() > 0 ? trainer->completed_steps() : -1;

  JsonlAppender metrics_file;
  const std::string metrics_path = absl::GetFlag(FLAGS_metrics_jsonl);
  if (!metrics_path.empty() && trainer->computes_loss()) {
    RETURN_IF_ERROR(metrics_file.Open(metrics_path));
  }
  JsonlAppender timings_file;
  const std::string timings_path = absl::GetFlag(FLAGS_stage_timings);
  if (!timings_path.empty()) RETURN_IF_ERROR(timings_file.Open(timings_path));
  // One rank narrates: the first that knows the loss.
  const RankCoordinates& coords = trainer->coordinates();
  const bool narrator = trainer->computes_loss() && coords.tp_rank() == 0 && coords.dp_rank() == 0;
  const long long steps = spec.train().steps();
  // Saves the steps completed so far; the narrator says where and how long it took.
  auto save = [&]() -> absl::Status {
    const absl::Time start = absl::Now();
    ASSIGN_OR_RETURN(const std::string saved,
                     trainer->SaveCheckpoint(checkpoint_dir, uploader.get()));
    last_saved = trainer->completed_steps();
    if (narrator) {
      std::printf("checkpoint: step %lld saved in %.2f s %s\n", trainer->completed_steps(),
                  absl::ToDoubleSeconds(absl::Now() - start),
                  uploader != nullptr ? "to the coordinator's store" : ("in " + saved).c_str());
      std::fflush(stdout);
    }
    return absl::OkStatus();
  };
  if (narrator) {
    std::printf(
        "train: %s, %d layers, hidden %d, %d heads, seq %d, (t,p,d)=(%d,%d,%d) %s, "
        "%lld steps\n",
        spec.name().c_str(), spec.model().num_layers(), spec.model().hidden_size(),
        spec.model().num_heads(), spec.model().seq_length(), par.tensor(), par.pipeline(),
        par.data(), Schedule_Name(par.schedule()).c_str(), steps);
    std::fflush(stdout);
  }
  if (narrator && trainer->completed_steps() >= steps) {
    std::printf("train: the checkpoint is at step %lld, train.steps is %lld: nothing to do\n",
                static_cast<long long>(trainer->completed_steps()), steps);
    std::fflush(stdout);
  }
  while (trainer->completed_steps() < steps) {
    ASSIGN_OR_RETURN(const StepMetrics metrics, trainer->Step());
    if (narrator) {
      std::printf("%s\n", StepProgressLine(metrics, steps).c_str());
      std::fflush(stdout);
    }
    if (trainer->computes_loss()) metrics_file.Append(StepMetricsJson(metrics));
    const PipelineTimings& timings = trainer->last_pipeline_timings();
    timings_file.Append(
        absl::StrFormat("{\"step\":%d,\"rank\":%d,\"pp_stage\":%d,\"step_seconds\":%.6f,"
                        "\"pipeline_seconds\":%.6f,\"compute_seconds\":%.6f,\"wait_seconds\":%.6f}",
                        metrics.step(), rank, coords.pp_rank(), metrics.step_seconds(),
                        timings.compute_seconds + timings.wait_seconds, timings.compute_seconds,
                        timings.wait_seconds));
    if (setup.coordinator != nullptr) RETURN_IF_ERROR(setup.coordinator->ReportStep(metrics));
    if (!checkpoint_dir.empty() && checkpoint_every > 0 && metrics.step() % checkpoint_every == 0) {
      RETURN_IF_ERROR(save());
    }
  }
  if (!checkpoint_dir.empty() && last_saved != trainer->completed_steps()) {
    RETURN_IF_ERROR(save());
  }
  const std::string weights = absl::GetFlag(FLAGS_save_weights);
  if (!weights.empty()) RETURN_IF_ERROR(trainer->SaveWeights(weights));
  return absl::OkStatus();
}

// The rank and mode the terminate handler reports with (it may run on any thread).
std::atomic<int> current_rank{0};
std::atomic<bool> coordinator_mode{false};

// The last line of defence against input the checks above missed: an exception that
// escapes a thread (std::bad_alloc in a kernel's worker, say) ends the rank with one line
// and an exit status instead of abort()'s core dump. In coordinator mode exit status 2
// tells the worker daemon to report for the rank (with this line, the log's last).
[[noreturn]] void OnTerminate() {
  // No allocation here: memory may be what ran out.
  const int rank = current_rank.load();
  constexpr char kOutOfMemory[] = "in a worker thread: the rank needs more memory than it can get";
  if (const std::exception_ptr current = std::current_exception(); current != nullptr) {
    try {
      std::rethrow_exception(current);
    } catch (const std::bad_alloc& e) {
      std::fprintf(stderr, "train[rank %d]: RESOURCE_EXHAUSTED: std::bad_alloc (%s) %s\n", rank,
                   e.what(), kOutOfMemory);
    } catch (const std::length_error& e) {
      std::fprintf(stderr, "train[rank %d]: RESOURCE_EXHAUSTED: std::length_error (%s) %s\n", rank,
                   e.what(), kOutOfMemory);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "train[rank %d]: INTERNAL: uncaught exception: %s\n", rank, e.what());
    } catch (...) {
      std::fprintf(stderr, "train[rank %d]: INTERNAL: uncaught exception of an unknown type\n",
                   rank);
    }
  } else {
    std::fprintf(stderr, "train[rank %d]: INTERNAL: std::terminate without an exception\n", rank);
  }
  std::fflush(stderr);
  std::_Exit(coordinator_mode.load() ? 2 : 1);
}

// Runs `body`, turning an allocation failure into RESOURCE_EXHAUSTED (the estimate in
// Trainer::Create refuses what cannot fit; this catches what it did not foresee).
template <typename Body>
absl::Status CatchingOutOfMemory(Body body) {
  try {
    return body();
  } catch (const std::bad_alloc& e) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "out of memory: an allocation failed (std::bad_alloc: ", e.what(),
        "); the spec needs more memory than this rank can get (physical memory or ulimit -v)"));
  } catch (const std::length_error& e) {
    return absl::ResourceExhaustedError(
        absl::StrCat("out of memory: a buffer larger than the address space was requested "
                     "(std::length_error: ",
                     e.what(), "); the spec's sizes are too large for this rank"));
  }
}

int Run() {
  std::set_terminate(OnTerminate);
  // Before any thread exists (see ShutdownSignal); never destroyed, as its watcher
  // thread never ends.
  static ShutdownSignal* const signals = new ShutdownSignal;
  WatchForAbort(signals);
  const int threads = absl::GetFlag(FLAGS_threads);
  cpu::SetCpuThreads(threads > 0 ? threads : cpu::AvailableCores());
  const std::string assignment_path = absl::GetFlag(FLAGS_assignment);
  int rank = absl::GetFlag(FLAGS_rank);
  current_rank = rank;
  coordinator_mode = !assignment_path.empty();
  absl::StatusOr<RankSetup> setup = absl::UnknownError("not set up");
  const absl::Status set_up = CatchingOutOfMemory([&] {
    setup = assignment_path.empty() ? StaticSetup(rank) : CoordinatorSetup(assignment_path);
    return setup.status();
  });
  if (!set_up.ok()) setup = set_up;
  // Exit codes in coordinator mode: 0 done, 1 failed and reported, 2 failed without a
  // report (the worker daemon then reports for the rank).
  if (!setup.ok()) return Fail(rank, setup.status()) + (assignment_path.empty() ? 0 : 1);
  rank = setup->assignment.rank().global_rank();
  current_rank = rank;
  const absl::Status result = CatchingOutOfMemory([&] { return Train(*setup); });
  if (setup->coordinator != nullptr) {
    absl::Status reported = setup->coordinator->ReportResult(setup->assignment, result);
    if (!reported.ok()) {
      std::fprintf(stderr, "train[rank %d]: could not report the result: %s\n", rank,
                   reported.ToString().c_str());
      if (!result.ok()) Fail(rank, result);
      return 2;
    }
  }
  if (!result.ok()) return Fail(rank, result);
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
