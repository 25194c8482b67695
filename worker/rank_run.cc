#include "worker/rank_run.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/checkpoint_tensors.h"
#include "checkpoint/checkpoint_transfer.h"
#include "checkpoint/hf_import.h"
#include "checkpoint/hf_interchange.h"
#include "checkpoint/safetensors.h"
#include "checkpoint/shard_from_full.h"
#include "common/json_writer.h"
#include "common/scratch_dir.h"
#include "common/status_macros.h"
#include "common/step_metrics_format.h"
#include "data/bert_split_samples.h"
#include "data/data_roots.h"
#include "data/data_source.h"
#include "kernels/cpu_bf16_gemm.h"
#include "kernels/cpu_gemm_library.h"
#include "kernels/cuda_device_query.h"
#include "plan/assignment_plan.h"
#include "plan/rank_grid.h"
#include "spec/job_spec_defaults.h"
#include "spec/job_spec_validation.h"
#include "worker/engine/engine_choice.h"
#include "worker/engine/memory_limits.h"
#include "worker/engine/rank_allocation_estimate.h"
#include "worker/evaluation/eval_tasks.h"
#include "worker/evaluation/generation.h"
#include "worker/parallel/gloo_communicator.h"
#include "worker/parallel/rank_groups.h"

namespace mtrain {
namespace {

// train.eval_tasks' files, resolved inside the data roots (each opened file is the one
// checked).
absl::Status ConfineEvalTasks(const std::vector<std::string>& roots, TrainSpec* train) {
  for (EvalTask& task : *train->mutable_eval_tasks()) {
    ASSIGN_OR_RETURN(*task.mutable_data(),
                     ConfineToDataRoots("train.eval_tasks", task.data(), roots));
  }
  return absl::OkStatus();
}

// Opens a JSON-lines file for appending. O_APPEND and one write(2) per line (AppendLine):
// lines of several ranks sharing a file never interleave. `flag` names the file in errors.
absl::Status OpenJsonl(const char* flag, const std::string& path, int* fd) {
  *fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (*fd < 0) return absl::InvalidArgumentError(absl::StrCat(flag, ": cannot open ", path));
  return absl::OkStatus();
}

void AppendLine(const char* flag, int fd, const std::string& line) {
  if (fd < 0) return;
  const std::string with_newline = line + "\n";
  if (::write(fd, with_newline.data(), with_newline.size()) < 0) std::perror(flag);
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

absl::StatusOr<RankSetup> StaticSetup(const RankRunOptions& options) {
  const int rank = options.rank;
  const std::string& spec_path = options.spec_path;
  if (spec_path.empty()) return absl::InvalidArgumentError("--spec (or --assignment) is required");
  ASSIGN_OR_RETURN(JobSpec spec, LoadJobSpecFile(spec_path));
  if (spec.parallel().auto_()) {
    return absl::InvalidArgumentError(
        "parallel.auto: the coordinator chooses the layout at admission; `train` runs the "
        "layout the spec gives (`trainctl plan SPEC --cluster=FILE` prints the planner's "
        "choice to write into it) [rule: no parallel.auto in static mode]");
  }
  if (const int steps = options.steps; steps < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--steps=", steps, ": must be >= 0 (0 keeps the spec's train.steps)"));
  } else if (steps > 0) {
    spec.mutable_train()->set_steps(steps);
  }
  const ParallelSpec& par = spec.parallel();
  const int world = par.tensor() * par.pipeline() * par.data();
  const int world_flag = options.world_size;
  if (world_flag != 0 && world_flag != world) {
    return absl::InvalidArgumentError(absl::StrCat(
        options.world_size_source, world_flag, " but the spec needs tensor * pipeline * data = ",
        par.tensor(), " * ", par.pipeline(), " * ", par.data(), " = ", world, " ranks"));
  }
  if (rank < 0 || rank >= world) {
    return absl::InvalidArgumentError(
        absl::StrCat("--rank=", rank, " is outside [0, ", world, ")"));
  }
  const std::string& rendezvous_dir = options.rendezvous_dir;
  if (world > 1 && rendezvous_dir.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--rendezvous_dir is required for a world of ", world, " ranks"));
  }
  if (const std::string& roots_flag = options.data_root; !roots_flag.empty()) {
    ASSIGN_OR_RETURN(const std::vector<std::string> roots, ParseDataRoots(roots_flag));
    ASSIGN_OR_RETURN(*spec.mutable_data(), ConfineDataSpec(spec.data(), roots));
    if (!options.eval_data.empty()) {
      RETURN_IF_ERROR(ConfineToDataRoots("--eval_data", options.eval_data, roots).status());
    }
    RETURN_IF_ERROR(ConfineEvalTasks(roots, spec.mutable_train()));
    if (!spec.train().init_from().empty()) {
      ASSIGN_OR_RETURN(*spec.mutable_train()->mutable_init_from(),
                       ConfineToDataRoots("train.init_from", spec.train().init_from(), roots));
      // A directory or an index leads to more files (shards, config.json): each must lie
      // inside the roots too (a symlinked shard could point anywhere).
      absl::StatusOr<HuggingFaceFiles> files = FindHuggingFaceFiles(spec.train().init_from());
      if (files.ok()) {
        std::vector<std::string> opened = files->safetensors;
        if (!files->config.empty()) opened.push_back(files->config);
        for (const std::string& file : opened) {
          RETURN_IF_ERROR(ConfineToDataRoots("train.init_from", file, roots).status());
        }
      }
    }
  }
  ASSIGN_OR_RETURN(std::vector<Assignment> plan, PlanAssignments(spec, "static", 1, {}));
  RankSetup setup;
  setup.assignment = std::move(plan[rank]);
  setup.host = options.host;
  if (world > 1) {
    ASSIGN_OR_RETURN(setup.store, DirectoryStore::Open(rendezvous_dir));
  }
  return setup;
}

absl::StatusOr<RankSetup> CoordinatorSetup(const RankRunOptions& options) {
  const std::string& path = options.assignment_path;
  if (options.steps != 0) {
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
  // (RunRank checks it, so that the refusal is reported as the rank's result).
  const std::string& roots_flag = options.data_root;
  setup.data_roots = DefaultDataRoots();
  if (!roots_flag.empty()) {
    ASSIGN_OR_RETURN(setup.data_roots, ParseDataRoots(roots_flag));
  }
  ASSIGN_OR_RETURN(std::string token, ReadTokenFile(options.token_file));
  setup.coordinator = std::make_unique<CoordinatorClient>(options.coordinator, std::move(token));
  setup.store = std::make_unique<CoordinatorKeyValueStore>(setup.coordinator.get(),
                                                           setup.assignment.rendezvous_prefix());
  setup.host = setup.assignment.self().host();
  if (setup.host.empty()) setup.host = "127.0.0.1";
  return setup;
}

}  // namespace

absl::StatusOr<RankSetup> SetUpRank(const RankRunOptions& options) {
  return options.assignment_path.empty() ? StaticSetup(options) : CoordinatorSetup(options);
}

StdoutAndFileSinks::StdoutAndFileSinks(const RankRunOptions& options)
    : metrics_path_(options.metrics_jsonl), timings_path_(options.stage_timings) {}

StdoutAndFileSinks::~StdoutAndFileSinks() {
  if (metrics_fd_ >= 0) ::close(metrics_fd_);
  if (timings_fd_ >= 0) ::close(timings_fd_);
}

absl::Status StdoutAndFileSinks::Open(bool computes_loss) {
  if (!metrics_path_.empty() && computes_loss) {
    RETURN_IF_ERROR(OpenJsonl("--metrics_jsonl", metrics_path_, &metrics_fd_));
  }
  if (!timings_path_.empty())
    RETURN_IF_ERROR(OpenJsonl("--stage_timings", timings_path_, &timings_fd_));
  return absl::OkStatus();
}

void StdoutAndFileSinks::Log(const std::string& line) {
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}

void StdoutAndFileSinks::StepMetricsDone(const StepMetrics& metrics) {
  AppendLine("--metrics_jsonl", metrics_fd_, StepMetricsJson(metrics));
}

void StdoutAndFileSinks::StageTimings(const StageTimingsRecord& record) {
  const PipelineTimings& timings = record.timings;
  JsonObject json(JsonNumberFormat::Fixed(6));
  json.Int("step", record.step)
      .Int("rank", record.rank)
      .Int("pp_stage", record.pp_stage)
      .Number("step_seconds", record.step_seconds)
      .Number("pipeline_seconds", timings.compute_seconds + timings.wait_seconds)
      .Number("compute_seconds", timings.compute_seconds)
      .Number("wait_seconds", timings.wait_seconds);
  if (record.activation_peak_bytes >= 0) {
    json.Int("activation_peak_bytes", record.activation_peak_bytes);
  }
  AppendLine("--stage_timings", timings_fd_, json.Close());
}

void RankAbort::Abort() {
  MutexLock lock(&mutex_);
  requested_ = true;
  if (trainer_ != nullptr) trainer_->Abort();
}

absl::Status RankAbort::Attach(Trainer* trainer) {
  MutexLock lock(&mutex_);
  if (requested_) return absl::AbortedError("aborted by a signal before training");
  trainer_ = trainer;
  return absl::OkStatus();
}

void RankAbort::Detach() {
  MutexLock lock(&mutex_);
  trainer_ = nullptr;
}

namespace {

// One evaluation task's sequences through the trained model (collective; data-parallel
// replica 0 runs them), folded into its result on the ranks that compute the loss.
absl::StatusOr<EvalResult> Evaluate(Trainer& trainer, const JobSpec& spec, const EvalTask& task,
                                    absl::string_view data_flag) {
  if (task.data().empty()) {
    return absl::InvalidArgumentError(absl::StrCat(data_flag, ": required with the task"));
  }
  if (task.task() == "race") {
    // BERT's multiple-choice head scores each question's options (race_dataset.h).
    ASSIGN_OR_RETURN(std::unique_ptr<RaceSamples> questions,
                     OpenRaceFile(spec, task.data(), data_flag));
    ASSIGN_OR_RETURN(const Trainer::ChoiceEvaluation evaluation,
                     trainer.EvaluateMultipleChoice(*questions));
    if (evaluation.questions == 0) return EvalResult{};  // not a loss rank of replica 0
    EvalResult result;
    result.task = "race";
    result.examples = evaluation.questions;
    result.loss = evaluation.loss_sum / static_cast<double>(evaluation.questions);
    result.accuracy =
        static_cast<double>(evaluation.correct) / static_cast<double>(evaluation.questions);
    return result;
  }
  std::ifstream in(task.data(), std::ios::binary);
  if (!in) {
    return absl::NotFoundError(absl::StrCat(data_flag, ": ", task.data(), ": cannot read"));
  }
  const std::string raw((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSIGN_OR_RETURN(const SpecTokenizer tokenizer, OpenSpecTokenizer(spec.data()));
  const Encoder& encode = tokenizer.encode;
  const int seq_length = spec.model().seq_length();
  std::vector<EvalSequence> sequences;
  std::vector<int> labels;
  if (task.task() == "perplexity") {
    const std::string text = task.wikitext_detokenize() ? WikiTextDetokenize(raw) : raw;
    const int overlap = task.overlapping_eval() > 0 ? task.overlapping_eval() : seq_length;
    ASSIGN_OR_RETURN(sequences, PerplexitySequences(text, encode, seq_length, overlap));
  } else if (task.task() == "cloze") {
    ASSIGN_OR_RETURN(sequences, ClozeSequences(raw, task.data(), encode, seq_length));
  } else if (task.task() == "choice") {
    ASSIGN_OR_RETURN(sequences, ChoiceSequences(raw, task.data(), encode, seq_length, &labels));
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "--evaluate=", task.task(), ": not a task (perplexity, cloze, choice or race)"));
  }
  std::vector<std::vector<int32_t>> tokens;
  tokens.reserve(sequences.size());
  for (const EvalSequence& sequence : sequences) tokens.push_back(sequence.tokens);
  ASSIGN_OR_RETURN(const std::vector<TokenOutputs> outputs, trainer.ForwardSequences(tokens));
  if (outputs.empty()) return EvalResult{};  // not a loss rank of replica 0
  if (task.task() == "perplexity") {
    // Megatron counts the words of the text as it was given, before detokenizing.
    return PerplexityResult(sequences, outputs, CountWords(raw));
  }
  if (task.task() == "cloze") return ClozeResult(sequences, outputs);
  return ChoiceResult(sequences, outputs, labels);
}

EvalTaskResult ToProto(const EvalResult& result, const std::string& data) {
  EvalTaskResult proto;
  proto.set_task(result.task);
  proto.set_data(data);
  proto.set_examples(result.examples);
  proto.set_scored_tokens(result.scored_tokens);
  proto.set_loss(result.loss);
  proto.set_perplexity(result.perplexity);
  proto.set_adjusted_perplexity(result.adjusted_perplexity);
  proto.set_words(result.words);
  proto.set_accuracy(result.accuracy);
  proto.set_accuracy_norm(result.accuracy_norm);
  return proto;
}

// `request`'s prompt continued by the trained model (collective over the replica's ranks;
// every rank returns the same). Errors name `field`, where the prompt came from.
absl::StatusOr<GeneratedText> GenerateText(Trainer& trainer, const JobSpec& spec,
                                           const SpecTokenizer& tokenizer,
                                           const GenerationPrompt& request, bool kv_cache,
                                           absl::string_view field) {
  const std::vector<int32_t> prompt = tokenizer.encode(request.prompt());
  GenerationOptions generation;
  generation.sampling.temperature = request.temperature();
  generation.sampling.top_k = request.top_k();
  generation.sampling.top_p = request.has_top_p() ? request.top_p() : kDefaultTopP;
  generation.sampling.seed = request.seed();
  generation.max_new_tokens =
      request.has_max_new_tokens() ? request.max_new_tokens() : kDefaultMaxNewTokens;
  generation.stop_token = tokenizer.end_of_document;
  generation.kv_cache = kv_cache;
  absl::StatusOr<GenerationResult> result =
      Generate(trainer.engine(), spec.model().seq_length(), prompt, generation);
  if (!result.ok()) {
    return absl::Status(result.status().code(),
                        absl::StrCat(field, ": ", result.status().message()));
  }
  const double seconds = result->prompt_seconds + result->decode_seconds;
  const size_t n = result->tokens.size();
  GeneratedText out;
  out.set_prompt(request.prompt());
  out.set_prompt_tokens(static_cast<int32_t>(prompt.size()));
  out.set_text(tokenizer.decode(result->tokens));
  for (const int32_t token : result->tokens) out.add_tokens(token);
  out.set_stopped(result->stopped);
  out.set_prompt_seconds(result->prompt_seconds);
  out.set_tokens_per_second(seconds > 0 ? static_cast<double>(n) / seconds : 0);
  out.set_decode_tokens_per_second(
      n > 1 && result->decode_seconds > 0 ? (n - 1) / result->decode_seconds : 0);
  out.set_kv_cache(kv_cache);
  return out;
}

// train.eval_tasks and train.generate on the trainer's current weights, into `metrics`
// on the ranks that report the loss (the tasks run on data-parallel replica 0, the
// prompts on every replica); the narrator logs each result, after `prefix`.
absl::Status EvaluateCheckpoint(Trainer& trainer, const JobSpec& spec, bool narrator,
                                absl::string_view prefix, RankRunSinks& sinks,
                                StepMetrics* metrics) {
  for (const EvalTask& task : spec.train().eval_tasks()) {
    ASSIGN_OR_RETURN(const EvalResult result, Evaluate(trainer, spec, task, "train.eval_tasks"));
    if (result.task.empty()) continue;  // computed elsewhere
    *metrics->add_evals() = ToProto(result, task.data());
    if (narrator) sinks.Log(absl::StrCat("evaluation", prefix, ": ", result.ToJson()));
  }
  if (spec.train().generate().empty()) return absl::OkStatus();
  ASSIGN_OR_RETURN(const SpecTokenizer tokenizer, OpenSpecTokenizer(spec.data()));
  for (const GenerationPrompt& request : spec.train().generate()) {
    ASSIGN_OR_RETURN(GeneratedText text, GenerateText(trainer, spec, tokenizer, request,
                                                      /*kv_cache=*/true, "train.generate"));
    if (narrator) sinks.Log(absl::StrCat("generation", prefix, ": ", GeneratedTextJson(text)));
    if (trainer.computes_loss()) *metrics->add_generations() = std::move(text);
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status RunRank(RankSetup& setup, const RankRunOptions& options, RankRunSinks& sinks,
                     RankAbort* abort) {
  if (setup.coordinator != nullptr) {
    // Before the rendezvous: the other ranks are told at once through the coordinator.
    ASSIGN_OR_RETURN(*setup.assignment.mutable_spec()->mutable_data(),
                     ConfineDataSpec(setup.assignment.spec().data(), setup.data_roots));
    RETURN_IF_ERROR(
        ConfineEvalTasks(setup.data_roots, setup.assignment.mutable_spec()->mutable_train()));
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
                          : options.collective_timeout;
  if (grid.world_size() > 1) {
    ASSIGN_OR_RETURN(device, CreateGlooDevice(setup.host));
    transport.store = setup.store.get();
    transport.device = &*device;
  }
  ASSIGN_OR_RETURN(RankGroups groups, ConnectRankGroups(grid, rank, transport));
  // The engine is chosen here, once, and handed to the Trainer. CUDA ranks sum their
  // gradients and tensor-parallel activations and pass pipeline messages with NCCL on the
  // GPU; every rank of the job decides alike, so all or none join the NCCL world.
  const std::string& gpu_collectives = options.gpu_collectives;
  if (gpu_collectives != "nccl" && gpu_collectives != "gloo") {
    return absl::InvalidArgumentError(
        absl::StrCat("--gpu_collectives=", gpu_collectives, ": must be nccl or gloo"));
  }
  const absl::StatusOr<std::vector<CudaDeviceInfo>> gpus = QueryCudaDevices();
  ASSIGN_OR_RETURN(
      const EngineChoice engine,
      ChooseEngine(spec, gpus.status(), cpu::CpuBf16Support(cpu::CpuFeaturesOfThisMachine())));
  TrainerOptions trainer_options;
  trainer_options.engine = engine;
  if (engine.kind == EngineKind::kCuda) {
    trainer_options.cuda_device =
        CudaDeviceForRank(rank, options.local_rank, static_cast<int>(gpus->size()));
  }
  if (engine.kind == EngineKind::kCuda && gpu_collectives == "nccl" && grid.world_size() > 1) {
    RETURN_IF_ERROR(
        ConnectDeviceGroups(grid, rank, transport, trainer_options.cuda_device, &groups));
  }
  trainer_options.cpu_threads = options.threads;
  trainer_options.bucket_elements =
      std::max<size_t>(1, static_cast<size_t>(options.bucket_mb * (1 << 20) / 4));
  ASSIGN_OR_RETURN(std::unique_ptr<Trainer> trainer,
                   Trainer::Create(assignment, std::move(groups), trainer_options));
  if (engine.kind == EngineKind::kCpu) {
    // Every rank's machine may differ: each says when its GEMM kernel is weaker than its
    // processor (kernels/cpu_gemm_library.h).
    if (const std::string warning = cpu::EnsureBestGemmKernel().Warning(); !warning.empty()) {
      sinks.Log(absl::StrCat("warning: rank ", rank, ": ", warning));
    }
  }
  if (rank == 0) {
    sinks.Log(trainer->engine_note());
    sinks.Log(trainer->data_note());
    const RankAllocationEstimate& memory = trainer->memory_estimate();
    sinks.Log(absl::StrFormat("memory: about %s on this rank (%s)", HumanBytes(memory.total()),
                              memory.Describe()));
  }
  // Detaches before the trainer is destroyed, whichever way this returns.
  struct Detacher {
    ~Detacher() {
      if (abort != nullptr) abort->Detach();
    }
    RankAbort* abort;
  } detacher{nullptr};
  if (abort != nullptr) {
    RETURN_IF_ERROR(abort->Attach(trainer.get()));
    detacher.abort = abort;
  }

  if (const std::string& resume = options.resume_from; !resume.empty()) {
    RETURN_IF_ERROR(trainer->LoadCheckpoint(resume));
  } else if (setup.coordinator == nullptr && !spec.train().init_from().empty()) {
    // Static mode reads the initial weights itself (under a coordinator they arrive as
    // the job's step-0 checkpoint); a parameters-only checkpoint re-slices them for this
    // rank like any other.
    const std::string& init_from = spec.train().init_from();
    absl::StatusOr<HuggingFaceFiles> files = FindHuggingFaceFiles(init_from);
    if (!files.ok()) {
      return absl::Status(files.status().code(),
                          absl::StrCat("train.init_from: ", files.status().message()));
    }
    // At most every parameter in float (twice a 16-bit file's bytes) plus one tensor's
    // bytes are alive together: tensors are read one at a time, and only this rank's.
    uintmax_t init_bytes = 0;
    for (const std::string& shard : files->safetensors) {
      // What has no size (/dev/zero, a FIFO) the reader refuses by name below.
      std::error_code size_error;
      const uintmax_t bytes = std::filesystem::file_size(shard, size_error);
      if (!size_error) init_bytes += bytes;
    }
    RETURN_IF_ERROR(CheckMemoryFits(
        absl::StrCat("train.init_from ", init_from), 2.0 * static_cast<double>(init_bytes),
        absl::StrCat("2 x its ", init_bytes, " bytes"), CurrentMemoryLimits()));
    // Only the tensors this rank holds (a pipeline stage's layers): the others are checked
    // in the file but never read. Each is cut to this rank's slice as it is read (a
    // tensor-parallel rank keeps 1/t of it), so the rank holds its own parameters plus
    // one whole tensor.
    std::set<std::string> mine;
    std::multimap<std::string, const ParamTensor*> shards;
    for (const ParamTensor& tensor : trainer->engine().layout().tensors()) {
      mine.insert(tensor.name);
      shards.emplace(tensor.name, &tensor);
    }
    RETURN_IF_ERROR(trainer->LoadInitialParameters([&](float* params) -> absl::Status {
      const HfTensorSink keep_slice = [&](const std::string& name, FullTensor tensor) {
        const auto [begin, end] = shards.equal_range(name);
        for (auto it = begin; it != end; ++it) {
          RETURN_IF_ERROR(CopyShardFromFull(tensor, *it->second, params));
        }
        return absl::OkStatus();
      };
      absl::Status imported =
          ImportHuggingFace(init_from, spec.model(), &mine, &keep_slice).status();
      if (!imported.ok()) {
        return absl::Status(imported.code(), absl::StrCat("train.init_from: ", imported.message()));
      }
      return absl::OkStatus();
    }));
  }
  std::string checkpoint_dir = options.checkpoint_dir;
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

  RETURN_IF_ERROR(sinks.Open(trainer->computes_loss()));
  // One rank narrates: the first that knows the loss.
  const RankCoordinates& coords = trainer->coordinates();
  const bool narrator = trainer->computes_loss() && coords.tp_rank() == 0 && coords.dp_rank() == 0;
  if (!options.generate.empty()) {
    GenerationPrompt request;
    request.set_prompt(options.generate);
    if (options.max_new_tokens < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("--max_new_tokens: ", options.max_new_tokens, " must be >= 1"));
    }
    request.set_max_new_tokens(options.max_new_tokens);
    request.set_temperature(options.temperature);
    request.set_top_k(options.top_k);
    request.set_top_p(options.top_p);
    request.set_seed(options.sample_seed);
    ASSIGN_OR_RETURN(const SpecTokenizer tokenizer, OpenSpecTokenizer(spec.data()));
    ASSIGN_OR_RETURN(const GeneratedText text, GenerateText(*trainer, spec, tokenizer, request,
                                                            options.kv_cache, "--generate"));
    if (narrator) {
      const std::string json = GeneratedTextJson(text);
      sinks.Log(absl::StrCat("generation: ", json));
      if (!options.eval_output.empty()) {
        std::ofstream out(options.eval_output, std::ios::trunc);
        out << json << "\n";
        if (!out) {
          return absl::InternalError(
              absl::StrCat("--eval_output=", options.eval_output, ": cannot write there"));
        }
      }
    }
    return absl::OkStatus();
  }
  if (spec.train().evaluate_only()) {
    // An evaluation job (`trainctl eval`, `trainctl generate`): the tasks and prompts
    // once, reported as step 1's metrics.
    StepMetrics metrics;
    metrics.set_job_id(assignment.job_id());
    metrics.set_generation(assignment.generation());
    metrics.set_global_rank(rank);
    metrics.set_step(1);
    RETURN_IF_ERROR(EvaluateCheckpoint(*trainer, spec, narrator, "", sinks, &metrics));
    if (trainer->computes_loss()) sinks.StepMetricsDone(metrics);
    if (setup.coordinator != nullptr) RETURN_IF_ERROR(setup.coordinator->ReportStep(metrics));
    return absl::OkStatus();
  }
  if (!options.evaluate.empty()) {
    EvalTask task;
    task.set_task(options.evaluate);
    task.set_data(options.eval_data);
    task.set_overlapping_eval(options.overlapping_eval);
    task.set_wikitext_detokenize(options.wikitext_detokenize);
    ASSIGN_OR_RETURN(const EvalResult result, Evaluate(*trainer, spec, task, "--eval_data"));
    if (narrator) {
      sinks.Log(absl::StrCat("evaluation: ", result.ToJson()));
      if (!options.eval_output.empty()) {
        std::ofstream out(options.eval_output, std::ios::trunc);
        out << result.ToJson() << "\n";
        if (!out) {
          return absl::InternalError(
              absl::StrCat("--eval_output=", options.eval_output, ": cannot write there"));
        }
      }
    }
    return absl::OkStatus();
  }
  const long long steps = spec.train().steps();
  // Saves the steps completed so far; the narrator says where and how long it took.
  auto save = [&]() -> absl::Status {
    const absl::Time start = absl::Now();
    ASSIGN_OR_RETURN(const std::string saved,
                     trainer->SaveCheckpoint(checkpoint_dir, uploader.get()));
    last_saved = trainer->completed_steps();
    if (narrator) {
      sinks.Log(
          absl::StrFormat("checkpoint: step %lld saved in %.2f s %s", trainer->completed_steps(),
                          absl::ToDoubleSeconds(absl::Now() - start),
                          uploader != nullptr ? "to the coordinator's store" : "in " + saved));
    }
    return absl::OkStatus();
  };
  if (narrator) {
    sinks.Log(
        absl::StrFormat("train: %s, %d layers, hidden %d, %d heads, seq %d, (t,p,d)=(%d,%d,%d) %s, "
                        "%lld steps",
                        spec.name(), spec.model().num_layers(), spec.model().hidden_size(),
                        spec.model().num_heads(), spec.model().seq_length(), par.tensor(),
                        par.pipeline(), par.data(), Schedule_Name(par.schedule()), steps));
  }
  if (narrator && trainer->completed_steps() >= steps) {
    sinks.Log(
        absl::StrFormat("train: the checkpoint is at step %lld, train.steps is %lld: nothing to do",
                        static_cast<long long>(trainer->completed_steps()), steps));
  }
  while (trainer->completed_steps() < steps) {
    ASSIGN_OR_RETURN(StepMetrics metrics, trainer->Step());
    // train.eval_tasks and train.generate at every checkpoint step, before the step is
    // reported, so the results travel with its metrics.
    const bool checkpoint_step =
        metrics.step() == steps || (checkpoint_every > 0 && metrics.step() % checkpoint_every == 0);
    if (checkpoint_step) {
      RETURN_IF_ERROR(EvaluateCheckpoint(
          *trainer, spec, narrator, absl::StrCat(" at step ", metrics.step()), sinks, &metrics));
    }
    if (narrator) sinks.Log(StepProgressLine(metrics, steps));
    if (trainer->computes_loss()) sinks.StepMetricsDone(metrics);
    StageTimingsRecord timings;
    timings.step = metrics.step();
    timings.rank = rank;
    timings.pp_stage = coords.pp_rank();
    timings.step_seconds = metrics.step_seconds();
    timings.timings = trainer->last_pipeline_timings();
    if (metrics.has_activation_memory_peak_bytes()) {
      timings.activation_peak_bytes = metrics.activation_memory_peak_bytes();
    }
    sinks.StageTimings(timings);
    if (setup.coordinator != nullptr) RETURN_IF_ERROR(setup.coordinator->ReportStep(metrics));
    if (!checkpoint_dir.empty() && checkpoint_every > 0 && metrics.step() % checkpoint_every == 0) {
      RETURN_IF_ERROR(save());
    }
  }
  if (!checkpoint_dir.empty() && last_saved != trainer->completed_steps()) {
    RETURN_IF_ERROR(save());
  }
  if (!options.save_weights.empty()) RETURN_IF_ERROR(trainer->SaveWeights(options.save_weights));
  return absl::OkStatus();
}

}  // namespace mtrain
