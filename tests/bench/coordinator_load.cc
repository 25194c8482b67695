// A load benchmark of the coordinator (not a test): many simulated workers register,
// heartbeat and stream step metrics to one running coordinator; the program prints each
// RPC kind's count, sustained rate and latency percentiles, and the coordinator's CPU use.
//
//   coordinator_load --coordinator=127.0.0.1:7070 --workers=256 --seconds=20
//                    --coordinator_pid=12345
//
// tests/bench/coordinator_load.sh builds everything, starts a coordinator with a
// throw-away state directory, runs this against it and stops it.
//
// One simulated worker does what the worker daemon and its rank process would:
//   RegisterWorker -> Heartbeat every --heartbeat_ms (IDLE, or BUSY with its rank) -> on an
//   `assign` command, a ReportMetrics stream on a connection of its own (the rank is a
//   separate process) with one StepMetrics every 1 / --steps_per_second -> on an `abort`,
//   the stream is closed and the heartbeats say IDLE again.
// The program itself plays the user: it submits one data-parallel job exactly as wide as
// the fleet (or --jobs equal ones that share it), measures a window of --seconds once
// every rank streams (polling GetJob once a second), then cancels the jobs. With
// --job_steps each rank stops after that many steps, closes its stream and reports its
// result, as a finished rank does, and the window lasts until every job has ended. With
// --kill_worker, after the window one worker holding a rank of the first job dies (no
// more heartbeats, its stream broken) and the time until the other ranks of its
// generation are told to abort is measured. With --isolate_cancel (and --jobs >= 2), the
// first job is cancelled alone first, and the heartbeat and metrics latencies of the 3 s
// after are compared with the window's. With --coordinator_http the coordinator's
// step-row counters are read from its /metrics before and after the window (the SQLite
// write rate).
//
// Threads: --threads client threads, each with a completion queue, a share of the
// simulated workers and their timers. Every worker RPC is asynchronous, so a couple of
// threads drive hundreds of workers and leave the cores to the coordinator under test.
//
// Latency: a unary RPC is measured as its round trip. A stream Write is measured from the
// call to its completion, which is when gRPC has handed the message to the transport: it
// only grows once flow control stops the client because the coordinator does not read.
// The coordinator's processing of metrics shows instead as the lag between the last step
// the reporting rank wrote and the step GetJob says the coordinator recorded.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <queue>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/random/random.h"
#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "checkpoint/checkpoint_transfer.h"
#include "common/grpc_connection.h"
#include "common/mutex.h"
#include "grpcpp/grpcpp.h"
#include "proto/coordinator.grpc.pb.h"
#include "tests/metrics_scrape.h"

ABSL_FLAG(std::string, coordinator, "", "HOST:PORT of a running coordinator (required)");
ABSL_FLAG(int, workers, 256, "simulated workers; the job's world size");
ABSL_FLAG(int, workers_per_host, 8, "simulated workers sharing one host name");
ABSL_FLAG(double, seconds, 20,
          "length of the measured window, which starts once every rank streams metrics");
ABSL_FLAG(int, heartbeat_ms, 100,
          "heartbeat period of each simulated worker: 10x the default rate (1 s), so a few "
          "hundred simulated workers load the coordinator like a few thousand real ones");
ABSL_FLAG(double, steps_per_second, 20, "StepMetrics each rank writes per second");
ABSL_FLAG(int, threads, 2,
          "client threads; each multiplexes its share of the simulated workers, so a few "
          "suffice and the client does not take the cores from the coordinator");
ABSL_FLAG(int, jobs, 1,
          "data-parallel jobs that share the fleet equally (--workers must divide by it)");
ABSL_FLAG(int64_t, job_steps, 0,
          "steps each rank writes before it closes its stream and reports its result (the "
          "window then lasts until every job has ended); 0: jobs run until cancelled");
ABSL_FLAG(bool, kill_worker, false,
          "after the window, one worker of the first job dies; measures the time until its "
          "generation's other ranks are told to abort");
ABSL_FLAG(bool, isolate_cancel, false,
          "with --jobs >= 2 running until cancelled: after the window the first job is "
          "cancelled alone and the other jobs' heartbeats and metrics are measured over the "
          "next 3 s against the window's (one job's end must not delay another's)");
ABSL_FLAG(std::string, coordinator_http, "",
          "HOST:PORT of the coordinator's HTTP side, to read its step-row counters; empty: "
          "not read");
ABSL_FLAG(int, upload_mib, 0,
          "after the window, upload a checkpoint file of this many MiB for the first job's "
          "generation (a rank's checkpoint shard, over a connection of its own) while the "
          "load goes on, and print its rate; 0: none");
ABSL_FLAG(std::string, latency_trace, "",
          "FILE: every heartbeat of the window as a CSV line `start_ms,latency_ms,code` (start "
          "from the window's begin), to see when the slow ones happen");
ABSL_FLAG(int, coordinator_pid, 0,
          "the coordinator's process id, to read its CPU time from /proc; 0: not measured");

namespace mtrain {
namespace {

using Clock = std::chrono::steady_clock;
using TimePoint = Clock::time_point;

// A wedged coordinator fails a unary call after this instead of hanging the benchmark.
constexpr auto kUnaryDeadline = std::chrono::seconds(10);
// How long registration and placement may take before the run is declared failed.
constexpr auto kSetupTimeout = std::chrono::seconds(60);
// Wait between retries of a failed registration.
constexpr auto kRegisterRetry = std::chrono::seconds(1);
// Steps of the submitted job: more than any run reaches, so it only ends when cancelled.
constexpr int kJobSteps = 100000000;  // the spec limit (job_spec_limits.h)
// The grpc::StatusCode recorded for a stream Write that failed (the stream is closed).
constexpr int kStreamClosed = -1;

double Seconds(TimePoint::duration d) { return std::chrono::duration<double>(d).count(); }

// ---------------------------------------------------------------- measurements

enum RpcKind {
  kRegister,
  kHeartbeat,
  kMetricsWrite,
  kRankResult,
  kSubmitJob,
  kGetJob,
  kCancelJob,
  kNumKinds
};
const char* const kRpcNames[kNumKinds] = {"RegisterWorker",   "Heartbeat", "ReportMetrics Write",
                                          "ReportRankResult", "SubmitJob", "GetJob",
                                          "CancelJob"};

struct Sample {
  TimePoint start;
  int64_t micros;
  int code;  // grpc::StatusCode, or kStreamClosed
};

// Samples of one thread: appended without locking, merged after the threads are joined.
struct Recorder {
  std::vector<Sample> samples[kNumKinds];

  void Add(RpcKind kind, TimePoint start, int code) {
    samples[kind].push_back(
        {start, std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - start).count(),
         code});
  }
};

// What the threads tell the main thread while running.
struct Progress {
  std::atomic<int> registered{0};  // workers registered at least once
  std::atomic<int> streaming{0};   // metric streams open now
  std::atomic<int> aborted{0};     // ranks stopped by an `abort` command
  // Last step whose Write completed on the rank the coordinator records in its store.
  std::atomic<int64_t> reporting_rank_step{0};
  std::atomic<int> streams_started{0};  // metric streams ever opened
  // --kill_worker: when the worker died and the aborts its generation's ranks got since.
  std::atomic<int64_t> killed_at_ns{0};
  std::atomic<int> kill_job_aborts{0};
  std::atomic<int64_t> last_kill_job_abort_ns{0};
};

// A thread's tallies beyond latencies, merged after the threads are joined.
struct Tallies {
  TimePoint last_assign{};  // the latest arrival of an `assign` command
  TimePoint last_abort{};   // the latest arrival of an `abort` command
  int assigns = 0;
  int aborts = 0;
  int reregistrations = 0;
  size_t assign_bytes = 0;         // the largest `assign` command (it lists every peer)
  int64_t skipped_steps = 0;       // step ticks that found the previous Write still in flight
  std::map<int, int> stream_ends;  // final status code of each metrics stream
  std::vector<TimePoint> kill_job_aborts;  // --kill_worker: each abort of the watched job

  void MergeFrom(const Tallies& other) {
    last_assign = std::max(last_assign, other.last_assign);
    last_abort = std::max(last_abort, other.last_abort);
    assigns += other.assigns;
    aborts += other.aborts;
    reregistrations += other.reregistrations;
    assign_bytes = std::max(assign_bytes, other.assign_bytes);
    skipped_steps += other.skipped_steps;
    for (const auto& [code, n] : other.stream_ends) stream_ends[code] += n;
    kill_job_aborts.insert(kill_job_aborts.end(), other.kill_job_aborts.begin(),
                           other.kill_job_aborts.end());
  }
};

// ---------------------------------------------------------------- simulated workers

// Completion-queue events; each simulated worker has at most one of each in flight.
enum Op {
  kRegisterDone,
  kHeartbeatDone,
  kStreamStarted,
  kWriteDone,
  kWritesDoneDone,
  kFinishDone,
  kRankResultDone,
  kNumOps
};

struct SimWorker;
struct Tag {
  SimWorker* worker;
  Op op;
};

struct SimWorker {
  enum class State { kUnregistered, kIdle, kBusy };
  enum class Stream { kNone, kStarting, kOpen, kClosing, kFinishing };

  WorkerInfo info;
  std::unique_ptr<Coordinator::Stub> daemon;  // the worker daemon's connection
  std::unique_ptr<Coordinator::Stub> rank;    // its rank process's connection
  Tag tags[kNumOps];
  State state = State::kUnregistered;

  // The unary call in flight (a registration or a heartbeat, never both).
  std::unique_ptr<grpc::ClientContext> unary_context;
  std::unique_ptr<grpc::ClientAsyncResponseReader<RegisterWorkerResponse>> register_call;
  RegisterWorkerResponse register_response;
  std::unique_ptr<grpc::ClientAsyncResponseReader<HeartbeatResponse>> heartbeat_call;
  HeartbeatResponse heartbeat_response;
  grpc::Status unary_status;
  TimePoint unary_start;
  bool unary_in_flight = false;
  bool counted_registered = false;

  // The rank it was assigned.
  std::string job_id;
  int64_t generation = 0;
  int global_rank = 0;
  bool computes_loss = false;  // a last-stage rank, as in the real trainer
  bool reporting = false;      // the rank whose steps the coordinator stores
  double tokens_per_step = 0;
  int64_t step = 0;

  // Its metrics stream.
  Stream stream = Stream::kNone;
  std::unique_ptr<grpc::ClientContext> stream_context;
  std::unique_ptr<grpc::ClientAsyncWriterInterface<StepMetrics>> writer;
  ReportMetricsResponse stream_response;
  grpc::Status stream_status;
  bool write_in_flight = false;
  bool close_requested = false;
  bool counted_streaming = false;
  TimePoint write_start;
  // Step timers carry the epoch of their stream; a timer of an earlier stream is ignored.
  int64_t stream_epoch = 0;
  // --job_steps: the rank wrote its last step; once its stream is finished it reports OK.
  bool rank_done = false;
  std::unique_ptr<grpc::ClientContext> result_context;
  std::unique_ptr<grpc::ClientAsyncResponseReader<ReportRankResultResponse>> result_call;
  ReportRankResultResponse result_response;
  grpc::Status result_status;
  TimePoint result_start;
  // --kill_worker: this worker died: it sends nothing more.
  bool dead = false;
};

struct Options {
  std::chrono::microseconds heartbeat_period;
  std::chrono::microseconds step_period;
  int64_t job_steps = 0;  // 0: until cancelled
};

// One client thread: a completion queue, its simulated workers and their timers, all
// touched by this thread only (no locks); Progress is the only shared state.
class ClientThread {
 public:
  ClientThread(const Options& options, Progress* progress)
      : options_(options), progress_(progress) {}

  void AddWorker(std::unique_ptr<SimWorker> worker) {
    for (int op = 0; op < kNumOps; ++op) worker->tags[op] = {worker.get(), static_cast<Op>(op)};
    workers_.push_back(std::move(worker));
  }
  void Start() {
    thread_ = std::thread([this] { Run(); });
  }
  // --kill_worker: the job whose aborts are counted (Progress::kill_job_aborts) once a
  // worker has been killed.
  void WatchAbortsOf(const std::string& job_id) {
    MutexLock lock(&kill_mutex_);
    watched_job_ = job_id;
  }
  // Asks the thread to kill one of its workers that holds a rank of the watched job (if it
  // has one): no more heartbeats, its calls cancelled, as a machine that died.
  void RequestKill() { kill_requested_.store(true); }
  // Cancels what is in flight, closes the streams and returns once all is drained.
  void StopAndJoin() {
    stop_.store(true);
    thread_.join();
  }

  const Recorder& recorder() const { return recorder_; }
  const Tallies& tallies() const { return tallies_; }

 private:
  enum class TimerKind { kRegister, kHeartbeat, kStep };
  struct Timer {
    TimePoint when;
    SimWorker* worker;
    TimerKind kind;
    int64_t epoch;
    bool operator>(const Timer& other) const { return when > other.when; }
  };

  void Run() {
    // Every worker registers at once, as a fleet started together would.
    for (auto& worker : workers_) SendRegister(worker.get());
    while (true) {
      const TimePoint now = Clock::now();
      while (!timers_.empty() && timers_.top().when <= now) {
        const Timer timer = timers_.top();
        timers_.pop();
        if (!stopping_) OnTimer(timer);
      }
      if (!stopping_ && stop_.load()) BeginStopping();
      if (!stopping_ && kill_requested_.exchange(false)) KillOne();
      if (stopping_ && outstanding_ == 0) break;
      // Wake for the next timer, and at least every 20 ms to notice a stop request.
      TimePoint wake = now + std::chrono::milliseconds(20);
      if (!timers_.empty()) wake = std::min(wake, timers_.top().when);
      void* tag = nullptr;
      bool ok = false;
      const auto deadline = std::chrono::system_clock::now() + (wake - Clock::now());
      const grpc::CompletionQueue::NextStatus status = cq_.AsyncNext(&tag, &ok, deadline);
      if (status == grpc::CompletionQueue::SHUTDOWN) break;
      if (status == grpc::CompletionQueue::GOT_EVENT) {
        --outstanding_;
        OnEvent(*static_cast<Tag*>(tag), ok);
      }
    }
    cq_.Shutdown();
    void* tag = nullptr;
    bool ok = false;
    while (cq_.Next(&tag, &ok)) {
    }
  }

  void Schedule(TimePoint when, SimWorker* worker, TimerKind kind, int64_t epoch = 0) {
    timers_.push({when, worker, kind, epoch});
  }
  // A uniformly random point of the next `period`: spreads the workers' ticks so that they
  // do not arrive at the coordinator in lockstep.
  TimePoint Jittered(std::chrono::microseconds period) {
    return Clock::now() + std::chrono::microseconds(absl::Uniform<int64_t>(
                              random_, 0, std::max<int64_t>(1, period.count())));
  }

  std::string WatchedJob() {
    MutexLock lock(&kill_mutex_);
    return watched_job_;
  }

  void KillOne() {
    const std::string job = WatchedJob();
    for (auto& worker : workers_) {
      SimWorker* w = worker.get();
      if (w->dead || w->state != SimWorker::State::kBusy || w->job_id != job) continue;
      w->dead = true;
      progress_->killed_at_ns.store(Clock::now().time_since_epoch().count());
      if (w->unary_in_flight) w->unary_context->TryCancel();
      if (w->stream != SimWorker::Stream::kNone) w->stream_context->TryCancel();
      return;
    }
  }

  void OnTimer(const Timer& timer) {
    SimWorker* w = timer.worker;
    if (w->dead) return;
    switch (timer.kind) {
      case TimerKind::kRegister:
        SendRegister(w);
        break;
      case TimerKind::kHeartbeat:
        if (w->state != SimWorker::State::kUnregistered && !w->unary_in_flight) SendHeartbeat(w);
        break;
      case TimerKind::kStep:
        if (timer.epoch != w->stream_epoch || w->stream != SimWorker::Stream::kOpen) break;
        // Steps keep their cadence; a tick that finds the last Write still in flight is
        // skipped (and counted), as a rank blocked in Write would fall behind.
        Schedule(timer.when + options_.step_period, w, TimerKind::kStep, timer.epoch);
        if (w->write_in_flight) {
          ++tallies_.skipped_steps;
        } else {
          WriteStep(w);
        }
        break;
    }
  }

  void OnEvent(const Tag& tag, bool ok) {
    SimWorker* w = tag.worker;
    switch (tag.op) {
      case kRegisterDone:
        OnRegistered(w);
        break;
      case kHeartbeatDone:
        OnHeartbeat(w);
        break;
      case kStreamStarted:
        OnStreamStarted(w, ok);
        break;
      case kWriteDone:
        OnWriteDone(w, ok);
        break;
      case kWritesDoneDone:
        FinishStream(w);
        break;
      case kFinishDone:
        OnStreamFinished(w);
        break;
      case kRankResultDone:
        OnRankResultDone(w);
        break;
      case kNumOps:
        break;
    }
  }

  std::unique_ptr<grpc::ClientContext> UnaryContext() {
    auto context = std::make_unique<grpc::ClientContext>();
    context->set_deadline(std::chrono::system_clock::now() + kUnaryDeadline);
    return context;
  }

  // ------------------------------------------------------------ daemon: register, heartbeat

  void SendRegister(SimWorker* w) {
    RegisterWorkerRequest request;
    *request.mutable_worker() = w->info;
    w->unary_context = UnaryContext();
    w->register_response.Clear();
    w->register_call = w->daemon->PrepareAsyncRegisterWorker(w->unary_context.get(), request, &cq_);
    w->unary_start = Clock::now();
    w->unary_in_flight = true;
    w->register_call->StartCall();
    w->register_call->Finish(&w->register_response, &w->unary_status, &w->tags[kRegisterDone]);
    ++outstanding_;
  }

  void OnRegistered(SimWorker* w) {
    w->unary_in_flight = false;
    recorder_.Add(kRegister, w->unary_start, w->unary_status.error_code());
    if (stopping_) return;
    if (!w->unary_status.ok()) {
      Schedule(Clock::now() + kRegisterRetry, w, TimerKind::kRegister);
      return;
    }
    if (w->state == SimWorker::State::kUnregistered) w->state = SimWorker::State::kIdle;
    if (!w->counted_registered) {
      w->counted_registered = true;
      progress_->registered.fetch_add(1);
    }
    Schedule(Jittered(options_.heartbeat_period), w, TimerKind::kHeartbeat);
  }

  void SendHeartbeat(SimWorker* w) {
    HeartbeatRequest request;
    request.set_worker_id(w->info.worker_id());
    request.set_incarnation_id(w->info.incarnation_id());
    if (w->state == SimWorker::State::kBusy) {
      request.set_state(WORKER_STATE_BUSY);
      request.set_job_id(w->job_id);
      request.set_generation(w->generation);
    } else {
      request.set_state(WORKER_STATE_IDLE);
    }
    w->unary_context = UnaryContext();
    w->heartbeat_response.Clear();
    w->heartbeat_call = w->daemon->PrepareAsyncHeartbeat(w->unary_context.get(), request, &cq_);
    w->unary_start = Clock::now();
    w->unary_in_flight = true;
    w->heartbeat_call->StartCall();
    w->heartbeat_call->Finish(&w->heartbeat_response, &w->unary_status, &w->tags[kHeartbeatDone]);
    ++outstanding_;
  }

  void OnHeartbeat(SimWorker* w) {
    w->unary_in_flight = false;
    if (w->dead) return;
    recorder_.Add(kHeartbeat, w->unary_start, w->unary_status.error_code());
    if (stopping_) return;
    const grpc::StatusCode code = w->unary_status.error_code();
    if (code == grpc::StatusCode::NOT_FOUND || code == grpc::StatusCode::FAILED_PRECONDITION) {
      // The coordinator forgot this worker (restart) or holds another incarnation: register
      // again, as the daemon does.
      ++tallies_.reregistrations;
      w->state = SimWorker::State::kUnregistered;
      SendRegister(w);
      return;
    }
    for (const WorkerCommand& command : w->heartbeat_response.commands()) {
      if (command.has_assign()) OnAssign(w, command.assign());
      if (command.has_abort()) OnAbort(w, command.abort());
    }
    // The daemon's cadence: one period after the previous heartbeat left, or at once if
    // that one took longer than a period.
    Schedule(std::max(Clock::now(), w->unary_start + options_.heartbeat_period), w,
             TimerKind::kHeartbeat);
  }

  void OnAssign(SimWorker* w, const Assignment& assignment) {
    tallies_.last_assign = Clock::now();
    ++tallies_.assigns;
    tallies_.assign_bytes = std::max(tallies_.assign_bytes, assignment.ByteSizeLong());
    if (w->state == SimWorker::State::kBusy || w->stream != SimWorker::Stream::kNone) return;
    const ParallelSpec& parallel = assignment.spec().parallel();
    w->state = SimWorker::State::kBusy;
    w->job_id = assignment.job_id();
    w->generation = assignment.generation();
    w->global_rank = assignment.rank().global_rank();
    w->computes_loss = assignment.rank().pp_rank() == parallel.pipeline() - 1;
    // ReportingRank in coordinator/job_manager.cc: the first rank of the last stage.
    w->reporting =
        w->global_rank == parallel.tensor() * parallel.data() * (parallel.pipeline() - 1);
    w->tokens_per_step =
        static_cast<double>(parallel.global_batch_size()) * assignment.spec().model().seq_length();
    w->step = 0;
    w->rank_done = false;
    StartStream(w);
  }

  void OnAbort(SimWorker* w, const AbortCommand& abort) {
    tallies_.last_abort = Clock::now();
    ++tallies_.aborts;
    if (progress_->killed_at_ns.load() != 0 && abort.job_id() == WatchedJob()) {
      tallies_.kill_job_aborts.push_back(tallies_.last_abort);
      progress_->kill_job_aborts.fetch_add(1);
      progress_->last_kill_job_abort_ns.store(tallies_.last_abort.time_since_epoch().count());
    }
    if (w->state != SimWorker::State::kBusy || abort.job_id() != w->job_id ||
        abort.generation() != w->generation) {
      return;
    }
    w->state = SimWorker::State::kIdle;
    progress_->aborted.fetch_add(1);
    CloseStream(w);
  }

  // ------------------------------------------------------------ rank: the metrics stream

  void StartStream(SimWorker* w) {
    w->stream_context = std::make_unique<grpc::ClientContext>();
    w->stream_response.Clear();
    w->writer =
        w->rank->PrepareAsyncReportMetrics(w->stream_context.get(), &w->stream_response, &cq_);
    w->stream = SimWorker::Stream::kStarting;
    w->close_requested = false;
    ++w->stream_epoch;
    w->writer->StartCall(&w->tags[kStreamStarted]);
    ++outstanding_;
  }

  void OnStreamStarted(SimWorker* w, bool ok) {
    if (!ok || stopping_ || w->dead) {
      FinishStream(w);
      return;
    }
    w->stream = SimWorker::Stream::kOpen;
    w->counted_streaming = true;
    progress_->streaming.fetch_add(1);
    progress_->streams_started.fetch_add(1);
    if (w->close_requested) {
      CloseStream(w);
      return;
    }
    Schedule(Jittered(options_.step_period), w, TimerKind::kStep, w->stream_epoch);
  }

  void WriteStep(SimWorker* w) {
    const double step_seconds = std::chrono::duration<double>(options_.step_period).count();
    StepMetrics metrics;
    metrics.set_job_id(w->job_id);
    metrics.set_generation(w->generation);
    metrics.set_global_rank(w->global_rank);
    metrics.set_step(++w->step);
    // A plausible curve: the numbers do not matter to the coordinator, their size does.
    if (w->computes_loss) metrics.set_loss(5.5 / std::sqrt(static_cast<double>(w->step)));
    metrics.set_lr(6e-4);
    metrics.set_grad_norm(1.0);
    metrics.set_step_seconds(step_seconds);
    metrics.set_tokens_per_second(w->tokens_per_step / step_seconds);
    metrics.set_model_tflops(0.01);
    metrics.set_mfu(0.2);
    metrics.set_loss_scale(1.0);
    metrics.set_collective_seconds(step_seconds / 10);
    w->write_start = Clock::now();
    w->write_in_flight = true;
    w->writer->Write(metrics, &w->tags[kWriteDone]);
    ++outstanding_;
  }

  void OnWriteDone(SimWorker* w, bool ok) {
    w->write_in_flight = false;
    recorder_.Add(kMetricsWrite, w->write_start, ok ? 0 : kStreamClosed);
    if (ok && w->reporting) progress_->reporting_rank_step.store(w->step);
    if (!ok || stopping_ || w->dead) {
      // The coordinator ended the stream (a stale generation) or the run is over: Finish
      // collects the status.
      FinishStream(w);
    } else if (options_.job_steps > 0 && w->step >= options_.job_steps) {
      // Its last step: the rank closes its stream and then reports its result.
      w->rank_done = true;
      CloseStream(w);
    } else if (w->close_requested) {
      CloseStream(w);
    }
  }

  // The graceful end, after an abort: WritesDone, then Finish.
  void CloseStream(SimWorker* w) {
    if (w->stream == SimWorker::Stream::kStarting || w->write_in_flight) {
      w->close_requested = true;  // continued when the operation in flight completes
      return;
    }
    if (w->stream != SimWorker::Stream::kOpen) return;
    w->stream = SimWorker::Stream::kClosing;
    w->writer->WritesDone(&w->tags[kWritesDoneDone]);
    ++outstanding_;
  }

  void FinishStream(SimWorker* w) {
    w->stream = SimWorker::Stream::kFinishing;
    w->writer->Finish(&w->stream_status, &w->tags[kFinishDone]);
    ++outstanding_;
  }

  void OnStreamFinished(SimWorker* w) {
    ++tallies_.stream_ends[w->stream_status.error_code()];
    if (w->counted_streaming) {
      w->counted_streaming = false;
      progress_->streaming.fetch_sub(1);
    }
    w->writer.reset();
    w->stream_context.reset();
    w->stream = SimWorker::Stream::kNone;
    if (w->rank_done && w->stream_status.ok() && !stopping_ && !w->dead &&
        w->state == SimWorker::State::kBusy) {
      SendRankResult(w);  // the worker stays BUSY until its result is in
      return;
    }
    // A rank whose stream the coordinator ended stops, and its worker goes idle.
    if (w->state == SimWorker::State::kBusy) w->state = SimWorker::State::kIdle;
  }

  void SendRankResult(SimWorker* w) {
    RankResult result;
    result.set_job_id(w->job_id);
    result.set_generation(w->generation);
    result.set_global_rank(w->global_rank);
    result.set_code(0);
    w->result_context = UnaryContext();
    w->result_response.Clear();
    w->result_call = w->rank->PrepareAsyncReportRankResult(w->result_context.get(), result, &cq_);
    w->result_start = Clock::now();
    w->result_call->StartCall();
    w->result_call->Finish(&w->result_response, &w->result_status, &w->tags[kRankResultDone]);
    ++outstanding_;
  }

  void OnRankResultDone(SimWorker* w) {
    recorder_.Add(kRankResult, w->result_start, w->result_status.error_code());
    w->rank_done = false;
    if (w->state == SimWorker::State::kBusy) w->state = SimWorker::State::kIdle;
  }

  // Cancels every call in flight and finishes every open stream; the loop then drains
  // the completions (each handler, seeing stopping_, starts nothing new).
  void BeginStopping() {
    stopping_ = true;
    for (auto& worker : workers_) {
      SimWorker* w = worker.get();
      if (w->unary_in_flight) w->unary_context->TryCancel();
      if (w->stream == SimWorker::Stream::kNone) continue;
      w->stream_context->TryCancel();
      if (w->stream == SimWorker::Stream::kOpen && !w->write_in_flight) FinishStream(w);
    }
  }

  const Options options_;
  Progress* const progress_;
  Mutex kill_mutex_;
  std::string watched_job_ ABSL_GUARDED_BY(kill_mutex_);
  std::atomic<bool> kill_requested_{false};
  absl::BitGen random_;
  grpc::CompletionQueue cq_;
  std::vector<std::unique_ptr<SimWorker>> workers_;
  std::priority_queue<Timer, std::vector<Timer>, std::greater<Timer>> timers_;
  int outstanding_ = 0;  // tags handed to gRPC and not yet returned
  std::atomic<bool> stop_{false};
  bool stopping_ = false;
  std::thread thread_;
  Recorder recorder_;
  Tallies tallies_;
};

// ---------------------------------------------------------------- the user and the report

std::shared_ptr<grpc::Channel> NewConnection(const std::string& address) {
  // Channels with equal arguments share one TCP connection through gRPC's global subchannel
  // pool; a local pool gives each simulated process its own, as real processes have.
  // The settings real workers and ranks connect with (common/grpc_connection.h).
  grpc::ChannelArguments arguments = CoordinatorChannelArguments();
  arguments.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  return grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), arguments);
}

// One data-parallel job exactly as wide as the fleet, so every simulated worker gets a
// rank. The model is the smallest valid one: simulated ranks never build it, but the
// coordinator validates and plans it like any other.
JobSpec BenchJobSpec(int world_size, int64_t steps) {
  JobSpec spec;
  spec.set_name("coordinator-load");
  spec.mutable_model()->set_num_layers(1);
  spec.mutable_model()->set_num_heads(1);
  spec.mutable_model()->set_hidden_size(8);
  spec.mutable_model()->set_seq_length(8);
  spec.mutable_parallel()->set_data(world_size);
  spec.mutable_parallel()->set_micro_batch_size(1);
  spec.mutable_parallel()->set_global_batch_size(world_size);
  spec.set_device(DEVICE_CPU);
  spec.mutable_train()->set_steps(steps > 0 ? steps : kJobSteps);
  // A rank lost because the client fell behind then shows as a FAILED job rather than as
  // a silent re-placement in the middle of the window.
  spec.mutable_train()->set_max_restarts(0);
  return spec;
}

// CPU time, threads and resident memory of a process, from /proc (proc(5)).
struct ProcessSample {
  bool ok = false;
  double user_seconds = 0;
  double system_seconds = 0;
  int threads = 0;
  int64_t rss_kib = 0;
};

// The machine's CPU time by kind, from the first line of /proc/stat (proc(5)), in ticks.
// Steal is time the hypervisor gave this VM's virtual CPUs to someone else: on a shared
// VM it swings from 1% to over 30% within minutes, and a tail latency measured while a
// third of the CPU is gone says more about the host than about the coordinator.
struct MachineSample {
  bool ok = false;
  int64_t busy = 0;  // user, nice, system, irq, softirq
  int64_t idle = 0;  // idle, iowait
  int64_t steal = 0;
};

MachineSample SampleMachine() {
  MachineSample sample;
  std::ifstream stat_file("/proc/stat");
  std::string label;
  int64_t user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0, softirq = 0, steal = 0;
  if (!(stat_file >> label >> user >> nice >> system >> idle >> iowait >> irq >> softirq >>
        steal) ||
      label != "cpu") {
    return sample;
  }
  sample.ok = true;
  sample.busy = user + nice + system + irq + softirq;
  sample.idle = idle + iowait;
  sample.steal = steal;
  return sample;
}

ProcessSample SampleProcess(const std::string& pid) {
  ProcessSample sample;
  std::ifstream stat_file("/proc/" + pid + "/stat");
  std::string stat;
  if (!std::getline(stat_file, stat)) return sample;
  // The command name (field 2) is in parentheses and may hold spaces, so fields are
  // counted after the last ')': field 3 comes first, utime is field 14, stime field 15.
  const size_t paren = stat.rfind(')');
  if (paren == std::string::npos) return sample;
  const std::vector<std::string> fields =
      absl::StrSplit(stat.substr(paren + 2), ' ', absl::SkipEmpty());
  double utime = 0, stime = 0;
  if (fields.size() < 13 || !absl::SimpleAtod(fields[11], &utime) ||
      !absl::SimpleAtod(fields[12], &stime)) {
    return sample;
  }
  const double ticks_per_second = static_cast<double>(sysconf(_SC_CLK_TCK));
  sample.user_seconds = utime / ticks_per_second;
  sample.system_seconds = stime / ticks_per_second;
  std::ifstream status_file("/proc/" + pid + "/status");
  for (std::string line; std::getline(status_file, line);) {
    const std::vector<std::string> words =
        absl::StrSplit(line, absl::ByAnyChar(" \t"), absl::SkipEmpty());
    if (words.size() < 2) continue;
    if (words[0] == "Threads:") (void)absl::SimpleAtoi(words[1], &sample.threads);
    if (words[0] == "VmRSS:") (void)absl::SimpleAtoi(words[1], &sample.rss_kib);
  }
  sample.ok = true;
  return sample;
}

std::string CodeName(int code) {
  if (code == kStreamClosed) return "stream closed";
  return absl::StatusCodeToString(static_cast<absl::StatusCode>(code));
}

// Milliseconds at quantile q of sorted microseconds (nearest rank).
double QuantileMs(const std::vector<int64_t>& sorted, double q) {
  if (sorted.empty()) return 0;
  const size_t rank = static_cast<size_t>(std::ceil(q * sorted.size()));
  return sorted[std::min(sorted.size() - 1, rank == 0 ? 0 : rank - 1)] / 1e3;
}

// One table row. With `in_window`, only samples that started in [from, to) count and the
// rate is over the window; otherwise (one-off phases such as registration) the rate is
// over the samples' own span.
void PrintRow(RpcKind kind, const std::vector<Sample>& all, TimePoint from, TimePoint to,
              bool in_window, const std::string& offered, std::map<std::string, int>* errors) {
  std::vector<int64_t> micros;
  int error_count = 0;
  TimePoint first = TimePoint::max(), last = TimePoint::min();
  for (const Sample& s : all) {
    if (in_window && (s.start < from || s.start >= to)) continue;
    micros.push_back(s.micros);
    first = std::min(first, s.start);
    last = std::max(last, s.start + std::chrono::microseconds(s.micros));
    if (s.code != 0) {
      ++error_count;
      ++(*errors)[absl::StrCat(kRpcNames[kind], ": ", CodeName(s.code))];
    }
  }
  std::sort(micros.begin(), micros.end());
  std::string rate = "-";
  if (in_window) {
    rate = absl::StrFormat("%.0f", micros.size() / Seconds(to - from));
  } else if (micros.size() > 1) {
    rate = absl::StrFormat("%.0f", micros.size() / Seconds(last - first));
  }
  std::printf("| %s | %zu | %d | %s | %s | %.2f | %.2f | %.2f |\n", kRpcNames[kind], micros.size(),
              error_count, rate.c_str(), offered.c_str(), QuantileMs(micros, 0.50),
              QuantileMs(micros, 0.99), micros.empty() ? 0.0 : micros.back() / 1e3);
}

// The coordinator's step-row counters (mtrain_coordinator_step_rows_total and
// _transactions_total) from its /metrics; nullopt when unreadable.
std::optional<std::pair<double, double>> StepWriteCounters(const std::string& http_address) {
  const size_t colon = http_address.rfind(':');
  int port = 0;
  if (colon == std::string::npos || !absl::SimpleAtoi(http_address.substr(colon + 1), &port)) {
    return std::nullopt;
  }
  absl::StatusOr<HttpResponse> response = HttpGet(port, "/metrics");
  if (!response.ok() || response->status != 200) return std::nullopt;
  std::optional<double> rows, transactions;
  for (absl::string_view line : absl::StrSplit(response->body, '\n')) {
    double value = 0;
    if (absl::ConsumePrefix(&line, "mtrain_coordinator_step_rows_total ") &&
        absl::SimpleAtod(line, &value)) {
      rows = value;
    } else if (absl::ConsumePrefix(&line, "mtrain_coordinator_step_transactions_total ") &&
               absl::SimpleAtod(line, &value)) {
      transactions = value;
    }
  }
  if (!rows || !transactions) return std::nullopt;
  return std::make_pair(*rows, *transactions);
}

bool WaitFor(const std::function<bool()>& done, Clock::duration timeout) {
  const TimePoint deadline = Clock::now() + timeout;
  while (!done()) {
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

void PrepareUserCall(grpc::ClientContext* context) {
  context->set_deadline(std::chrono::system_clock::now() + kUnaryDeadline);
}

int Run() {
  const std::string address = absl::GetFlag(FLAGS_coordinator);
  const int num_workers = absl::GetFlag(FLAGS_workers);
  const int per_host = absl::GetFlag(FLAGS_workers_per_host);
  const double seconds = absl::GetFlag(FLAGS_seconds);
  const int heartbeat_ms = absl::GetFlag(FLAGS_heartbeat_ms);
  const double steps_per_second = absl::GetFlag(FLAGS_steps_per_second);
  const int num_threads = absl::GetFlag(FLAGS_threads);
  const int num_jobs = absl::GetFlag(FLAGS_jobs);
  const int64_t job_steps = absl::GetFlag(FLAGS_job_steps);
  const bool kill_worker = absl::GetFlag(FLAGS_kill_worker);
  const std::string http = absl::GetFlag(FLAGS_coordinator_http);
  const int pid = absl::GetFlag(FLAGS_coordinator_pid);
  if (address.empty() || num_workers <= 0 || per_host <= 0 || seconds <= 0 || heartbeat_ms <= 0 ||
      steps_per_second <= 0 || num_threads <= 0 || num_jobs <= 0 || job_steps < 0 ||
      num_workers % num_jobs != 0) {
    std::fprintf(stderr,
                 "coordinator_load: --coordinator is required; --workers, --workers_per_host, "
                 "--seconds, --heartbeat_ms, --steps_per_second, --threads and --jobs must be "
                 "> 0, --workers divisible by --jobs, --job_steps >= 0\n");
    return 2;
  }
  const int job_world = num_workers / num_jobs;

  const Options options{std::chrono::milliseconds(heartbeat_ms),
                        std::chrono::microseconds(std::llround(1e6 / steps_per_second)), job_steps};
  Progress progress;
  std::vector<std::unique_ptr<ClientThread>> threads;
  for (int t = 0; t < num_threads; ++t) {
    threads.push_back(std::make_unique<ClientThread>(options, &progress));
  }
  absl::BitGen random;
  for (int i = 0; i < num_workers; ++i) {
    auto worker = std::make_unique<SimWorker>();
    WorkerInfo& info = worker->info;
    info.set_worker_id(absl::StrFormat("sim-worker-%04d", i));
    info.set_host(absl::StrFormat("sim-host-%d", i / per_host));
    info.set_device_kind(DEVICE_KIND_CPU);
    info.set_device_count(0);
    info.set_memory_bytes(int64_t{16} << 30);
    info.set_device_name("cpu");
    info.set_incarnation_id(absl::StrFormat("%016x", absl::Uniform<uint64_t>(random)));
    worker->daemon = Coordinator::NewStub(NewConnection(address));
    worker->rank = Coordinator::NewStub(NewConnection(address));
    threads[i % num_threads]->AddWorker(std::move(worker));
  }
  // The user's connection, as trainctl's.
  std::unique_ptr<Coordinator::Stub> user = Coordinator::NewStub(NewConnection(address));
  Recorder user_calls;

  std::printf(
      "coordinator_load: %d simulated workers on %d hosts, %d client threads; "
      "heartbeat every %d ms, %g steps/s per rank; %d job%s of %d ranks%s, against %s\n",
      num_workers, (num_workers + per_host - 1) / per_host, num_threads, heartbeat_ms,
      steps_per_second, num_jobs, num_jobs == 1 ? "" : "s", job_world,
      job_steps > 0 ? absl::StrCat(", ", job_steps, " steps each").c_str() : "", address.c_str());
  std::fflush(stdout);

  const TimePoint begin = Clock::now();
  for (auto& thread : threads) thread->Start();
  int status = 0;
  std::vector<std::string> job_ids;
  TimePoint submitted{}, streaming{}, window_begin{}, window_end{}, cancelled{};
  ProcessSample coordinator_before, coordinator_after, client_before, client_after;
  MachineSample machine_before, machine_after;
  std::optional<std::pair<double, double>> writes_before, writes_after;
  int64_t max_lag = 0, last_written = 0, last_recorded = 0;
  std::map<JobState, int> job_ends;
  double kill_to_last_abort = -1;
  double generation_ended_after = -1;
  const bool isolate_cancel = absl::GetFlag(FLAGS_isolate_cancel);
  TimePoint isolate_begin, isolate_end;  // --isolate_cancel: the 3 s after the first cancel
  int others_running = 0;                // the other jobs still RUNNING at its end
  int kill_aborts = 0;
  const std::string pid_text = absl::StrCat(pid);

  // GetJob as the user's polls; the job's status, or nullopt on an error (recorded).
  const auto get_job = [&](const std::string& id) -> std::optional<JobStatus> {
    GetJobRequest request;
    request.set_job_id(id);
    JobStatus job;
    grpc::ClientContext context;
    PrepareUserCall(&context);
    const TimePoint start = Clock::now();
    const grpc::Status get_status = user->GetJob(&context, request, &job);
    user_calls.Add(kGetJob, start, get_status.error_code());
    if (!get_status.ok()) return std::nullopt;
    return job;
  };

  // Everything after the threads start is one block so that every failure path still
  // stops and joins them.
  do {
    if (!WaitFor([&] { return progress.registered.load() == num_workers; }, kSetupTimeout)) {
      std::fprintf(stderr, "coordinator_load: only %d of %d workers registered in %lld s\n",
                   progress.registered.load(), num_workers,
                   static_cast<long long>(kSetupTimeout.count()));
      status = 1;
      break;
    }
    const TimePoint registered = Clock::now();

    for (int j = 0; j < num_jobs && status == 0; ++j) {
      SubmitJobRequest submit;
      *submit.mutable_spec() = BenchJobSpec(job_world, job_steps);
      SubmitJobResponse submit_response;
      grpc::ClientContext submit_context;
      PrepareUserCall(&submit_context);
      const TimePoint submit_start = Clock::now();
      const grpc::Status submit_status = user->SubmitJob(&submit_context, submit, &submit_response);
      user_calls.Add(kSubmitJob, submit_start, submit_status.error_code());
      if (!submit_status.ok()) {
        std::fprintf(stderr, "coordinator_load: SubmitJob: %s\n",
                     submit_status.error_message().c_str());
        status = 1;
      }
      job_ids.push_back(submit_response.job_id());
    }
    if (status != 0) break;
    submitted = Clock::now();
    // Every rank has opened its stream once (a finite job's ranks may be done already).
    if (!WaitFor([&] { return progress.streams_started.load() >= num_workers; }, kSetupTimeout)) {
      std::fprintf(stderr, "coordinator_load: only %d of %d ranks opened a metrics stream\n",
                   progress.streams_started.load(), num_workers);
      status = 1;
      break;
    }
    streaming = Clock::now();
    std::printf(
        "setup: %d workers registered in %.2f s; %d job%s placed, every rank streaming "
        "%.3f s after the last SubmitJob returned\n",
        num_workers, Seconds(registered - begin), num_jobs, num_jobs == 1 ? "" : "s",
        Seconds(streaming - submitted));
    std::fflush(stdout);

    // The measured window: a user polls GetJob once a second meanwhile (every unfinished
    // job, with --job_steps, until all have ended).
    if (pid > 0) coordinator_before = SampleProcess(pid_text);
    client_before = SampleProcess("self");
    machine_before = SampleMachine();
    if (!http.empty()) writes_before = StepWriteCounters(http);
    window_begin = Clock::now();
    const TimePoint end =
        job_steps > 0
            ? window_begin + std::chrono::microseconds(std::llround(
                                 (job_steps / steps_per_second + 60 + 0.05 * num_jobs) * 1e6))
            : window_begin + std::chrono::microseconds(std::llround(seconds * 1e6));
    std::set<std::string> unfinished(job_ids.begin(), job_ids.end());
    for (TimePoint next = window_begin + std::chrono::seconds(1);;
         next += std::chrono::seconds(1)) {
      std::this_thread::sleep_until(std::min(next, end));
      if (Clock::now() >= end) break;
      if (job_steps > 0) {
        for (auto it = unfinished.begin(); it != unfinished.end();) {
          const std::optional<JobStatus> job = get_job(*it);
          if (job && (job->state() == JOB_STATE_SUCCEEDED || job->state() == JOB_STATE_FAILED ||
                      job->state() == JOB_STATE_CANCELLED)) {
            ++job_ends[job->state()];
            it = unfinished.erase(it);
          } else {
            ++it;
          }
        }
        if (unfinished.empty()) break;
        continue;
      }
      const int64_t written = progress.reporting_rank_step.load();
      const std::optional<JobStatus> job = get_job(job_ids[0]);
      if (!job) continue;
      // Steps written before the call but not yet stored when it was answered (one job:
      // the reporting rank is that job's).
      if (num_jobs == 1) {
        last_written = written;
        last_recorded = job->step();
        max_lag = std::max(max_lag, written - job->step());
      }
      if (job->state() != JOB_STATE_RUNNING) {
        std::fprintf(stderr, "coordinator_load: %s left RUNNING during the window: %s %s\n",
                     job_ids[0].c_str(), JobState_Name(job->state()).c_str(),
                     job->message().c_str());
        status = 1;
        break;
      }
    }
    window_end = Clock::now();
    if (pid > 0) coordinator_after = SampleProcess(pid_text);
    client_after = SampleProcess("self");
    machine_after = SampleMachine();
    if (!http.empty()) writes_after = StepWriteCounters(http);
    if (job_steps > 0 && !unfinished.empty()) {
      std::fprintf(stderr, "coordinator_load: %zu of %d jobs had not ended by the deadline\n",
                   unfinished.size(), num_jobs);
      status = 1;
    }

    if (const int upload_mib = absl::GetFlag(FLAGS_upload_mib); upload_mib > 0 && job_steps == 0) {
      // A rank's checkpoint shard, uploaded as the real rank does (1 MiB chunks), during
      // the load: the coordinator's receive window decides its rate.
      const std::optional<JobStatus> job = get_job(job_ids[0]);
      if (!job.has_value()) {
        status = 1;
      } else {
        auto rank = Coordinator::NewStub(NewConnection(address));
        const std::string shard(static_cast<size_t>(upload_mib) << 20, '\x5a');
        const TimePoint start = Clock::now();
        const absl::Status uploaded =
            UploadCheckpointBytes(rank.get(), PrepareUserCall, job_ids[0], job->generation(),
                                  std::max<int64_t>(job->step(), 1), "rank-00000.bin", shard);
        const double elapsed = Seconds(Clock::now() - start);
        if (!uploaded.ok()) {
          std::fprintf(stderr, "coordinator_load: upload failed: %s\n",
                       uploaded.ToString().c_str());
          status = 1;
        } else {
          std::printf("checkpoint upload: %d MiB in %.3f s (%.0f MiB/s) under the load\n",
                      upload_mib, elapsed, upload_mib / elapsed);
        }
      }
    }

    if (kill_worker && job_steps == 0) {
      // One worker of the first job dies; its generation's other ranks should be told to
      // abort once the coordinator's heartbeat timeout has passed.
      for (auto& thread : threads) thread->WatchAbortsOf(job_ids[0]);
      for (auto& thread : threads) {
        thread->RequestKill();
        if (WaitFor([&] { return progress.killed_at_ns.load() != 0; }, std::chrono::seconds(1))) {
          break;
        }
      }
      if (progress.killed_at_ns.load() == 0) {
        std::fprintf(stderr, "coordinator_load: no worker of %s could be killed\n",
                     job_ids[0].c_str());
        status = 1;
      } else {
        // When the coordinator ends the generation (the job leaves RUNNING: FAILED here,
        // as the benchmark's job has no restarts), polled every 100 ms.
        WaitFor(
            [&] {
              const std::optional<JobStatus> job = get_job(job_ids[0]);
              if (!job || job->state() == JOB_STATE_RUNNING) return false;
              generation_ended_after =
                  Seconds(Clock::now().time_since_epoch()) - progress.killed_at_ns.load() / 1e9;
              return true;
            },
            std::chrono::seconds(60));
        WaitFor([&] { return progress.kill_job_aborts.load() >= job_world - 1; },
                std::chrono::seconds(60));
        kill_aborts = progress.kill_job_aborts.load();
        if (kill_aborts > 0) {
          kill_to_last_abort =
              (progress.last_kill_job_abort_ns.load() - progress.killed_at_ns.load()) / 1e9;
        }
      }
    }

    // Cancels one job as the user would; returns when the call was made.
    const auto cancel_job = [&](const std::string& id) {
      CancelJobRequest cancel;
      cancel.set_job_id(id);
      CancelJobResponse cancel_response;
      grpc::ClientContext cancel_context;
      PrepareUserCall(&cancel_context);
      const TimePoint start = Clock::now();
      const grpc::Status cancel_status = user->CancelJob(&cancel_context, cancel, &cancel_response);
      user_calls.Add(kCancelJob, start, cancel_status.error_code());
      return start;
    };
    if (isolate_cancel && job_steps == 0 && num_jobs >= 2) {
      // The first job alone: its ranks' aborts and stream ends, its rows and events, while
      // the others keep heartbeating and streaming.
      isolate_begin = cancel_job(job_ids[0]);
      std::this_thread::sleep_until(isolate_begin + std::chrono::seconds(3));
      isolate_end = Clock::now();
      for (size_t j = 1; j < job_ids.size(); ++j) {
        const std::optional<JobStatus> job = get_job(job_ids[j]);
        if (job && job->state() == JOB_STATE_RUNNING) ++others_running;
      }
    }
    for (const std::string& id : job_ids) {
      if (job_steps > 0) break;                                      // they ended by themselves
      if (isolate_end != TimePoint{} && id == job_ids[0]) continue;  // cancelled above
      cancel_job(id);
    }
    cancelled = Clock::now();
    if (job_steps == 0) {
      // The aborts travel with the next heartbeats; give them a few periods to arrive.
      WaitFor([&] { return progress.streaming.load() == 0; },
              std::chrono::seconds(2) + 5 * options.heartbeat_period);
    }
  } while (false);

  for (auto& thread : threads) thread->StopAndJoin();
  Recorder merged;
  Tallies tallies;
  for (const auto& thread : threads) {
    for (int kind = 0; kind < kNumKinds; ++kind) {
      const std::vector<Sample>& samples = thread->recorder().samples[kind];
      merged.samples[kind].insert(merged.samples[kind].end(), samples.begin(), samples.end());
    }
    tallies.MergeFrom(thread->tallies());
  }
  for (int kind = 0; kind < kNumKinds; ++kind) {
    const std::vector<Sample>& samples = user_calls.samples[kind];
    merged.samples[kind].insert(merged.samples[kind].end(), samples.begin(), samples.end());
  }
  if (window_end == TimePoint{}) return status;  // no window was measured; said why above

  const double window = Seconds(window_end - window_begin);
  std::printf("window: %.1f s\n\n", window);
  if (const std::string trace = absl::GetFlag(FLAGS_latency_trace); !trace.empty()) {
    std::ofstream out(trace);
    out << "start_ms,latency_ms,code\n";
    for (const Sample& sample : merged.samples[kHeartbeat]) {
      if (sample.start < window_begin || sample.start >= window_end) continue;
      out << absl::StrFormat("%.3f,%.3f,%d\n", Seconds(sample.start - window_begin) * 1e3,
                             sample.micros / 1e3, sample.code);
    }
  }
  std::printf("| RPC | count | errors | rate /s | offered /s | p50 ms | p99 ms | max ms |\n");
  std::printf("|---|---|---|---|---|---|---|---|\n");
  std::map<std::string, int> errors;
  PrintRow(kRegister, merged.samples[kRegister], {}, {}, false, "burst", &errors);
  PrintRow(kHeartbeat, merged.samples[kHeartbeat], window_begin, window_end, true,
           absl::StrFormat("%.0f", num_workers * 1000.0 / heartbeat_ms), &errors);
  PrintRow(kMetricsWrite, merged.samples[kMetricsWrite], window_begin, window_end, true,
           absl::StrFormat("%.0f", num_workers * steps_per_second), &errors);
  if (job_steps > 0) {
    PrintRow(kRankResult, merged.samples[kRankResult], {}, {}, false, "-", &errors);
  }
  PrintRow(kSubmitJob, merged.samples[kSubmitJob], {}, {}, false, "-", &errors);
  PrintRow(kGetJob, merged.samples[kGetJob], window_begin, window_end, true,
           job_steps > 0 ? "-" : "1", &errors);
  PrintRow(kCancelJob, merged.samples[kCancelJob], {}, {}, false, "-", &errors);
  std::printf("\n");

  if (coordinator_before.ok && coordinator_after.ok) {
    const double user_s = coordinator_after.user_seconds - coordinator_before.user_seconds;
    const double system_s = coordinator_after.system_seconds - coordinator_before.system_seconds;
    std::printf(
        "coordinator (pid %d): %.0f%% of one core (user %.0f%%, system %.0f%%); "
        "%d threads; RSS %.0f MiB\n",
        pid, 100 * (user_s + system_s) / window, 100 * user_s / window, 100 * system_s / window,
        coordinator_after.threads, coordinator_after.rss_kib / 1024.0);
  } else if (pid > 0) {
    std::printf("coordinator (pid %d): /proc unreadable, CPU not measured\n", pid);
  }
  if (client_before.ok && client_after.ok) {
    const double cpu = client_after.user_seconds + client_after.system_seconds -
                       client_before.user_seconds - client_before.system_seconds;
    std::printf("this client: %.0f%% of one core; %d threads\n", 100 * cpu / window,
                client_after.threads);
  }
  if (machine_before.ok && machine_after.ok) {
    const double busy = machine_after.busy - machine_before.busy;
    const double idle = machine_after.idle - machine_before.idle;
    const double steal = machine_after.steal - machine_before.steal;
    const double total = busy + idle + steal;
    if (total > 0) {
      std::printf(
          "machine: busy %.0f%%, idle %.0f%%, stolen by the hypervisor %.0f%% of %d CPUs%s\n",
          100 * busy / total, 100 * idle / total, 100 * steal / total,
          static_cast<int>(std::thread::hardware_concurrency()),
          steal / total > 0.05 ? " (latencies of this run are the host's as much as ours)" : "");
    }
  }
  if (num_jobs == 1 && job_steps == 0) {
    std::printf(
        "recorded steps: at the last poll the reporting rank had written step %lld and "
        "GetJob said %lld; largest lag over the polls %lld steps\n",
        static_cast<long long>(last_written), static_cast<long long>(last_recorded),
        static_cast<long long>(max_lag));
  }
  if (job_steps > 0) {
    std::vector<std::string> ends;
    for (const auto& [state, n] : job_ends)
      ends.push_back(absl::StrCat(n, " ", JobState_Name(state)));
    std::printf("jobs: %s of %d; every job ended %.1f s after the last SubmitJob returned\n",
                ends.empty() ? "none ended" : absl::StrJoin(ends, ", ").c_str(), num_jobs,
                Seconds(window_end - submitted));
  }
  if (writes_before && writes_after) {
    const double rows = writes_after->first - writes_before->first;
    const double transactions = writes_after->second - writes_before->second;
    std::printf(
        "job store: %.0f step rows in %.0f transactions over the window (%.1f rows/s, %.1f "
        "fsyncs/s)\n",
        rows, transactions, rows / window, transactions / window);
  }
  if (kill_worker) {
    if (kill_to_last_abort >= 0) {
      std::vector<double> delays;
      const double killed = progress.killed_at_ns.load() / 1e9;
      for (const TimePoint t : tallies.kill_job_aborts) {
        delays.push_back(Seconds(t.time_since_epoch()) - killed);
      }
      std::sort(delays.begin(), delays.end());
      std::printf(
          "a dead worker: its generation ended %.2f s after it died (the coordinator's "
          "--heartbeat_timeout, default 10 s, plus up to a tick); %d of the other %d ranks "
          "told to abort with their next heartbeat, p50 %.2f s, the last %.2f s after it "
          "died\n",
          generation_ended_after, kill_aborts, job_world - 1,
          delays.empty() ? 0.0 : delays[delays.size() / 2], kill_to_last_abort);
    } else {
      std::printf("a dead worker: no abort reached its generation's other ranks in 60 s\n");
    }
  }
  if (isolate_end != TimePoint{}) {
    // Every worker's heartbeats (the cancelled job's carry its aborts, then say IDLE) and the
    // other jobs' metrics writes (the cancelled job's streams end).
    const auto quantiles = [&](RpcKind kind, TimePoint from, TimePoint to) {
      std::vector<int64_t> micros;
      for (const Sample& sample : merged.samples[kind]) {
        if (sample.start >= from && sample.start < to && sample.code == 0) {
          micros.push_back(sample.micros);
        }
      }
      std::sort(micros.begin(), micros.end());
      return absl::StrFormat("p50 %.2f ms, p99 %.2f ms over %zu", QuantileMs(micros, 0.50),
                             QuantileMs(micros, 0.99), micros.size());
    };
    std::printf(
        "cancelling %s alone: in the 3 s after, heartbeats %s (window: %s); metrics writes %s "
        "(window: %s); %d of the other %d jobs still RUNNING\n",
        job_ids[0].c_str(), quantiles(kHeartbeat, isolate_begin, isolate_end).c_str(),
        quantiles(kHeartbeat, window_begin, window_end).c_str(),
        quantiles(kMetricsWrite, isolate_begin, isolate_end).c_str(),
        quantiles(kMetricsWrite, window_begin, window_end).c_str(), others_running, num_jobs - 1);
    if (others_running != num_jobs - 1) status = 1;
  }
  std::printf(
      "assign commands: %d received, the last %.3f s after SubmitJob returned; the "
      "largest %.1f KiB (each names its own peer, not the others)\n",
      tallies.assigns, Seconds(tallies.last_assign - submitted), tallies.assign_bytes / 1024.0);
  std::printf(
      "step ticks skipped because the previous Write was still in flight: %lld; "
      "re-registrations: %d\n",
      static_cast<long long>(tallies.skipped_steps), tallies.reregistrations);
  if (job_steps == 0 && tallies.last_abort > cancelled) {
    std::printf("after CancelJob: %d aborts delivered, the last %.3f s after the call returned\n",
                tallies.aborts, Seconds(tallies.last_abort - cancelled));
  }
  std::vector<std::string> ends;
  for (const auto& [code, n] : tallies.stream_ends)
    ends.push_back(absl::StrCat(n, " ", CodeName(code)));
  std::printf("metrics streams ended: %s\n", absl::StrJoin(ends, ", ").c_str());
  for (const auto& [what, n] : errors) std::printf("error: %s x %d\n", what.c_str(), n);
  return status;
}

}  // namespace
}  // namespace mtrain

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Load benchmark of a running coordinator: --coordinator=HOST:PORT [--workers=256 "
      "--seconds=20 --heartbeat_ms=100 --steps_per_second=20 --threads=2 --jobs=1 "
      "--job_steps=0 --kill_worker --isolate_cancel --upload_mib=0 --coordinator_http=HOST:PORT "
      "--coordinator_pid=PID]");
  absl::ParseCommandLine(argc, argv);
  // As in the coordinator (coordinator_main.cc): Debian's Abseil checks every absl::Mutex
  // acquisition for lock-order cycles, and gRPC locks one on every call; at 4,096 simulated
  // workers that check was 18% of this client's CPU, which the coordinator's RPCs then
  // waited for.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  return mtrain::Run();
}
