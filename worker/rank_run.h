// One rank's whole run, from its plan to its last checkpoint: the lifecycle `train` runs
// for every rank, whether of a static world (--spec) or handed by a worker daemon
// (--assignment). train_main.cc only turns flags into RankRunOptions and calls these.
//
//   SetUpRank   where the rank's plan and rendezvous come from: the spec planned here
//               (static mode) or the coordinator's Assignment (coordinator mode);
//   RunRank     the process groups (rendezvous through the setup's store; a world of one
//               needs none: every group is a SoloCommunicator), the engine, the trainer,
//               initial weights or a checkpoint to resume from, the step loop with its
//               reporting (RankRunSinks, and the coordinator's metrics stream), a
//               checkpoint every train.checkpoint_every steps and after the last, and the
//               final weights.
//
//   RankRunOptions options;
//   options.spec_path = "job.json";
//   options.checkpoint_dir = "/tmp/ckpt";
//   ASSIGN_OR_RETURN(RankSetup setup, SetUpRank(options));
//   StdoutAndFileSinks sinks(options);
//   RETURN_IF_ERROR(RunRank(setup, options, sinks, /*abort=*/nullptr));
//
// Errors are the run's result: INVALID_ARGUMENT for options or a spec that cannot run
// (naming the flag), and whatever the trainer, the rendezvous or the coordinator return.
#ifndef MTRAIN_WORKER_RANK_RUN_H_
#define MTRAIN_WORKER_RANK_RUN_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/mutex.h"
#include "proto/assignment.pb.h"
#include "proto/coordinator.pb.h"
#include "worker/coordinator_client.h"
#include "worker/parallel/key_value_store.h"
#include "worker/parallel/pipeline_executor.h"
#include "worker/trainer.h"

namespace mtrain {

// Every value `train`'s flags give (train_main.cc documents each flag); the defaults are
// the flags' defaults.
struct RankRunOptions {
  // Static mode: the job spec (JSON) every rank of the world plans from.
  std::string spec_path;
  // Coordinator mode (replaces spec_path, rank, world_size, rendezvous_dir): the binary
  // Assignment proto the worker daemon wrote.
  std::string assignment_path;
  std::string coordinator = "127.0.0.1:7070";
  std::string token_file;
  int rank = 0;
  int world_size = 0;  // 0: the spec's tensor * pipeline * data
  // Where world_size came from (its value follows), for the refusal when it does not fit
  // the spec.
  std::string world_size_source = "--world_size=";
  // The rank's index among the ranks on its machine (SLURM_LOCALID under srun), or -1
  // when unknown; a CUDA rank's GPU follows it (CudaDeviceForRank).
  int local_rank = -1;
  std::string rendezvous_dir;
  std::string host = "127.0.0.1";
  std::string metrics_jsonl;
  // CPU threads for GEMMs and kernels (0: all cores). Process-wide, so the caller applies
  // it (cpu::SetCpuThreads) before any of the functions below.
  int threads = 0;
  std::string save_weights;
  int steps = 0;  // overrides train.steps in static mode; 0 keeps it
  absl::Duration collective_timeout = absl::Minutes(5);
  double bucket_mb = 4.0;
  std::string gpu_collectives = "nccl";  // or "gloo"
  std::string checkpoint_dir;
  std::string resume_from;
  std::string data_root;  // comma-separated
  std::string stage_timings;
  // Evaluation instead of training (static mode): "perplexity", "cloze" or "choice" on
  // eval_data (worker/evaluation/eval_tasks.h), from the weights --resume_from or
  // train.init_from give; the narrator logs "evaluation: {JSON}" and writes it to
  // eval_output when set.
  std::string evaluate;
  std::string eval_data;
  std::string eval_output;
  int overlapping_eval = 0;  // perplexity: 0 = model.seq_length (windows do not overlap)
  bool wikitext_detokenize = false;
  // Generation instead of training (static mode; CPU engine, any tensor and pipeline
  // layout with one chunk per stage): continue this prompt
  // (worker/evaluation/generation.h); the narrator logs "generation: {JSON}" and writes it
  // to eval_output when set.
  std::string generate;
  int max_new_tokens = 64;
  double temperature = 0;  // greedy
  int top_k = 0;
  double top_p = 1.0;
  uint64_t sample_seed = 0;
  bool kv_cache = true;
};

// Where this rank's plan and rendezvous come from.
struct RankSetup {
  Assignment assignment;
  std::unique_ptr<KeyValueStore> store;            // null for a single-rank static run
  std::unique_ptr<CoordinatorClient> coordinator;  // coordinator mode only
  std::string host;                                // where this rank's connections listen
  std::vector<std::string> data_roots;             // coordinator mode: data.path's confines
};

// Static mode (options.assignment_path empty): loads and checks the spec, applies --steps
// and --data_root, plans the world and keeps this rank's assignment. Coordinator mode:
// reads the assignment and connects to the coordinator. INVALID_ARGUMENT naming the flag
// for options that cannot work (no spec, a rank outside the world, a world_size the spec
// does not have, no rendezvous_dir for several ranks, ...).
absl::StatusOr<RankSetup> SetUpRank(const RankRunOptions& options);

// One step's pipeline timings on one rank (--stage_timings: for measuring the bubble).
struct StageTimingsRecord {
  int64_t step = 0;
  int rank = 0;
  int pp_stage = 0;
  double step_seconds = 0;
  PipelineTimings timings;
  // The engine's activation peak so far (bytes), where it measures one; -1 otherwise.
  int64_t activation_peak_bytes = -1;
};

// What a run reports locally as it goes (the coordinator's metrics stream is RunRank's
// own). Called from the thread that calls RunRank.
class RankRunSinks {
 public:
  virtual ~RankRunSinks() = default;
  // Once the trainer exists, before the first step; `computes_loss`: this rank holds the
  // last pipeline stage, so StepMetricsDone will be called. An error ends the run.
  virtual absl::Status Open(bool computes_loss) { return absl::OkStatus(); }
  // One line of the rank's log, without its newline: global rank 0's engine and memory
  // notes; the narrator's (the first rank that knows the loss) header, progress and
  // checkpoint lines.
  virtual void Log(const std::string& line) = 0;
  // Every step's metrics, on ranks that compute the loss.
  virtual void StepMetricsDone(const StepMetrics& metrics) = 0;
  // Every step, on every rank.
  virtual void StageTimings(const StageTimingsRecord& record) = 0;
};

// `train`'s sinks: the log to stdout (flushed per line), step metrics as JSON lines
// appended to options.metrics_jsonl and stage timings to options.stage_timings (files
// several ranks share: one write(2) per line, so lines never interleave). Empty paths
// write nothing.
class StdoutAndFileSinks : public RankRunSinks {
 public:
  explicit StdoutAndFileSinks(const RankRunOptions& options);
  ~StdoutAndFileSinks() override;
  StdoutAndFileSinks(const StdoutAndFileSinks&) = delete;
  StdoutAndFileSinks& operator=(const StdoutAndFileSinks&) = delete;

  absl::Status Open(bool computes_loss) override;
  void Log(const std::string& line) override;
  void StepMetricsDone(const StepMetrics& metrics) override;
  void StageTimings(const StageTimingsRecord& record) override;

 private:
  const std::string metrics_path_;
  const std::string timings_path_;
  int metrics_fd_ = -1;
  int timings_fd_ = -1;
};

// Lets another thread (a signal watcher) abort a run: a run not yet training refuses to
// start (ABORTED), a training one has its communicators aborted, so a blocked collective
// returns and the rank can report.
class RankAbort {
 public:
  // Thread-safe; may be called before, during or after RunRank.
  void Abort();

  // For RunRank: while attached, Abort aborts `trainer`. ABORTED if Abort came first.
  absl::Status Attach(Trainer* trainer);
  void Detach();

 private:
  Mutex mutex_;
  Trainer* trainer_ ABSL_GUARDED_BY(mutex_) = nullptr;
  bool requested_ ABSL_GUARDED_BY(mutex_) = false;
};

// Runs the rank's lifecycle to the end (collective: every rank of the world runs it).
// In coordinator mode it confines data.path to setup.data_roots first, streams every
// step's metrics to the coordinator (its ending the stream stops the run), resumes from
// the assignment's checkpoint and uploads checkpoints to the coordinator's store.
// `abort` may be null.
absl::Status RunRank(RankSetup& setup, const RankRunOptions& options, RankRunSinks& sinks,
                     RankAbort* abort);

}  // namespace mtrain

#endif  // MTRAIN_WORKER_RANK_RUN_H_
