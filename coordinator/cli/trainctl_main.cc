// trainctl: the command-line client of the coordinator.
//
//   trainctl [flags] COMMAND [ARGS]
//
// Exit status 0 on success; 2 for a usage error (unknown command, wrong number of
// arguments, conflicting flags); otherwise 1. Every failure prints exactly one line,
// `trainctl COMMAND: REASON`, on stderr.
#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/grpc_connection.h"
#include "common/grpc_status.h"
#include "common/status_macros.h"
#include "common/step_metrics_format.h"
#include "coordinator/cli/auth_token.h"
#include "coordinator/cli/checkpoint_commands.h"
#include "coordinator/cli/checkpoint_table.h"
#include "coordinator/cli/flag_checks.h"
#include "coordinator/cli/job_table.h"
#include "coordinator/cli/job_text.h"
#include "coordinator/cli/job_watch.h"
#include "coordinator/cli/plan_report.h"
#include "coordinator/cli/progress_bar.h"
#include "coordinator/cli/worker_table.h"
#include "google/protobuf/util/json_util.h"
#include "grpcpp/grpcpp.h"
#include "plan/cluster_description.h"
#include "plan/layout_search.h"
#include "plan/placement.h"
#include "plan/step_cost_model.h"
#include "proto/coordinator.grpc.pb.h"
#include "spec/job_spec_validation.h"

ABSL_FLAG(std::string, coordinator, "127.0.0.1:7070", "coordinator gRPC address HOST:PORT");
ABSL_FLAG(bool, json, false, "print machine-readable JSON (one object per line)");
ABSL_FLAG(int, timeout_seconds, 10, "deadline of each RPC (not of a watch stream)");
ABSL_FLAG(bool, wait, false, "submit: follow the job until it ends; exit 0 only if it succeeds");
ABSL_FLAG(std::string, token, "", "bearer token sent with every RPC (prefer --token_file)");
ABSL_FLAG(std::string, token_file, "",
          "file holding the bearer token (trailing whitespace stripped)");
ABSL_FLAG(std::string, init_from, "",
          "submit: start from this HuggingFace GPT-2: a safetensors file, a save_pretrained "
          "directory (sharded too) or its index (sets train.init_from; config.json and the "
          "weights are checked against the spec, then uploaded with the job)");
// Unset (not a magic number) means the newest: any number a user types is a step, so a
// negative one can be refused instead of silently meaning something else.
ABSL_FLAG(std::optional<int64_t>, step, std::nullopt,
          "export: the checkpoint's step (default: the newest)");
ABSL_FLAG(std::string, format, "safetensors", "export: output format (safetensors)");
ABSL_FLAG(std::string, task, "",
          "eval: perplexity, cloze, choice (decoders) or race (BERT's multiple-choice head)");
ABSL_FLAG(std::string, data, "",
          "eval: the task's file, as the workers see it (inside their --data_root)");
ABSL_FLAG(int, overlapping_eval, 0, "eval --task=perplexity: Megatron's --overlapping-eval");
ABSL_FLAG(bool, wikitext_detokenize, false,
          "eval --task=perplexity: undo WikiText-103's tokenized spacing first");
ABSL_FLAG(std::string, prompt, "", "generate: the text to continue (the job's tokenizer)");
ABSL_FLAG(int, max_new_tokens, 64, "generate: at most this many new tokens");
ABSL_FLAG(double, temperature, 0, "generate: 0 is greedy; otherwise logits / temperature");
ABSL_FLAG(int, top_k, 0, "generate: sample among the k most likely tokens (0: all)");
ABSL_FLAG(double, top_p, 1.0,
          "generate: sample among the fewest most likely tokens reaching this probability");
ABSL_FLAG(uint64_t, sample_seed, 0, "generate: the sampling's random numbers");
ABSL_FLAG(std::string, state, "",
          "list: only jobs in these states, comma-separated (e.g. running,failed)");
ABSL_FLAG(std::string, name, "", "list: only jobs whose name starts with this");
ABSL_FLAG(int64_t, limit, 0, "list: at most this many jobs, oldest first (0: every job)");
ABSL_FLAG(bool, wide, false, "workers: add each worker's measured device profile");
ABSL_FLAG(std::string, cluster, "",
          "plan: a cluster description (protobuf JSON of proto/cluster.proto; examples in "
          "deploy/clusters/) instead of the coordinator's live workers");
ABSL_FLAG(int, workers, 0, "plan: how many devices (workers) to plan for (0: all of them)");
ABSL_FLAG(double, tokens, 0, "plan: also estimate the time to train this many tokens");

namespace mtrain {
namespace {

constexpr const char* kUsage = R"(trainctl: drive the training coordinator

usage: trainctl [flags] COMMAND [ARGS]

commands:
  workers               list registered workers (--json: one JSON object per worker;
                        --wide: with each one's measured GEMM rate and memory bandwidth)
  plan SPEC.json        the fastest layouts (t, p, d, v, micro batch, recompute) the cost
                        model predicts for the spec, on the coordinator's live workers or on
                        --cluster=FILE, --workers=N of them; every rejected layout with its
                        reason; --tokens=T adds the time to train T tokens
  remove-worker ID      forget a dead worker (decommissioned or renamed): it leaves the
                        list and the worker-lost alert; refused while it is alive
  validate SPEC.json    check a job spec locally and print it with defaults filled in
  submit SPEC.json      validate locally, submit, print the job id; with --wait follow the
                        job with a progress line and exit 0 only if it SUCCEEDED
  status JOB            summarise one job, with the results of its last evaluated step and
                        of the last eval or generate run on it (--json: the JobStatus as
                        protobuf JSON)
  watch JOB             follow a job until it ends (--json: one StepMetrics JSON line per
                        step, the format of `train --metrics_jsonl`)
  list                  table of jobs, oldest first (--json: one JobStatus JSON object per
                        job); --state=running,failed, --name=PREFIX and --limit=N narrow it
  cancel JOB            cancel a job
  delete JOB            delete an ended job with its events, steps and checkpoints (a
                        running job is refused: cancel it first)
  events JOB            the job's event log (submitted, state changes, placements, failures,
                        checkpoints, resumes)
  evals JOB             the results of the job's train.eval_tasks and train.generate and
                        of `trainctl eval` and `trainctl generate` runs on it, one line per
                        task or prompt and checkpoint step: "step N: {task, data, loss,
                        perplexity or accuracy, ...}", "step N: {prompt, text, ...}"
                        (--json: {"step":N,"kind":"evaluation"|"generation","result":{...}})
  eval JOB              evaluate a checkpoint of the job on the cluster's workers:
                        --task=perplexity|cloze|choice --data=FILE (as the workers see it),
                        --step=N (default the newest), --overlapping_eval=N,
                        --wikitext_detokenize; waits and prints "JOB step N: {...}"
  generate JOB          continue --prompt=TEXT with a checkpoint of the job on the
                        cluster's workers: --step=N (default the newest),
                        --max_new_tokens=N (64), --temperature=T (0: greedy), --top_k=K,
                        --top_p=P, --sample_seed=S; waits and prints the prompt and its
                        continuation (--json: the result object)
  checkpoints JOB       the job's stored checkpoints (--json: one CheckpointInfo per line)
  export JOB OUT        write a checkpoint (--step=N, default the newest) to directory OUT as
                        HuggingFace GPT-2 (--format=safetensors): model.safetensors and
                        config.json, loadable by transformers' GPT2LMHeadModel
  help                  this text

flags:
  --coordinator=HOST:PORT   coordinator address (default 127.0.0.1:7070)
  --json                    JSON output
  --timeout_seconds=N       deadline of each RPC (default 10; watch streams have none)
  --wait                    submit: follow the job until it ends
  --init-from=PATH          submit: start from a HuggingFace GPT-2 (safetensors file,
                            save_pretrained directory, or shard index)
  --step=N                  export: which checkpoint (default the newest)
  --format=safetensors      export: the output format
  --state=S1,S2             list: only jobs in these states (pending, placing, running,
                            succeeded, failed, cancelled)
  --name=PREFIX             list: only jobs whose name starts with PREFIX
  --limit=N                 list: at most N jobs (default 0: every job)
  --token=STRING            bearer token sent with every RPC
  --token_file=FILE         read the bearer token from FILE (trailing whitespace stripped)

exit status: 0 success; 2 usage error; 1 anything else, with one line on stderr.
)";

// Without a terminal the progress line is printed at most this often (plus once at the
// end): often enough to show the job is alive, rarely enough to keep a long job's log short.
constexpr absl::Duration kPlainProgressInterval = absl::Seconds(10);

// A failed command: one line on stderr (newlines in a server message are flattened so
// the line stays one), exit status 1.
int FailWithReason(const std::string& command, const std::string& reason) {
  const std::string line = absl::StrReplaceAll(reason, {{"\r", " "}, {"\n", " "}});
  std::fflush(stdout);
  std::fprintf(stderr, "trainctl %s: %s\n", command.c_str(), line.c_str());
  return 1;
}

int Fail(const std::string& command, const absl::Status& status) {
  std::string reason = status.ToString();
  if (status.code() == absl::StatusCode::kUnimplemented && status.message().empty()) {
    reason += "this coordinator does not serve the RPC yet";
  }
  return FailWithReason(command, reason);
}

// A usage error: one line on stderr, exit status 2.
int UsageError(const std::string& command, const std::string& reason) {
  const std::string who = command.empty() ? "trainctl" : absl::StrCat("trainctl ", command);
  std::fprintf(stderr, "%s: %s (see trainctl help)\n", who.c_str(), reason.c_str());
  return 2;
}

class Client {
 public:
  Client(const std::string& address, std::string token)
      : stub_(Coordinator::NewStub(CoordinatorChannel(address))), token_(std::move(token)) {}

  Coordinator::Stub* stub() { return stub_.get(); }

  // A context with the --timeout_seconds deadline, for unary RPCs.
  std::unique_ptr<grpc::ClientContext> Context() {
    std::unique_ptr<grpc::ClientContext> context = StreamContext();
    context->set_deadline(std::chrono::system_clock::now() +
                          std::chrono::seconds(absl::GetFlag(FLAGS_timeout_seconds)));
    return context;
  }

  // For checkpoint transfers: the token, and an hour for however large the files are.
  PrepareContext Transfer() const {
    return [this](grpc::ClientContext* context) {
      if (!token_.empty()) {
        context->AddMetadata(kAuthorizationMetadataKey, absl::StrCat(kBearerPrefix, token_));
      }
      context->set_deadline(std::chrono::system_clock::now() + std::chrono::hours(1));
    };
  }

  // No deadline: a watch lasts as long as the job.
  std::unique_ptr<grpc::ClientContext> StreamContext() {
    auto context = std::make_unique<grpc::ClientContext>();
    if (!token_.empty()) {
      context->AddMetadata(kAuthorizationMetadataKey, absl::StrCat(kBearerPrefix, token_));
    }
    return context;
  }

  // The call's status, with a fix suggested when the coordinator wanted a token.
  absl::Status Check(const grpc::Status& status) const {
    return ExplainUnauthenticated(FromGrpcStatus(status), !token_.empty());
  }

 private:
  std::unique_ptr<Coordinator::Stub> stub_;
  std::string token_;
};

std::string ToJsonLine(const google::protobuf::Message& message) {
  std::string json;
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  (void)google::protobuf::util::MessageToJsonString(message, &json, options);
  return json;
}

// How a followed job is shown on stdout.
enum class WatchOutput {
  kJsonSteps,  // --json: one StepMetricsJson line per new step, nothing else.
  kTerminal,   // a TTY: notices as lines, progress as one line redrawn with '\r'.
  kPlainLines  // a pipe or file: notices and a progress line every kPlainProgressInterval.
};

WatchOutput ChooseWatchOutput() {
  if (absl::GetFlag(FLAGS_json)) return WatchOutput::kJsonSteps;
  return isatty(STDOUT_FILENO) ? WatchOutput::kTerminal : WatchOutput::kPlainLines;
}

int TerminalColumns() {
  winsize size{};
  if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &size) != 0) return 0;
  return size.ws_col;
}

class WatchPrinter {
 public:
  explicit WatchPrinter(WatchOutput output) : output_(output) {}

  void Print(const JobWatcher::Update& update, const JobStatus& status) {
    if (output_ == WatchOutput::kJsonSteps) {
      if (update.new_step) std::printf("%s\n", StepMetricsJson(status.latest()).c_str());
    } else {
      const absl::Time now = absl::Now();
      const std::string progress =
          RenderProgressLine(status, TotalSteps(status), JobElapsed(status, now));
      if (output_ == WatchOutput::kTerminal) {
        // "\r\033[K" returns to the start of the progress line and clears it, so a notice
        // replaces the bar and the bar is redrawn below it.
        for (const std::string& notice : update.notices) {
          std::printf("\r\033[K%s\n", notice.c_str());
        }
        std::printf("\r\033[K%s", FitToColumns(progress, TerminalColumns()).c_str());
        bar_drawn_ = true;
      } else {
        for (const std::string& notice : update.notices) std::printf("%s\n", notice.c_str());
        if (update.finished || !last_plain_line_.has_value() ||
            (update.new_step && now - *last_plain_line_ >= kPlainProgressInterval)) {
          std::printf("%s\n", progress.c_str());
          last_plain_line_ = now;
        }
      }
    }
    // A reader at the other end of a pipe sees each line as it happens.
    std::fflush(stdout);
  }

  // Ends the redrawn line so what follows starts on a fresh one.
  void Finish() {
    if (bar_drawn_) std::printf("\n");
    bar_drawn_ = false;
    std::fflush(stdout);
  }

 private:
  const WatchOutput output_;
  bool bar_drawn_ = false;
  std::optional<absl::Time> last_plain_line_;
};

// The exit status of a followed job once the watch is over; the failure on stderr.
int Conclude(const std::string& command, const std::optional<std::string>& failure) {
  if (failure.has_value()) return FailWithReason(command, *failure);
  return 0;
}

// Streams WatchJob until the job finishes. The job has ended when a status with state
// SUCCEEDED, FAILED or CANCELLED arrives; the stream is then closed from this side. A
// stream that ends or breaks before that is a failure (the job may still be running).
//
// With `look_first` (`watch`, whose job may be old) text output starts from the job as
// GetJob shows it now. WatchJob replays a late watcher every step from the first, each
// marked RUNNING even when the job has since ended (so --json can print every step);
// rendered as text that replay was a made-up history: a RUNNING line with the elapsed
// time of now, then a state change that happened long ago. So a job that has already
// ended is shown by its final status alone, with the exit status of that state, and a
// running one starts at its current step (the replayed earlier steps are not new).
int FollowJob(Client& client, const std::string& command, const std::string& job_id,
              bool look_first) {
  const WatchOutput output = ChooseWatchOutput();
  JobWatcher watcher(job_id);
  WatchPrinter printer(output);
  if (look_first && output != WatchOutput::kJsonSteps) {
    GetJobRequest get;
    get.set_job_id(job_id);
    JobStatus current;
    const absl::Status got =
        client.Check(client.stub()->GetJob(client.Context().get(), get, &current));
    if (!got.ok()) return Fail(command, got);
    const JobWatcher::Update update = watcher.Observe(current);
    printer.Print(update, current);
    if (update.finished) {
      printer.Finish();
      return Conclude(command, watcher.FailureReason(absl::OkStatus()));
    }
  }
  std::unique_ptr<grpc::ClientContext> context = client.StreamContext();
  WatchJobRequest request;
  request.set_job_id(job_id);
  std::unique_ptr<grpc::ClientReader<JobStatus>> reader =
      client.stub()->WatchJob(context.get(), request);
  JobStatus status;
  bool finished = false;
  while (!finished && reader->Read(&status)) {
    const JobWatcher::Update update = watcher.Observe(status);
    printer.Print(update, status);
    finished = update.finished;
  }
  printer.Finish();
  // Finished: the rest of the stream is of no interest; cancelling makes Finish return at
  // once even from a coordinator that would keep the stream open.
  if (finished) context->TryCancel();
  const absl::Status stream_status = client.Check(reader->Finish());
  return Conclude(command, watcher.FailureReason(finished ? absl::OkStatus() : stream_status));
}

int Workers(Client& client) {
  ListWorkersResponse response;
  absl::Status status = client.Check(
      client.stub()->ListWorkers(client.Context().get(), ListWorkersRequest(), &response));
  if (!status.ok()) return Fail("workers", status);
  if (absl::GetFlag(FLAGS_json)) {
    for (const WorkerStatus& worker : response.workers()) {
      std::printf("%s\n", ToJsonLine(worker).c_str());
    }
  } else {
    std::printf("%s", FormatWorkerTable(response, absl::GetFlag(FLAGS_wide)).c_str());
  }
  return 0;
}

// The cluster to plan on: --cluster FILE, or the live workers of the kind the spec runs on.
absl::StatusOr<ClusterDescription> PlanCluster(const JobSpec& spec) {
  if (const std::string path = absl::GetFlag(FLAGS_cluster); !path.empty()) {
    std::ifstream file(path);
    if (!file) return absl::NotFoundError(absl::StrCat("--cluster: cannot read ", path));
    std::stringstream text;
    text << file.rdbuf();
    return ParseClusterDescription(text.str());
  }
  absl::StatusOr<std::string> token =
      ResolveToken(absl::GetFlag(FLAGS_token), absl::GetFlag(FLAGS_token_file));
  if (!token.ok()) return token.status();
  Client client(absl::GetFlag(FLAGS_coordinator), *std::move(token));
  ListWorkersResponse response;
  if (absl::Status listed = client.Check(
          client.stub()->ListWorkers(client.Context().get(), ListWorkersRequest(), &response));
      !listed.ok()) {
    return listed;
  }
  for (DeviceKind kind : EligibleDeviceKinds(spec)) {
    std::vector<PlannedWorker> workers;
    for (const WorkerStatus& status : response.workers()) {
      if (status.alive() && status.worker().device_kind() == kind) {
        workers.push_back({status.worker().host(), status.worker().profile()});
      }
    }
    if (!workers.empty()) return ClusterFromWorkers(workers);
  }
  return absl::FailedPreconditionError(
      "no live worker of a kind this spec can run on (see `trainctl workers`); give "
      "--cluster=FILE to plan for other hardware");
}

int Plan(const std::string& path) {
  // Any architecture the spec describes is priced (model/'s tables); one the engines do not
  // train yet is said so, and the live workers' layouts refuse it by field below.
  absl::StatusOr<JobSpec> spec = LoadJobSpecFile(path, ArchitectureCheck::kAny);
  if (!spec.ok()) return Fail("plan", spec.status());
  if (absl::Status trainable = ValidateJobSpec(*spec); !trainable.ok()) {
    std::fprintf(stderr, "trainctl plan: note: this spec cannot be submitted yet: %s\n",
                 std::string(trainable.message()).c_str());
  }
  absl::StatusOr<ClusterDescription> cluster = PlanCluster(*spec);
  if (!cluster.ok()) return Fail("plan", cluster.status());
  LayoutSearchOptions options;
  options.cost = ProjectEngineOptions(*spec);
  // Both engines run selective recomputation and sequence parallelism; the zero-bubble
  // schedules are the CPU engine's only (the CUDA engine does not split the backward).
  options.try_selective_recompute = options.try_sequence_parallel = true;
  options.try_zero_bubble =
      spec->device() == DEVICE_CPU &&
      (spec->precision() == PRECISION_FP32 || spec->precision() == PRECISION_UNSPECIFIED);
  options.devices = absl::GetFlag(FLAGS_workers);
  // Without --workers, any number of the devices up to all of them.
  if (options.devices == 0) options.min_devices = 1;
  const int available = cluster->nodes() * cluster->devices_per_node();
  if (options.devices < 0 || options.devices > available) {
    return UsageError("plan", absl::StrCat("--workers=", options.devices, ": the cluster has ",
                                           available, " device(s)"));
  }
  // Planning for other hardware describes it; only the live workers' plan must be
  // submittable here.
  options.enforce_service_limits = absl::GetFlag(FLAGS_cluster).empty();
  const LayoutSearch search = SearchLayouts(*spec, *cluster, options);
  PlanReportOptions report;
  report.tokens = absl::GetFlag(FLAGS_tokens);
  std::printf("%s", FormatPlanReport(*spec, *cluster, search, report).c_str());
  if (search.feasible.empty()) {
    std::fprintf(stderr, "trainctl plan: no layout of this spec fits the cluster\n");
    return 1;
  }
  return 0;
}

int Validate(const std::string& path) {
  absl::StatusOr<JobSpec> spec = LoadJobSpecFile(path);
  if (!spec.ok()) return Fail("validate", spec.status());
  std::string json;
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = true;
  options.preserve_proto_field_names = true;
  (void)google::protobuf::util::MessageToJsonString(*spec, &json, options);
  std::printf("%s", json.c_str());
  return 0;
}

int Submit(Client& client, const std::string& path) {
  absl::StatusOr<JobSpec> spec = LoadJobSpecFile(path);
  if (!spec.ok()) return Fail("submit", spec.status());
  if (const std::string init = absl::GetFlag(FLAGS_init_from); !init.empty()) {
    spec->mutable_train()->set_init_from(init);
  }
  // Initial weights are read and checked before the job exists: a wrong file costs
  // nothing on the coordinator.
  std::optional<std::map<std::string, FullTensor>> weights;
  if (!spec->train().init_from().empty()) {
    absl::StatusOr<std::map<std::string, FullTensor>> read =
        ReadInitialWeights(spec->train().init_from(), *spec);
    if (!read.ok()) return Fail("submit", read.status());
    weights = *std::move(read);
  }
  SubmitJobRequest request;
  *request.mutable_spec() = *spec;
  SubmitJobResponse response;
  absl::Status status =
      client.Check(client.stub()->SubmitJob(client.Context().get(), request, &response));
  if (!status.ok()) return Fail("submit", status);
  if (weights.has_value()) {
    std::fprintf(stderr, "trainctl submit: %s: uploading the initial weights of %s\n",
                 response.job_id().c_str(), spec->train().init_from().c_str());
    const absl::Status uploaded = client.Check(ToGrpcStatus(UploadInitialWeights(
        client.stub(), client.Transfer(), response.job_id(), *spec, *weights)));
    if (!uploaded.ok()) {
      // A job without its weights would wait forever: take it back.
      CancelJobRequest cancel;
      cancel.set_job_id(response.job_id());
      CancelJobResponse cancelled;
      (void)client.stub()->CancelJob(client.Context().get(), cancel, &cancelled);
      return Fail("submit",
                  absl::Status(uploaded.code(), absl::StrCat("job ", response.job_id(),
                                                             " cancelled: ", uploaded.message())));
    }
  }
  if (absl::GetFlag(FLAGS_json)) {
    std::printf("%s\n", ToJsonLine(response).c_str());
  } else {
    std::printf("%s\n", response.job_id().c_str());
  }
  // The id first and at once: whoever waits can already cancel the job from elsewhere.
  std::fflush(stdout);
  if (!absl::GetFlag(FLAGS_wait)) return 0;
  // Just submitted: the stream has no history to replay, so no GetJob first.
  return FollowJob(client, "submit", response.job_id(), /*look_first=*/false);
}

// For a parallel.auto or replan job: the planner's latest choice (its `planned` or
// `replanned` event, if any) and its predicted step time beside the measured one.
void PrintPlanAgainstMeasurement(Client& client, const JobStatus& job) {
  ListJobEventsRequest request;
  request.set_job_id(job.job_id());
  request.set_page_size(10000);
  std::string choice;
  while (true) {
    ListJobEventsResponse page;
    if (!client.Check(client.stub()->ListJobEvents(client.Context().get(), request, &page)).ok()) {
      return;  // the status above stands on its own
    }
    for (const JobEvent& event : page.events()) {
      if (event.kind() == "planned" || event.kind() == "replanned") choice = event.message();
    }
    if (page.next_page_token().empty()) break;
    request.set_page_token(page.next_page_token());
  }
  if (choice.empty()) return;
  std::printf("%-11s %s\n", "plan", choice.c_str());
  const std::optional<double> predicted = PredictedStepSeconds(choice);
  const double measured = job.latest().step_seconds();
  if (predicted.has_value() && measured > 0) {
    std::printf("%-11s predicted %.4g s a step, measured %.4g s (step %lld): %+.0f%%\n",
                "step time", *predicted, measured, static_cast<long long>(job.latest().step()),
                100 * (measured / *predicted - 1));
  }
}

// Every event of the job, oldest first, page after page (printed together, so a failure
// halfway prints nothing but the error).
absl::StatusOr<std::vector<JobEvent>> AllEvents(Client& client, const std::string& job_id) {
  ListJobEventsRequest request;
  request.set_job_id(job_id);
  request.set_page_size(10000);  // The coordinator's largest page: the fewest round trips.
  std::vector<JobEvent> events;
  while (true) {
    ListJobEventsResponse page;
    absl::Status status =
        client.Check(client.stub()->ListJobEvents(client.Context().get(), request, &page));
    if (!status.ok()) return status;
    for (JobEvent& event : *page.mutable_events()) events.push_back(std::move(event));
    if (page.next_page_token().empty()) break;
    request.set_page_token(page.next_page_token());
  }
  return events;
}

// The JSON after "step N: " in an evaluation or generation event.
std::string EventResult(const JobEvent& event) {
  const size_t colon = event.message().find(": ");
  return colon == std::string::npos ? "" : event.message().substr(colon + 2);
}

void PrintLatestEvaluations(Client& client, const std::string& job_id);

int Status(Client& client, const std::string& job_id) {
  GetJobRequest request;
  request.set_job_id(job_id);
  JobStatus response;
  absl::Status status =
      client.Check(client.stub()->GetJob(client.Context().get(), request, &response));
  if (!status.ok()) return Fail("status", status);
  if (absl::GetFlag(FLAGS_json)) {
    std::printf("%s\n", ToJsonLine(response).c_str());
  } else {
    std::printf("%s", FormatJobStatus(response, absl::Now()).c_str());
    const ParallelSpec& par = response.spec().parallel();
    if (par.auto_() || par.replan()) PrintPlanAgainstMeasurement(client, response);
    PrintLatestEvaluations(client, job_id);
  }
  return 0;
}

// The coordinator's largest page: the fewest round trips when listing every job.
constexpr int64_t kListPageSize = 1000;

// Pages through every job the filters select (up to --limit), then prints them: the table
// sizes its columns to all rows, so it is printed once, whole.
int List(Client& client) {
  ListJobsRequest request;
  absl::StatusOr<std::vector<JobState>> states = ParseStateFlag(absl::GetFlag(FLAGS_state));
  if (!states.ok()) return UsageError("list", std::string(states.status().message()));
  for (JobState state : *states) request.add_states(state);
  request.set_name_prefix(absl::GetFlag(FLAGS_name));
  const int64_t limit = absl::GetFlag(FLAGS_limit);
  ListJobsResponse all;
  while (true) {
    const int64_t wanted = limit > 0 ? limit - all.jobs_size() : kListPageSize;
    request.set_page_size(static_cast<int32_t>(std::min(wanted, kListPageSize)));
    ListJobsResponse page;
    absl::Status status =
        client.Check(client.stub()->ListJobs(client.Context().get(), request, &page));
    if (!status.ok()) return Fail("list", status);
    for (JobStatus& job : *page.mutable_jobs()) {
      if (limit > 0 && all.jobs_size() >= limit) break;  // A coordinator without paging.
      *all.add_jobs() = std::move(job);
    }
    if (page.next_page_token().empty() || (limit > 0 && all.jobs_size() >= limit)) break;
    request.set_page_token(page.next_page_token());
  }
  if (absl::GetFlag(FLAGS_json)) {
    for (const JobStatus& job : all.jobs()) std::printf("%s\n", ToJsonLine(job).c_str());
  } else {
    std::printf("%s", FormatJobTable(all, absl::Now()).c_str());
  }
  return 0;
}

int RemoveWorker(Client& client, const std::string& worker_id) {
  RemoveWorkerRequest request;
  request.set_worker_id(worker_id);
  RemoveWorkerResponse response;
  absl::Status status =
      client.Check(client.stub()->RemoveWorker(client.Context().get(), request, &response));
  if (!status.ok()) return Fail("remove-worker", status);
  if (!absl::GetFlag(FLAGS_json)) std::printf("removed worker %s\n", worker_id.c_str());
  return 0;
}

int Cancel(Client& client, const std::string& job_id) {
  CancelJobRequest request;
  request.set_job_id(job_id);
  CancelJobResponse response;
  absl::Status status =
      client.Check(client.stub()->CancelJob(client.Context().get(), request, &response));
  if (!status.ok()) return Fail("cancel", status);
  if (!absl::GetFlag(FLAGS_json)) std::printf("cancelled %s\n", job_id.c_str());
  return 0;
}

int Delete(Client& client, const std::string& job_id) {
  DeleteJobRequest request;
  request.set_job_id(job_id);
  DeleteJobResponse response;
  absl::Status status =
      client.Check(client.stub()->DeleteJob(client.Context().get(), request, &response));
  if (!status.ok()) return Fail("delete", status);
  if (!absl::GetFlag(FLAGS_json)) std::printf("deleted %s\n", job_id.c_str());
  return 0;
}

// The job's event log, oldest first: "TIME  KIND  MESSAGE" (--json: one JobEvent per line).
int Events(Client& client, const std::string& job_id) {
  absl::StatusOr<std::vector<JobEvent>> events = AllEvents(client, job_id);
  if (!events.ok()) return Fail("events", events.status());
  for (const JobEvent& event : *events) {
    if (absl::GetFlag(FLAGS_json)) {
      std::printf("%s\n", ToJsonLine(event).c_str());
    } else {
      std::printf("%s  %-18s %s\n",
                  absl::FormatTime("%Y-%m-%d %H:%M:%E3S", absl::FromUnixMillis(event.unix_ms()),
                                   absl::LocalTimeZone())
                      .c_str(),
                  event.kind().c_str(), event.message().c_str());
    }
  }
  return 0;
}

// A job's evaluation and generation results: its own (train.eval_tasks, train.generate)
// and those of the `trainctl eval` and `trainctl generate` runs on its checkpoints, whose
// jobs are named "<job id>-eval-<step>" and "<job id>-generate-<step>". Each event's
// message is "step N: {result}", N the job's checkpoint step.
struct EvaluationResults {
  std::vector<JobEvent> own;
  std::vector<JobEvent> runs;  // in the order the runs were submitted
};
absl::StatusOr<EvaluationResults> CollectEvaluationResults(Client& client,
                                                           const std::string& job_id) {
  const auto wanted = [](const JobEvent& event) {
    return (event.kind() == "evaluation" || event.kind() == "generation") &&
           !EventResult(event).empty();
  };
  EvaluationResults out;
  ASSIGN_OR_RETURN(std::vector<JobEvent> own, AllEvents(client, job_id));
  for (JobEvent& event : own) {
    if (wanted(event)) out.own.push_back(std::move(event));
  }
  std::vector<std::pair<std::string, JobEvent>> runs;  // (run's job id, event)
  for (const std::string infix : {kEvalJobInfix, kGenerationJobInfix}) {
    ListJobsRequest request;
    request.set_name_prefix(job_id + infix);
    request.set_page_size(1000);
    ListJobsResponse listed;
    RETURN_IF_ERROR(
        client.Check(client.stub()->ListJobs(client.Context().get(), request, &listed)));
    for (const JobStatus& run : listed.jobs()) {
      ASSIGN_OR_RETURN(std::vector<JobEvent> more, AllEvents(client, run.job_id()));
      const std::string step = run.spec().name().substr(request.name_prefix().size());
      for (JobEvent& event : more) {
        if (!wanted(event)) continue;
        // "step 1: {...}" of the run is the source's checkpoint step.
        event.set_message(absl::StrCat("step ", step, ": ", EventResult(event)));
        runs.emplace_back(run.job_id(), std::move(event));
      }
    }
  }
  // Job ids are "job-<n>": submission order is n's order (stable for a run's own events).
  const auto number = [](const std::string& id) {
    int64_t n = 0;
    return absl::SimpleAtoi(id.substr(id.rfind('-') + 1), &n) ? n : 0;
  };
  std::stable_sort(runs.begin(), runs.end(),
                   [&](const auto& a, const auto& b) { return number(a.first) < number(b.first); });
  for (auto& [run, event] : runs) out.runs.push_back(std::move(event));
  return out;
}

// train.eval_tasks' and train.generate's results, the job's own first, then those of
// `trainctl eval` and `trainctl generate` runs on its checkpoints: "step N: {result}" per
// task or prompt and checkpoint step (--json: {"step":N,"kind":K,"result":{...}} per line).
// Nothing when the job has none yet.
int Evals(Client& client, const std::string& job_id) {
  absl::StatusOr<EvaluationResults> results = CollectEvaluationResults(client, job_id);
  if (!results.ok()) return Fail("evals", results.status());
  for (const std::vector<JobEvent>* events : {&results->own, &results->runs}) {
    for (const JobEvent& event : *events) {
      if (absl::GetFlag(FLAGS_json)) {
        // "step N: {json}" -> {"step":N,"kind":K,"result":{json}}
        const std::string step = event.message().substr(5, event.message().find(": ") - 5);
        std::printf("{\"step\":%s,\"kind\":\"%s\",\"result\":%s}\n", step.c_str(),
                    event.kind().c_str(), EventResult(event).c_str());
      } else {
        std::printf("%s\n", event.message().c_str());
      }
    }
  }
  return 0;
}

// Under the status table: the results of the job's last evaluated checkpoint step
// (train.eval_tasks, train.generate), then those of the last `trainctl eval` or `trainctl
// generate` run on it: "evaluation  step N: {...}", "generation  step N: "prompt" ->
// "text"" (", by trainctl" after the step for a run). Nothing for a job without any.
void PrintLatestEvaluations(Client& client, const std::string& job_id) {
  absl::StatusOr<EvaluationResults> results = CollectEvaluationResults(client, job_id);
  if (!results.ok()) return;  // the status above is what was asked for
  const auto step_of = [](const JobEvent& event) {
    return event.message().substr(0, event.message().find(':'));
  };
  const auto print_last_step = [&](const std::vector<JobEvent>& events, bool by_trainctl) {
    // The last step's events: those at the end with its "step N".
    size_t first = events.size();
    while (first > 0 && step_of(events[first - 1]) == step_of(events.back())) --first;
    for (size_t i = first; i < events.size(); ++i) {
      const JobEvent& event = events[i];
      const std::string where = absl::StrCat(step_of(event), by_trainctl ? ", by trainctl" : "");
      GeneratedText text;
      if (event.kind() == "generation" &&
          google::protobuf::util::JsonStringToMessage(EventResult(event), &text).ok()) {
        std::printf("generation  %s: %s\n", where.c_str(), GenerationSummary(text, 120).c_str());
      } else {
        std::printf("%s  %s: %s\n", event.kind().c_str(), where.c_str(),
                    EventResult(event).c_str());
      }
    }
  };
  print_last_step(results->own, false);
  // Consecutive runs on the same step print together: each is that step evaluated.
  print_last_step(results->runs, true);
}

// The events of `kind` (evaluation, generation) from a job that ran `tasks` and `prompts`
// once on checkpoint --step of `job_id` (the newest by default), with that step: submits
// it, uploads the checkpoint's weights as its initial weights, waits for it to end.
struct CheckpointRun {
  int64_t step = 0;
  std::vector<JobEvent> events;
};
absl::StatusOr<CheckpointRun> RunOnCheckpoint(Client& client, const std::string& command,
                                              const std::string& job_id,
                                              const std::vector<EvalTask>& tasks,
                                              const std::vector<GenerationPrompt>& prompts,
                                              const std::string& kind) {
  GetJobRequest get;
  get.set_job_id(job_id);
  JobStatus job;
  RETURN_IF_ERROR(client.Check(client.stub()->GetJob(client.Context().get(), get, &job)));
  absl::StatusOr<CheckpointParameters> downloaded =
      DownloadParameters(client.stub(), client.Transfer(), job, absl::GetFlag(FLAGS_step));
  if (!downloaded.ok()) return client.Check(ToGrpcStatus(downloaded.status()));
  const CheckpointParameters& parameters = *downloaded;
  SubmitJobRequest request;
  *request.mutable_spec() = EvaluationJobSpec(job, parameters.step, tasks, prompts);
  SubmitJobResponse submitted;
  RETURN_IF_ERROR(
      client.Check(client.stub()->SubmitJob(client.Context().get(), request, &submitted)));
  const std::string run = submitted.job_id();
  std::fprintf(stderr, "trainctl %s: %s runs on %s at step %lld\n", command.c_str(), run.c_str(),
               job_id.c_str(), static_cast<long long>(parameters.step));
  if (absl::Status uploaded = client.Check(ToGrpcStatus(UploadInitialWeights(
          client.stub(), client.Transfer(), run, request.spec(), parameters.tensors)));
      !uploaded.ok()) {
    CancelJobRequest cancel;
    cancel.set_job_id(run);
    CancelJobResponse cancelled;
    (void)client.stub()->CancelJob(client.Context().get(), cancel, &cancelled);
    return uploaded;
  }
  // Until the job ends; the user learns when workers took it.
  bool placed = false;
  while (true) {
    GetJobRequest poll;
    poll.set_job_id(run);
    JobStatus state;
    RETURN_IF_ERROR(client.Check(client.stub()->GetJob(client.Context().get(), poll, &state)));
    if (state.state() == JOB_STATE_FAILED || state.state() == JOB_STATE_CANCELLED) {
      return absl::AbortedError(
          absl::StrCat(run, " ", JobStateName(state.state()), ": ", state.message()));
    }
    if (state.state() == JOB_STATE_SUCCEEDED) break;
    if (!placed && state.workers_size() > 0) {
      placed = true;
      std::fprintf(stderr, "trainctl %s: %s placed on %d worker(s)\n", command.c_str(), run.c_str(),
                   state.workers_size());
    }
    absl::SleepFor(absl::Milliseconds(200));
  }
  ASSIGN_OR_RETURN(std::vector<JobEvent> events, AllEvents(client, run));
  CheckpointRun out;
  out.step = parameters.step;
  for (JobEvent& event : events) {
    if (event.kind() == kind) out.events.push_back(std::move(event));
  }
  return out;
}

// `trainctl eval JOB --task T --data F [--step N]`: a job on the cluster's workers that
// evaluates the task once on checkpoint N's weights (the newest by default) under the
// job's tensor and pipeline layout; waits for it and prints the result ("JOB step N:
// {...}"; --json: the result object). The result stays with the evaluation job
// ("<JOB>-eval-<N>"), which `trainctl evals JOB` lists with the job's own.
int Eval(Client& client, const std::string& job_id) {
  EvalTask task;
  task.set_task(absl::GetFlag(FLAGS_task));
  task.set_data(absl::GetFlag(FLAGS_data));
  task.set_overlapping_eval(absl::GetFlag(FLAGS_overlapping_eval));
  task.set_wikitext_detokenize(absl::GetFlag(FLAGS_wikitext_detokenize));
  if (task.task().empty() || task.data().empty()) {
    return UsageError("eval", "--task (perplexity, cloze, choice or race) and --data are required");
  }
  absl::StatusOr<CheckpointRun> run =
      RunOnCheckpoint(client, "eval", job_id, {task}, {}, "evaluation");
  if (!run.ok()) return Fail("eval", run.status());
  for (const JobEvent& event : run->events) {
    if (absl::GetFlag(FLAGS_json)) {
      std::printf("%s\n", EventResult(event).c_str());
    } else {
      std::printf("%s step %lld: %s\n", job_id.c_str(), static_cast<long long>(run->step),
                  EventResult(event).c_str());
    }
  }
  return 0;
}

// `trainctl generate JOB --prompt TEXT [--step N] [sampling flags]`: a job on the
// cluster's workers that continues the prompt once with checkpoint N's weights (the
// newest by default) under the job's tensor and pipeline layout; waits and prints the
// prompt and its continuation, then a line of figures on stderr (--json: the result
// object). The result stays with the job "<JOB>-generate-<N>", which `trainctl evals JOB`
// lists.
int Generate(Client& client, const std::string& job_id) {
  GenerationPrompt prompt;
  prompt.set_prompt(absl::GetFlag(FLAGS_prompt));
  prompt.set_max_new_tokens(absl::GetFlag(FLAGS_max_new_tokens));
  prompt.set_temperature(absl::GetFlag(FLAGS_temperature));
  prompt.set_top_k(absl::GetFlag(FLAGS_top_k));
  prompt.set_top_p(absl::GetFlag(FLAGS_top_p));
  prompt.set_seed(absl::GetFlag(FLAGS_sample_seed));
  if (prompt.prompt().empty()) return UsageError("generate", "--prompt is required");
  // The spec's own rules, so a bad flag is named before any transfer.
  JobSpec probe;
  *probe.mutable_train()->add_generate() = prompt;
  if (absl::Status valid = ResolveJobSpec(probe).status(); !valid.ok()) {
    return UsageError("generate", std::string(valid.message()));
  }
  absl::StatusOr<CheckpointRun> run =
      RunOnCheckpoint(client, "generate", job_id, {}, {prompt}, "generation");
  if (!run.ok()) return Fail("generate", run.status());
  for (const JobEvent& event : run->events) {
    const std::string json = EventResult(event);
    if (absl::GetFlag(FLAGS_json)) {
      std::printf("%s\n", json.c_str());
      continue;
    }
    GeneratedText text;
    if (!google::protobuf::util::JsonStringToMessage(json, &text).ok()) {
      std::printf("%s\n", json.c_str());
      continue;
    }
    std::printf("%s%s\n", text.prompt().c_str(), text.text().c_str());
    std::fflush(stdout);  // the text before the figures on a terminal
    std::fprintf(stderr,
                 "trainctl generate: %s step %lld: %d prompt tokens, %d new (stopped: %s), "
                 "%.1f tokens/s\n",
                 job_id.c_str(), static_cast<long long>(run->step), text.prompt_tokens(),
                 text.tokens_size(), text.stopped().c_str(), text.tokens_per_second());
  }
  return 0;
}

int Checkpoints(Client& client, const std::string& job_id) {
  ListCheckpointsRequest request;
  request.set_job_id(job_id);
  ListCheckpointsResponse response;
  absl::Status status =
      client.Check(client.stub()->ListCheckpoints(client.Context().get(), request, &response));
  if (!status.ok()) return Fail("checkpoints", status);
  if (absl::GetFlag(FLAGS_json)) {
    for (const CheckpointInfo& c : response.checkpoints()) {
      std::printf("%s\n", ToJsonLine(c).c_str());
    }
  } else {
    std::printf("%s", FormatCheckpointTable(response, absl::LocalTimeZone()).c_str());
  }
  return 0;
}

int Export(Client& client, const std::string& job_id, const std::string& out_dir) {
  if (absl::GetFlag(FLAGS_format) != "safetensors") {
    return UsageError("export", absl::StrCat("--format=", absl::GetFlag(FLAGS_format),
                                             ": the only format is safetensors"));
  }
  GetJobRequest request;
  request.set_job_id(job_id);
  JobStatus job;
  absl::Status status = client.Check(client.stub()->GetJob(client.Context().get(), request, &job));
  if (!status.ok()) return Fail("export", status);
  absl::StatusOr<int64_t> step =
      ExportCheckpoint(client.stub(), client.Transfer(), job, absl::GetFlag(FLAGS_step), out_dir);
  if (!step.ok()) return Fail("export", client.Check(ToGrpcStatus(step.status())));
  if (!absl::GetFlag(FLAGS_json)) {
    std::printf("exported %s step %lld to %s (model.safetensors, config.json)\n", job_id.c_str(),
                static_cast<long long>(*step), out_dir.c_str());
  }
  return 0;
}

// Arguments each command takes after its name.
std::optional<size_t> ArgumentCount(const std::string& command) {
  if (command == "workers" || command == "list" || command == "help") return 0;
  if (command == "validate" || command == "submit" || command == "status" || command == "watch" ||
      command == "cancel" || command == "delete" || command == "events" || command == "evals" ||
      command == "checkpoints" || command == "remove-worker" || command == "plan" ||
      command == "eval" || command == "generate") {
    return 1;
  }
  if (command == "export") return 2;
  return std::nullopt;
}

int Run(const std::vector<char*>& args) {
  if (args.size() < 2) return UsageError("", "missing COMMAND");
  const std::string command = args[1];
  const std::optional<size_t> want_args = ArgumentCount(command);
  if (!want_args.has_value()) return UsageError(command, "unknown command");
  if (args.size() != 2 + *want_args) {
    return UsageError(command,
                      absl::StrCat("expected ", *want_args, " argument(s), got ", args.size() - 2));
  }
  if (command == "help") {
    std::printf("%s", kUsage);
    return 0;
  }
  if (absl::GetFlag(FLAGS_wait) && command != "submit") {
    return UsageError(command, "--wait applies only to submit");
  }
  if (!absl::GetFlag(FLAGS_init_from).empty() && command != "submit") {
    return UsageError(command, "--init-from applies only to submit");
  }
  if (absl::GetFlag(FLAGS_step).has_value() && command != "export" && command != "eval" &&
      command != "generate") {
    return UsageError(command, "--step applies only to export, eval and generate");
  }
  if ((!absl::GetFlag(FLAGS_prompt).empty() || absl::GetFlag(FLAGS_max_new_tokens) != 64 ||
       absl::GetFlag(FLAGS_temperature) != 0 || absl::GetFlag(FLAGS_top_k) != 0 ||
       absl::GetFlag(FLAGS_top_p) != 1.0 || absl::GetFlag(FLAGS_sample_seed) != 0) &&
      command != "generate") {
    return UsageError(command,
                      "--prompt, --max_new_tokens, --temperature, --top_k, --top_p and "
                      "--sample_seed apply only to generate");
  }
  if ((!absl::GetFlag(FLAGS_task).empty() || !absl::GetFlag(FLAGS_data).empty() ||
       absl::GetFlag(FLAGS_overlapping_eval) != 0 || absl::GetFlag(FLAGS_wikitext_detokenize)) &&
      command != "eval") {
    return UsageError(command,
                      "--task, --data, --overlapping_eval and --wikitext_detokenize apply only "
                      "to eval");
  }
  if (command != "list" &&
      (!absl::GetFlag(FLAGS_state).empty() || !absl::GetFlag(FLAGS_name).empty() ||
       absl::GetFlag(FLAGS_limit) != 0)) {
    return UsageError(command, "--state, --name and --limit apply only to list");
  }
  for (const absl::Status& checked : {CheckStepFlag(absl::GetFlag(FLAGS_step)),
                                      CheckTimeoutSecondsFlag(absl::GetFlag(FLAGS_timeout_seconds)),
                                      CheckLimitFlag(absl::GetFlag(FLAGS_limit)),
                                      ParseStateFlag(absl::GetFlag(FLAGS_state)).status()}) {
    if (!checked.ok()) return UsageError(command, std::string(checked.message()));
  }
  if (absl::GetFlag(FLAGS_wide) && command != "workers") {
    return UsageError(command, "--wide applies only to workers");
  }
  if ((!absl::GetFlag(FLAGS_cluster).empty() || absl::GetFlag(FLAGS_workers) != 0 ||
       absl::GetFlag(FLAGS_tokens) != 0) &&
      command != "plan") {
    return UsageError(command, "--cluster, --workers and --tokens apply only to plan");
  }
  if (command == "validate") return Validate(args[2]);
  if (command == "plan") return Plan(args[2]);

  if (!absl::GetFlag(FLAGS_token).empty() && !absl::GetFlag(FLAGS_token_file).empty()) {
    return UsageError(command, "give --token or --token_file, not both");
  }
  absl::StatusOr<std::string> token =
      ResolveToken(absl::GetFlag(FLAGS_token), absl::GetFlag(FLAGS_token_file));
  if (!token.ok()) return Fail(command, token.status());
  Client client(absl::GetFlag(FLAGS_coordinator), *std::move(token));
  if (command == "workers") return Workers(client);
  if (command == "list") return List(client);
  if (command == "submit") return Submit(client, args[2]);
  if (command == "status") return Status(client, args[2]);
  if (command == "cancel") return Cancel(client, args[2]);
  if (command == "delete") return Delete(client, args[2]);
  if (command == "remove-worker") return RemoveWorker(client, args[2]);
  if (command == "events") return Events(client, args[2]);
  if (command == "evals") return Evals(client, args[2]);
  if (command == "eval") return Eval(client, args[2]);
  if (command == "generate") return Generate(client, args[2]);
  if (command == "checkpoints") return Checkpoints(client, args[2]);
  if (command == "export") return Export(client, args[2], args[3]);
  return FollowJob(client, "watch", args[2], /*look_first=*/true);
}

}  // namespace
}  // namespace mtrain

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(mtrain::kUsage);
  // Flags may be spelled with dashes (--init-from) as well as underscores (--init_from).
  std::vector<std::string> spelled(argv, argv + argc);
  std::vector<char*> normalized;
  for (std::string& arg : spelled) {
    if (arg.rfind("--", 0) == 0) {
      const size_t end = std::min(arg.find('='), arg.size());
      std::replace(arg.begin() + 2, arg.begin() + end, '-', '_');
    }
    normalized.push_back(arg.data());
  }
  std::vector<char*> args =
      absl::ParseCommandLine(static_cast<int>(normalized.size()), normalized.data());
  return mtrain::Run(args);
}
