// libFuzzer target: request bytes of the coordinator's RPCs, as a client could send them,
// parsed into each request message and handed to the service logic (the gRPC adapter,
// CoordinatorGrpcService, called directly with a default ServerContext) over a real
// JobManager, SQLite JobStore, checkpoint store, worker registry and rendezvous store.
//
// An input is a sequence of calls, so that one input can register, submit, heartbeat and
// report: each call is [method byte][length, 2 bytes little-endian][request bytes].
// Every input starts from a fresh coordinator (SQLite in memory) with four live CPU
// workers registered, so that submissions can be admitted and placed, and a crash
// reproduces from its input alone. Time is a FakeClock that a call can advance, so
// heartbeat timeouts and shrinking happen too.
// Streaming RPCs are reached through the JobManager calls behind them (OnMetrics,
// CheckCheckpointUpload).
//
// Build and run: tools/fuzz.sh (clang, -fsanitize=fuzzer,address,undefined). Under Bazel
// the same file builds with tests/fuzz/replay_main.cc into a test that replays the corpus.
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "coordinator/checkpoint_store.h"
#include "coordinator/grpc_service.h"
#include "coordinator/job_manager.h"
#include "coordinator/job_store.h"
#include "coordinator/rendezvous_store.h"
#include "coordinator/worker_registry.h"
#include "proto/coordinator.pb.h"

namespace mtrain {
namespace {

constexpr int kWorkers = 4;

enum Method : uint8_t {
  kRegisterWorker,
  kHeartbeat,
  kListWorkers,
  kRemoveWorker,
  kSubmitJob,
  kGetJob,
  kListJobs,
  kCancelJob,
  kListJobEvents,
  kKeyValueSet,
  kKeyValueGet,
  kKeyValueWait,
  kReportRankResult,
  kListCheckpoints,
  kOnMetrics,
  kCheckCheckpointUpload,
  kAdvanceClock,
  kMethodCount,
};

// One coordinator's worth of state in its own directory.
class State {
 public:
  explicit State(int serial)
      : dir_(absl::StrCat(TempRoot(), "/mtrain-rpc-fuzz-", getpid(), "-", serial)),
        clock_(absl::FromUnixSeconds(1700000000)),
        workers_(&clock_, WorkerRegistryOptions()) {
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    store_ = Must(JobStore::Open(":memory:"));
    checkpoints_ = Must(CheckpointStore::Open(dir_ + "/checkpoints", /*keep_last=*/2));
    JobManagerOptions options;
    jobs_ = Must(JobManager::Create(&clock_, &workers_, store_.get(), &rendezvous_,
                                    /*metrics=*/nullptr, options, checkpoints_.get()));
    service_ = std::make_unique<CoordinatorGrpcService>(&workers_, &rendezvous_, jobs_.get(),
                                                        /*metrics=*/nullptr, /*auth_token=*/"",
                                                        checkpoints_.get());
    for (int w = 0; w < kWorkers; ++w) {
      WorkerInfo info;
      info.set_worker_id(absl::StrCat("w", w));
      info.set_host("127.0.0.1");
      info.set_device_kind(DEVICE_KIND_CPU);
      info.set_memory_bytes(int64_t{16} << 30);
      info.set_incarnation_id(absl::StrCat("inc-", w));
      bool restarted = false;
      (void)workers_.Register(info, &restarted);
    }
  }
  ~State() {
    service_.reset();
    jobs_.reset();
    checkpoints_.reset();
    store_.reset();
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }

  void Call(uint8_t method, const uint8_t* data, size_t size) {
    grpc::ServerContext context;
    switch (method % kMethodCount) {
      case kRegisterWorker:
        Unary<RegisterWorkerRequest, RegisterWorkerResponse>(
            data, size, [&](auto* q, auto* r) { return service_->RegisterWorker(&context, q, r); });
        break;
      case kHeartbeat:
        Unary<HeartbeatRequest, HeartbeatResponse>(
            data, size, [&](auto* q, auto* r) { return service_->Heartbeat(&context, q, r); });
        break;
      case kListWorkers:
        Unary<ListWorkersRequest, ListWorkersResponse>(
            data, size, [&](auto* q, auto* r) { return service_->ListWorkers(&context, q, r); });
        break;
      case kRemoveWorker:
        Unary<RemoveWorkerRequest, RemoveWorkerResponse>(
            data, size, [&](auto* q, auto* r) { return service_->RemoveWorker(&context, q, r); });
        break;
      case kSubmitJob:
        Unary<SubmitJobRequest, SubmitJobResponse>(
            data, size, [&](auto* q, auto* r) { return service_->SubmitJob(&context, q, r); });
        break;
      case kGetJob:
        Unary<GetJobRequest, JobStatus>(
            data, size, [&](auto* q, auto* r) { return service_->GetJob(&context, q, r); });
        break;
      case kListJobs:
        Unary<ListJobsRequest, ListJobsResponse>(
            data, size, [&](auto* q, auto* r) { return service_->ListJobs(&context, q, r); });
        break;
      case kCancelJob:
        Unary<CancelJobRequest, CancelJobResponse>(
            data, size, [&](auto* q, auto* r) { return service_->CancelJob(&context, q, r); });
        break;
      case kListJobEvents:
        Unary<ListJobEventsRequest, ListJobEventsResponse>(
            data, size, [&](auto* q, auto* r) { return service_->ListJobEvents(&context, q, r); });
        break;
      case kKeyValueSet:
        Unary<KeyValueSetRequest, KeyValueSetResponse>(
            data, size, [&](auto* q, auto* r) { return service_->KeyValueSet(&context, q, r); });
        break;
      case kKeyValueGet:
        Unary<KeyValueGetRequest, KeyValueGetResponse>(
            data, size, [&](auto* q, auto* r) { return service_->KeyValueGet(&context, q, r); });
        break;
      case kKeyValueWait:
        Unary<KeyValueWaitRequest, KeyValueWaitResponse>(data, size, [&](auto* q, auto* r) {
          // A real wait would stall the fuzzer: a millisecond still runs the whole path.
          auto bounded = *q;
          bounded.set_timeout_ms(1);
          return service_->KeyValueWait(&context, &bounded, r);
        });
        break;
      case kReportRankResult:
        Unary<RankResult, ReportRankResultResponse>(data, size, [&](auto* q, auto* r) {
          return service_->ReportRankResult(&context, q, r);
        });
        break;
      case kListCheckpoints:
        Unary<ListCheckpointsRequest, ListCheckpointsResponse>(data, size, [&](auto* q, auto* r) {
          return service_->ListCheckpoints(&context, q, r);
        });
        break;
      case kOnMetrics: {
        StepMetrics metrics;
        if (metrics.ParseFromArray(data, static_cast<int>(size))) (void)jobs_->OnMetrics(metrics);
        break;
      }
      case kCheckCheckpointUpload: {
        CheckpointChunk chunk;
        if (chunk.ParseFromArray(data, static_cast<int>(size))) {
          (void)jobs_->CheckCheckpointUpload(chunk.job_id(), chunk.generation(), chunk.step());
        }
        break;
      }
      case kAdvanceClock:
        clock_.Advance(absl::Milliseconds(size > 0 ? data[0] * 100 : 1000));
        jobs_->Tick();
        break;
    }
  }

 private:
  template <typename Request, typename Response, typename F>
  static void Unary(const uint8_t* data, size_t size, F call) {
    Request request;
    // What gRPC does before a handler runs: bytes that do not parse never reach it.
    if (!request.ParseFromArray(data, static_cast<int>(size))) return;
    Response response;
    (void)call(&request, &response);
  }

  template <typename T>
  static T Must(absl::StatusOr<T> value) {
    if (!value.ok()) {
      std::fprintf(stderr, "fuzzer setup: %s\n", value.status().ToString().c_str());
      std::abort();
    }
    return *std::move(value);
  }

  static std::string TempRoot() {
    const char* tmp = std::getenv("TEST_TMPDIR");
    return tmp != nullptr ? tmp : "/tmp";
  }

  const std::string dir_;
  FakeClock clock_;
  WorkerRegistry workers_;
  RendezvousStore rendezvous_;
  std::unique_ptr<JobStore> store_;
  std::unique_ptr<CheckpointStore> checkpoints_;
  std::unique_ptr<JobManager> jobs_;
  std::unique_ptr<CoordinatorGrpcService> service_;
};

// One call of an input sequence.
std::string Call(Method method, const google::protobuf::Message& request) {
  const std::string bytes = request.SerializeAsString();
  std::string call(1, static_cast<char>(method));
  call.push_back(static_cast<char>(bytes.size() & 0xff));
  call.push_back(static_cast<char>(bytes.size() >> 8));
  return call + bytes;
}

}  // namespace

// A job's life as clients and workers drive it: starting points for the fuzzer.
std::vector<std::string> FuzzSeeds() {
  SubmitJobRequest submit;
  submit.mutable_spec()->mutable_train()->set_steps(2);
  submit.mutable_spec()->mutable_parallel()->set_data(2);
  HeartbeatRequest beat;
  beat.set_worker_id("w0");
  beat.set_incarnation_id("inc-0");
  beat.set_state(WORKER_STATE_IDLE);
  GetJobRequest get;
  get.set_job_id("job-1");
  KeyValueSetRequest set;
  set.set_key("job-1/gen-1/rank0");
  set.set_value("127.0.0.1:1234");
  KeyValueGetRequest kv_get;
  kv_get.set_key(set.key());
  KeyValueWaitRequest wait;
  wait.add_keys(set.key());
  wait.add_keys("job-1/gen-1/rank1");
  StepMetrics step;
  step.set_job_id("job-1");
  step.set_generation(1);
  step.set_global_rank(1);
  step.set_step(1);
  step.set_loss(5.5);
  RankResult result;
  result.set_job_id("job-1");
  result.set_generation(1);
  result.set_global_rank(0);
  ListJobEventsRequest events;
  events.set_job_id("job-1");
  CancelJobRequest cancel;
  cancel.set_job_id("job-1");
  std::string life = Call(kSubmitJob, submit) + Call(kHeartbeat, beat) + Call(kGetJob, get) +
                     Call(kKeyValueSet, set) + Call(kKeyValueGet, kv_get) +
                     Call(kKeyValueWait, wait) + Call(kOnMetrics, step) +
                     Call(kReportRankResult, result) + Call(kListJobs, ListJobsRequest()) +
                     Call(kListJobEvents, events) + Call(kAdvanceClock, ListWorkersRequest()) +
                     Call(kCancelJob, cancel);
  SubmitJobRequest poisoned = submit;
  poisoned.mutable_spec()->mutable_parallel()->set_global_batch_size(2147483647);
  RegisterWorkerRequest registration;
  registration.mutable_worker()->set_worker_id("w9");
  registration.mutable_worker()->set_incarnation_id("inc-9");
  registration.mutable_worker()->set_host("127.0.0.1");
  RemoveWorkerRequest remove;
  remove.set_worker_id("w9");
  // A placed worker re-registering under a new incarnation (once a use-after-free).
  RegisterWorkerRequest restarted;
  restarted.mutable_worker()->set_worker_id("w0");
  restarted.mutable_worker()->set_incarnation_id("inc-0-again");
  restarted.mutable_worker()->set_host("127.0.0.1");
  return {life, Call(kSubmitJob, poisoned) + Call(kHeartbeat, beat),
          Call(kRegisterWorker, registration) + Call(kListWorkers, ListWorkersRequest()) +
              Call(kRemoveWorker, remove),
          Call(kSubmitJob, submit) + Call(kRegisterWorker, restarted) + Call(kGetJob, get)};
}

}  // namespace mtrain

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static int serial = 0;
  auto state = std::make_unique<mtrain::State>(serial++);
  size_t at = 0;
  while (at + 3 <= size) {
    const uint8_t method = data[at];
    const size_t length =
        std::min<size_t>(data[at + 1] | (size_t{data[at + 2]} << 8), size - at - 3);
    state->Call(method, data + at + 3, length);
    at += 3 + length;
  }
  return 0;
}
