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
//
// The rank's lifecycle is worker/rank_run.h (RunRank, unit-tested); this file turns the
// flags into RankRunOptions and owns what belongs to the process: signals, the handler
// of escaped exceptions, the result report and the exit status.
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <new>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/shutdown_signal.h"
#include "google/protobuf/util/json_util.h"
#include "kernels/cpu_peak.h"
#include "kernels/cpu_threads.h"
#include "proto/cluster.pb.h"
#include "worker/device_probe.h"
#include "worker/engine/cuda/cuda_device_probe.h"
#include "worker/rank_run.h"
#include "worker/slurm_task.h"

ABSL_FLAG(std::string, spec, "", "job spec JSON file (static mode)");
ABSL_FLAG(std::string, assignment, "",
          "binary Assignment proto from the worker daemon (coordinator mode; replaces "
          "--spec, --rank, --world_size and --rendezvous_dir)");
ABSL_FLAG(std::string, coordinator, mtrain::RankRunOptions().coordinator,
          "coordinator address (coordinator mode)");
ABSL_FLAG(std::string, token_file, "", "bearer token for the coordinator (coordinator mode)");
ABSL_FLAG(int, rank, 0, "this process's global rank");
ABSL_FLAG(int, world_size, 0,
          "number of ranks; must equal tensor * pipeline * data of the spec (0: take it "
          "from the spec)");
ABSL_FLAG(std::string, rendezvous_dir, "",
          "directory the ranks rendezvous through (required when the world has more than "
          "one rank; must start empty)");
ABSL_FLAG(std::string, host, mtrain::RankRunOptions().host,
          "address this rank's connections listen on");
ABSL_FLAG(std::string, metrics_jsonl, "",
          "append one JSON object per step to this file (ranks that compute the loss)");
ABSL_FLAG(int, measure_cuda_device, -1,
          "measure CUDA device N for the planner (GEMM rates, copy bandwidth, free memory: "
          "worker/engine/cuda/cuda_device_probe.h), print it as one DeviceProfile JSON line "
          "(proto/cluster.proto) and exit; a CUDA worker daemon runs this at start");
ABSL_FLAG(int, threads, 0, "CPU threads for GEMMs and kernels; 0 = all cores");
ABSL_FLAG(std::string, save_weights, "",
          "after the last step, write the full weights (global tensor names) as safetensors "
          "(gathered to rank 0, which writes the file)");
ABSL_FLAG(int, steps, 0, "override train.steps (0 = use the spec)");
ABSL_FLAG(absl::Duration, collective_timeout, mtrain::RankRunOptions().collective_timeout,
          "bound on rendezvous and on every collective or message");
ABSL_FLAG(double, bucket_mb, mtrain::RankRunOptions().bucket_mb,
          "data-parallel gradient bucket size in MiB");
ABSL_FLAG(std::string, gpu_collectives, mtrain::RankRunOptions().gpu_collectives,
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
ABSL_FLAG(
    std::string, evaluate, "",
    "evaluate instead of training: perplexity, cloze, choice or race on --eval_data, with the "
    "weights --resume_from or train.init_from give (worker/evaluation/eval_tasks.h); "
    "prints `evaluation: {JSON}`; data-parallel replica 0 runs it");
ABSL_FLAG(std::string, eval_data, "",
          "--evaluate's input: text (perplexity) or JSON lines ({\"text\"} for cloze, "
          "{\"ctx\", \"endings\", \"label\"} for choice)");
ABSL_FLAG(std::string, eval_output, "", "--evaluate: also write the result's JSON here");
ABSL_FLAG(int, overlapping_eval, 0,
          "--evaluate=perplexity: each window after the first starts this many tokens later and "
          "scores only its last this many targets (Megatron's --overlapping-eval); 0: "
          "model.seq_length (no overlap)");
ABSL_FLAG(bool, wikitext_detokenize, false,
          "--evaluate=perplexity: undo WikiText-103's tokenized spacing first (Megatron's "
          "detokenizer)");
ABSL_FLAG(std::string, generate, "",
          "generate instead of training: continue this prompt (the job's tokenizer) with the "
          "weights --resume_from or train.init_from give, on the CPU engine (any tensor and "
          "pipeline layout without interleaving); prints `generation: {JSON}`");
ABSL_FLAG(int, max_new_tokens, 64, "--generate: at most this many new tokens");
ABSL_FLAG(double, temperature, 0, "--generate: 0 is greedy; otherwise logits / temperature");
ABSL_FLAG(int, top_k, 0, "--generate: sample among the k most likely tokens (0: all)");
ABSL_FLAG(double, top_p, 1.0,
          "--generate: sample among the fewest most likely tokens reaching this probability");
ABSL_FLAG(uint64_t, sample_seed, 0, "--generate: the sampling's random numbers");
ABSL_FLAG(bool, kv_cache, true,
          "--generate: keep keys and values (false: rerun the whole context for each token)");
ABSL_FLAG(std::string, stage_timings, "",
          "every rank appends one JSON object per step: its pipeline stage, step time and "
          "the part spent computing (for measuring the pipeline bubble)");

namespace mtrain {
namespace {

int Fail(int rank, const absl::Status& status) {
  std::fprintf(stderr, "train[rank %d]: %s\n", rank, status.ToString().c_str());
  return 1;
}

// Aborted by SIGTERM/SIGINT; never destroyed (the watcher thread may use it at exit).
RankAbort* const rank_abort = new RankAbort;

// SIGTERM/SIGINT (the worker daemon's abort, launch's shutdown, Ctrl-C): abort the
// communicators so a blocked collective returns and the rank can report; give up after a
// few seconds.
void WatchForAbort(ShutdownSignal* signals) {
  std::thread([signals] {
    const int number = signals->WaitForSignal();
    std::fprintf(stderr, "train: signal %d: aborting communicators\n", number);
    rank_abort->Abort();
    absl::SleepFor(absl::Seconds(5));
    std::fprintf(stderr, "train: still running 5s after the abort: exiting\n");
    std::_Exit(128 + number);
  }).detach();
}

RankRunOptions OptionsFromFlags() {
  RankRunOptions options;
  options.spec_path = absl::GetFlag(FLAGS_spec);
  options.assignment_path = absl::GetFlag(FLAGS_assignment);
  options.coordinator = absl::GetFlag(FLAGS_coordinator);
  options.token_file = absl::GetFlag(FLAGS_token_file);
  options.rank = absl::GetFlag(FLAGS_rank);
  options.world_size = absl::GetFlag(FLAGS_world_size);
  options.rendezvous_dir = absl::GetFlag(FLAGS_rendezvous_dir);
  options.host = absl::GetFlag(FLAGS_host);
  options.metrics_jsonl = absl::GetFlag(FLAGS_metrics_jsonl);
  options.threads = absl::GetFlag(FLAGS_threads);
  options.save_weights = absl::GetFlag(FLAGS_save_weights);
  options.steps = absl::GetFlag(FLAGS_steps);
  options.collective_timeout = absl::GetFlag(FLAGS_collective_timeout);
  options.bucket_mb = absl::GetFlag(FLAGS_bucket_mb);
  options.gpu_collectives = absl::GetFlag(FLAGS_gpu_collectives);
  options.checkpoint_dir = absl::GetFlag(FLAGS_checkpoint_dir);
  options.resume_from = absl::GetFlag(FLAGS_resume_from);
  options.data_root = absl::GetFlag(FLAGS_data_root);
  options.stage_timings = absl::GetFlag(FLAGS_stage_timings);
  options.evaluate = absl::GetFlag(FLAGS_evaluate);
  options.eval_data = absl::GetFlag(FLAGS_eval_data);
  options.eval_output = absl::GetFlag(FLAGS_eval_output);
  options.overlapping_eval = absl::GetFlag(FLAGS_overlapping_eval);
  options.wikitext_detokenize = absl::GetFlag(FLAGS_wikitext_detokenize);
  options.generate = absl::GetFlag(FLAGS_generate);
  options.max_new_tokens = absl::GetFlag(FLAGS_max_new_tokens);
  options.temperature = absl::GetFlag(FLAGS_temperature);
  options.top_k = absl::GetFlag(FLAGS_top_k);
  options.top_p = absl::GetFlag(FLAGS_top_p);
  options.sample_seed = absl::GetFlag(FLAGS_sample_seed);
  options.kv_cache = absl::GetFlag(FLAGS_kv_cache);
  return options;
}

// Static mode under `srun` (issue 38): rank, world and rendezvous from Slurm's variables
// unless given as flags; in coordinator mode (the worker daemon's ranks, which inherit the
// daemon's Slurm variables) nothing changes.
absl::Status ApplySlurmTask(RankRunOptions* options) {
  if (!options->assignment_path.empty() || options->spec_path.empty()) return absl::OkStatus();
  // --rank or --world_size away from their defaults (launch, or by hand) win.
  if (options->rank != 0 || options->world_size != 0) return absl::OkStatus();
  absl::StatusOr<std::optional<SlurmTask>> task = SlurmTaskFromEnvironment(
      [](const char* name) { return static_cast<const char*>(std::getenv(name)); });
  if (!task.ok()) return task.status();
  if (!task->has_value()) return absl::OkStatus();
  const SlurmTask& slurm = **task;
  options->rank = slurm.rank;
  options->world_size = slurm.world_size;
  options->world_size_source = "SLURM_NTASKS (srun --ntasks) = ";
  options->local_rank = slurm.local_rank;
  if (options->rendezvous_dir.empty() && slurm.world_size > 1) {
    options->rendezvous_dir = SlurmRendezvousDir(slurm);
    std::error_code error;
    std::filesystem::create_directories(options->rendezvous_dir, error);
    if (error) {
      return absl::FailedPreconditionError(absl::StrCat(
          "cannot create the rendezvous directory ", options->rendezvous_dir, ": ", error.message(),
          " (pass --rendezvous_dir=DIR on a file system every node shares)"));
    }
  }
  // Across nodes a rank must listen where the others can reach it: its node's name (the
  // first node's, for rank 0, is SLURM_STEP_NODELIST's first host).
  if (options->host == RankRunOptions().host && slurm.nodes > 1) {
    char host[256] = {};
    if (::gethostname(host, sizeof(host) - 1) == 0) options->host = host;
  }
  std::printf(
      "train: rank %d of %d from Slurm (SLURM_PROCID, SLURM_NTASKS), local rank %d on %d "
      "node(s), first host %s, rendezvous in %s, listening on %s\n",
      slurm.rank, slurm.world_size, slurm.local_rank, slurm.nodes,
      slurm.first_host.empty() ? "?" : slurm.first_host.c_str(),
      options->rendezvous_dir.empty() ? "-" : options->rendezvous_dir.c_str(),
      options->host.c_str());
  std::fflush(stdout);
  return absl::OkStatus();
}

// The rank and mode the terminate handler reports with (it may run on any thread).
std::atomic<int> current_rank{0};
std::atomic<bool> coordinator_mode{false};

// The last line of defence against input the checks of RunRank missed: an exception that
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
  RankRunOptions options = OptionsFromFlags();
  if (absl::Status slurm = ApplySlurmTask(&options); !slurm.ok()) {
    return Fail(options.rank, slurm);
  }
  // The CPU's peak (for MFU) is measured before the kernels' threads exist: a thread
  // spinning on the core's SMT sibling would halve the FMA rate it sees.
  cpu::CpuPeakOfThisMachine();
  cpu::SetCpuThreads(options.threads > 0 ? options.threads : cpu::AvailableCores());
  const bool static_mode = options.assignment_path.empty();
  int rank = options.rank;
  current_rank = rank;
  coordinator_mode = !static_mode;
  absl::StatusOr<RankSetup> setup = absl::UnknownError("not set up");
  const absl::Status set_up = CatchingOutOfMemory([&] {
    setup = SetUpRank(options);
    return setup.status();
  });
  if (!set_up.ok()) setup = set_up;
  // Exit codes in coordinator mode: 0 done, 1 failed and reported, 2 failed without a
  // report (the worker daemon then reports for the rank).
  if (!setup.ok()) return Fail(rank, setup.status()) + (static_mode ? 0 : 1);
  rank = setup->assignment.rank().global_rank();
  current_rank = rank;
  StdoutAndFileSinks sinks(options);
  const absl::Status result =
      CatchingOutOfMemory([&] { return RunRank(*setup, options, sinks, rank_abort); });
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

namespace mtrain {
namespace {

// --measure_cuda_device: the profile a CUDA worker reports. The measured large-GEMM rates
// are stated as the peaks with matmul_efficiency 1 (what the kernels reach, as CPU
// profiles do); the small-matrix curve comes from the bf16 cubes.
int MeasureCudaDevice(int device) {
  const cuda::CudaProbeOptions options;
  absl::StatusOr<cuda::CudaDeviceMeasurement> m = cuda::MeasureCudaDevice(device, options);
  if (!m.ok()) {
    std::fprintf(stderr, "train: --measure_cuda_device=%d: %s\n", device,
                 m.status().ToString().c_str());
    return 1;
  }
  DeviceProfile profile;
  profile.set_name(m->name);
  profile.set_fp32_flops(m->fp32_flops);
  profile.set_half_flops(m->bf16_flops);
  profile.set_matmul_efficiency(1.0);
  profile.set_matmul_half_size(
      MatmulHalfSize(options.small, m->bf16_small_flops, options.large, m->bf16_flops));
  profile.set_memory_bandwidth_bytes_per_second(m->copy_bytes_per_second);
  profile.set_memory_bytes(m->free_memory_bytes);
  std::string json;
  google::protobuf::util::JsonPrintOptions print;
  print.add_whitespace = false;
  const auto status = google::protobuf::util::MessageToJsonString(profile, &json, print);
  if (!status.ok()) {
    std::fprintf(stderr, "train: %s\n", status.ToString().c_str());
    return 1;
  }
  std::printf("%s\n", json.c_str());
  return 0;
}

}  // namespace
}  // namespace mtrain

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "train one rank of a GPT job without a coordinator (static mode); see README");
  absl::ParseCommandLine(argc, argv);
  if (const int device = absl::GetFlag(FLAGS_measure_cuda_device); device >= 0) {
    return mtrain::MeasureCudaDevice(device);
  }
  return mtrain::Run();
}
