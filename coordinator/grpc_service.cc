#include "coordinator/grpc_service.h"

#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "common/grpc_status.h"
#include "common/mutex.h"
#include "common/proto_utf8.h"
#include "common/status_macros.h"
#include "coordinator/job_listing.h"
#include "coordinator/metrics_read_ahead.h"

namespace mtrain {
namespace {

// A client may ask to wait at most this long in one call, so a forgotten waiter cannot
// pin a server thread forever.
constexpr absl::Duration kMaxRendezvousWait = absl::Minutes(10);

// Takes the same time wherever the strings differ, so answer times do not reveal how much
// of a guessed token was right.
bool SameSecret(absl::string_view a, absl::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned char difference = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    difference |= static_cast<unsigned char>(a[i] ^ b[i]);
  }
  return difference == 0;
}

// A stream (or call) answered before any message moves: refused by authentication, or a
// coordinator without a job manager. Base is the method's reactor type.
template <typename Base>
class Refused : public Base {
 public:
  explicit Refused(const grpc::Status& status) { this->Finish(status); }
  void OnDone() override { delete this; }
};

}  // namespace

CoordinatorGrpcService::CoordinatorGrpcService(WorkerRegistry* workers, RendezvousStore* rendezvous,
                                               JobManager* jobs, CoordinatorMetrics* metrics,
                                               std::string auth_token, CheckpointStore* checkpoints)
    : workers_(workers),
      rendezvous_(rendezvous),
      jobs_(jobs),
      metrics_(metrics),
      auth_token_(std::move(auth_token)),
      checkpoints_(checkpoints) {}

grpc::Status CoordinatorGrpcService::Authorize(const grpc::ServerContextBase& context) const {
  if (auth_token_.empty()) return grpc::Status::OK;
  const auto& metadata = context.client_metadata();
  const auto it = metadata.find("authorization");
  if (it != metadata.end() && SameSecret(absl::string_view(it->second.data(), it->second.size()),
                                         "Bearer " + auth_token_)) {
    return grpc::Status::OK;
  }
  return grpc::Status(
      grpc::StatusCode::UNAUTHENTICATED,
      it == metadata.end()
          ? "this coordinator requires a bearer token: pass --token_file=FILE (trainctl, "
            "worker, train) with the coordinator's --auth_token_file, or the auth_token file "
            "it generated in its state dir"
          : "the bearer token is not the coordinator's");
}

grpc::Status CoordinatorGrpcService::Answer(const char* method, const grpc::Status& status) const {
  if (!status.ok() && metrics_ != nullptr) {
    // gRPC's codes are absl's, number for number.
    metrics_->AddRpcError(
        method, absl::StatusCodeToString(static_cast<absl::StatusCode>(status.error_code())));
  }
  return status;
}

grpc::Status CoordinatorGrpcService::NoJobs() const {
  return grpc::Status(grpc::StatusCode::UNAVAILABLE, "this coordinator runs no job manager");
}

#define MTRAIN_AUTHORIZE(method)                 \
  do {                                           \
    grpc::Status auth = Authorize(*context);     \
    if (!auth.ok()) return Answer(method, auth); \
  } while (0)

grpc::Status CoordinatorGrpcService::RegisterWorker(grpc::ServerContext* context,
                                                    const RegisterWorkerRequest* request,
                                                    RegisterWorkerResponse* response) {
  MTRAIN_AUTHORIZE("RegisterWorker");
  bool restarted = false;
  absl::Status status = workers_->Register(request->worker(), &restarted);
  if (!status.ok()) return Answer("RegisterWorker", ToGrpcStatus(status));
  // A new incarnation lost whatever the old one ran; so did a worker re-registering after
  // a coordinator restart (it is told to abort through its heartbeats).
  if (restarted && jobs_ != nullptr) jobs_->OnWorkerRestarted(request->worker().worker_id());
  response->set_heartbeat_interval_ms(
      absl::ToInt64Milliseconds(workers_->options().heartbeat_interval));
  response->set_heartbeat_timeout_ms(
      absl::ToInt64Milliseconds(workers_->options().heartbeat_timeout));
  return grpc::Status::OK;
}

grpc::ServerUnaryReactor* CoordinatorGrpcService::Heartbeat(grpc::CallbackServerContext* context,
                                                            const HeartbeatRequest* request,
                                                            HeartbeatResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(HeartbeatOf(*context, *request, response));
  return reactor;
}

grpc::Status CoordinatorGrpcService::Heartbeat(grpc::ServerContext* context,
                                               const HeartbeatRequest* request,
                                               HeartbeatResponse* response) {
  return HeartbeatOf(*context, *request, response);
}

grpc::Status CoordinatorGrpcService::HeartbeatOf(const grpc::ServerContextBase& context,
                                                 const HeartbeatRequest& request,
                                                 HeartbeatResponse* response) {
  if (grpc::Status auth = Authorize(context); !auth.ok()) return Answer("Heartbeat", auth);
  absl::Status status = workers_->Heartbeat(request);
  if (!status.ok()) return Answer("Heartbeat", ToGrpcStatus(status));
  if (jobs_ != nullptr) {
    for (WorkerCommand& command : jobs_->OnHeartbeat(request)) {
      *response->add_commands() = std::move(command);
    }
  }
  return grpc::Status::OK;
}

grpc::Status CoordinatorGrpcService::ListWorkers(grpc::ServerContext* context,
                                                 const ListWorkersRequest* request,
                                                 ListWorkersResponse* response) {
  MTRAIN_AUTHORIZE("ListWorkers");
  for (WorkerStatus& worker : workers_->List()) {
    *response->add_workers() = std::move(worker);
  }
  return grpc::Status::OK;
}

grpc::Status CoordinatorGrpcService::RemoveWorker(grpc::ServerContext* context,
                                                  const RemoveWorkerRequest* request,
                                                  RemoveWorkerResponse* response) {
  MTRAIN_AUTHORIZE("RemoveWorker");
  absl::Status status = workers_->Remove(request->worker_id());
  if (!status.ok()) return Answer("RemoveWorker", ToGrpcStatus(status));
  // The worker gauges follow at once (a job the worker ran already failed: it was dead).
  if (jobs_ != nullptr) jobs_->Tick();
  return grpc::Status::OK;
}

grpc::ServerUnaryReactor* CoordinatorGrpcService::SubmitJob(grpc::CallbackServerContext* context,
                                                            const grpc::ByteBuffer* request,
                                                            grpc::ByteBuffer* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(SubmitBytes(*context, *request, response));
  return reactor;
}

grpc::Status CoordinatorGrpcService::SubmitJob(grpc::ServerContext* context,
                                               const SubmitJobRequest* request,
                                               SubmitJobResponse* response) {
  return SubmitParsed(*context, *request, response);
}

grpc::Status CoordinatorGrpcService::SubmitBytes(const grpc::ServerContextBase& context,
                                                 const grpc::ByteBuffer& request_bytes,
                                                 grpc::ByteBuffer* response_bytes) {
  // Before parsing: an unauthorised caller learns nothing about its request.
  if (grpc::Status auth = Authorize(context); !auth.ok()) return Answer("SubmitJob", auth);
  std::vector<grpc::Slice> slices;
  if (!request_bytes.Dump(&slices).ok()) {
    return Answer("SubmitJob",
                  grpc::Status(grpc::StatusCode::INTERNAL, "cannot read the request's bytes"));
  }
  std::string bytes;
  for (const grpc::Slice& slice : slices) {
    bytes.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
  }
  SubmitJobRequest request;
  if (!request.ParseFromString(bytes)) {
    const std::optional<std::string> field =
        FindInvalidUtf8Field(*SubmitJobRequest::descriptor(), bytes);
    std::string message = "the request is not a SubmitJobRequest (malformed protobuf)";
    if (field) {
      // Spec fields are named as in the spec ("data.path"), as validation names them.
      absl::string_view name = *field;
      absl::ConsumePrefix(&name, "spec.");
      message = absl::StrCat(name, ": not valid UTF-8 [rule: the strings of a job spec are UTF-8]");
    }
    return Answer("SubmitJob", grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, message));
  }
  SubmitJobResponse response;
  grpc::Status status = SubmitParsed(context, request, &response);
  if (!status.ok()) return status;
  const std::string out = response.SerializeAsString();
  grpc::Slice slice(out);
  *response_bytes = grpc::ByteBuffer(&slice, 1);
  return grpc::Status::OK;
}

grpc::Status CoordinatorGrpcService::SubmitParsed(const grpc::ServerContextBase& context,
                                                  const SubmitJobRequest& request,
                                                  SubmitJobResponse* response) {
  if (grpc::Status auth = Authorize(context); !auth.ok()) return Answer("SubmitJob", auth);
  if (jobs_ == nullptr) return Answer("SubmitJob", NoJobs());
  absl::StatusOr<std::string> id = jobs_->Submit(request.spec());
  if (!id.ok()) return Answer("SubmitJob", ToGrpcStatus(id.status()));
  response->set_job_id(*id);
  return grpc::Status::OK;
}

grpc::Status CoordinatorGrpcService::GetJob(grpc::ServerContext* context,
                                            const GetJobRequest* request, JobStatus* response) {
  MTRAIN_AUTHORIZE("GetJob");
  if (jobs_ == nullptr) return Answer("GetJob", NoJobs());
  absl::StatusOr<JobStatus> job = jobs_->Get(request->job_id());
  if (!job.ok()) return Answer("GetJob", ToGrpcStatus(job.status()));
  *response = *std::move(job);
  return grpc::Status::OK;
}

grpc::Status CoordinatorGrpcService::ListJobs(grpc::ServerContext* context,
                                              const ListJobsRequest* request,
                                              ListJobsResponse* response) {
  MTRAIN_AUTHORIZE("ListJobs");
  if (jobs_ == nullptr) return Answer("ListJobs", NoJobs());
  absl::StatusOr<JobListQuery> query = JobListQueryFromRequest(*request);
  if (!query.ok()) return Answer("ListJobs", ToGrpcStatus(query.status()));
  absl::StatusOr<JobListPage> page = jobs_->List(*query);
  if (!page.ok()) return Answer("ListJobs", ToGrpcStatus(page.status()));
  *response = ListJobsResponseFromPage(*std::move(page));
  return grpc::Status::OK;
}

grpc::Status CoordinatorGrpcService::CancelJob(grpc::ServerContext* context,
                                               const CancelJobRequest* request,
                                               CancelJobResponse* response) {
  MTRAIN_AUTHORIZE("CancelJob");
  if (jobs_ == nullptr) return Answer("CancelJob", NoJobs());
  return Answer("CancelJob", ToGrpcStatus(jobs_->Cancel(request->job_id())));
}

grpc::Status CoordinatorGrpcService::DeleteJob(grpc::ServerContext* context,
                                               const DeleteJobRequest* request,
                                               DeleteJobResponse* response) {
  MTRAIN_AUTHORIZE("DeleteJob");
  if (jobs_ == nullptr) return Answer("DeleteJob", NoJobs());
  return Answer("DeleteJob", ToGrpcStatus(jobs_->Delete(request->job_id())));
}

grpc::Status CoordinatorGrpcService::ListJobEvents(grpc::ServerContext* context,
                                                   const ListJobEventsRequest* request,
                                                   ListJobEventsResponse* response) {
  MTRAIN_AUTHORIZE("ListJobEvents");
  if (jobs_ == nullptr) return Answer("ListJobEvents", NoJobs());
  absl::StatusOr<JobEventQuery> query = JobEventQueryFromRequest(*request);
  if (!query.ok()) return Answer("ListJobEvents", ToGrpcStatus(query.status()));
  absl::StatusOr<JobEventPage> page =
      jobs_->Events(request->job_id(), query->after_event, query->max_events, query->max_bytes);
  if (!page.ok()) return Answer("ListJobEvents", ToGrpcStatus(page.status()));
  *response = ListJobEventsResponseFromPage(*std::move(page));
  return grpc::Status::OK;
}

// One WatchJob stream. The job's watcher (JobWatchers, one thread for all streams) says
// the job changed; the stream then reads the status (and the steps passed since its last
// send) and writes them one at a time. A change during a write is read after it: nothing
// is lost (each read takes the latest state) and nothing piles up for a slow client.
class CoordinatorGrpcService::WatchStream : public grpc::ServerWriteReactor<JobStatus> {
 public:
  WatchStream(CoordinatorGrpcService* service, std::string job_id)
      : service_(service), job_id_(std::move(job_id)) {
    ticket_ = service_->jobs_->watchers().Add(job_id_, [this] { Changed(); });
    Changed();  // the current status at once
  }

  void OnWriteDone(bool ok) override {
    MutexLock lock(&mutex_);
    writing_ = false;
    if (!ok || cancelled_) {
      EndLocked(grpc::Status::CANCELLED);
      return;
    }
    queue_.pop_front();
    if (!queue_.empty()) {
      WriteFrontLocked();
    } else if (final_queued_) {
      EndLocked(grpc::Status::OK);
    } else if (dirty_) {
      dirty_ = false;
      ReadLocked();
    }
  }
  void OnCancel() override {
    MutexLock lock(&mutex_);
    cancelled_ = true;
    if (!writing_) EndLocked(grpc::Status::CANCELLED);  // else when the write returns
  }
  void OnDone() override {
    // No watcher call is running after this, and none comes: `this` may go.
    service_->jobs_->watchers().Remove(ticket_);
    delete this;
  }

 private:
  void Changed() {
    MutexLock lock(&mutex_);
    if (ended_) return;
    if (writing_) {
      dirty_ = true;
      return;
    }
    ReadLocked();
  }

  // Reads what changed since the last send into the queue and starts writing it.
  void ReadLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) {
    absl::StatusOr<std::pair<JobStatus, int64_t>> next =
        service_->jobs_->WaitForChange(job_id_, seen_, absl::ZeroDuration());
    if (!next.ok()) {
      EndLocked(service_->Answer("WatchJob", ToGrpcStatus(next.status())));
      return;
    }
    if (next->second == seen_ && seen_ != 0) return;  // nothing new
    seen_ = next->second;
    const JobStatus& status = next->first;
    // Several steps may have passed since the last send: filled in from the step table, so
    // a watcher sees every step (trainctl watch --json prints one line each); only the
    // missing range, not the job's whole history.
    if (status.has_latest() && status.latest().step() > last_step_ + 1) {
      absl::StatusOr<std::vector<StepMetrics>> steps =
          service_->jobs_->Steps(job_id_, last_step_, status.latest().step() - last_step_ - 1);
      if (steps.ok()) {
        for (const StepMetrics& m : *steps) {
          if (m.step() <= last_step_ || m.step() >= status.latest().step()) continue;
          // The job as it was at that step: still running, whatever it is now (a watcher
          // stops at the first status in a final state).
          JobStatus between = status;
          if (IsTerminalJobState(between.state())) between.set_state(JOB_STATE_RUNNING);
          between.set_step(m.step());
          if (m.has_loss()) between.set_loss(m.loss());
          *between.mutable_latest() = m;
          queue_.push_back(std::move(between));
        }
      }
    }
    if (status.has_latest()) last_step_ = status.latest().step();
    final_queued_ = IsTerminalJobState(status.state());
    queue_.push_back(status);
    WriteFrontLocked();
  }
  void WriteFrontLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) {
    writing_ = true;
    StartWrite(&queue_.front());
  }
  void EndLocked(const grpc::Status& status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) {
    if (ended_) return;
    ended_ = true;
    Finish(status);
  }

  CoordinatorGrpcService* const service_;
  const std::string job_id_;
  uint64_t ticket_ = 0;  // set in the constructor, read in OnDone
  Mutex mutex_;
  std::deque<JobStatus> queue_ ABSL_GUARDED_BY(mutex_);  // the front is being written
  int64_t seen_ ABSL_GUARDED_BY(mutex_) = 0;             // the job's version last read
  int64_t last_step_ ABSL_GUARDED_BY(mutex_) = 0;        // the last step whose metrics were queued
  bool writing_ ABSL_GUARDED_BY(mutex_) = false;
  bool dirty_ ABSL_GUARDED_BY(mutex_) = false;  // changed during a write
  bool final_queued_ ABSL_GUARDED_BY(mutex_) = false;
  bool cancelled_ ABSL_GUARDED_BY(mutex_) = false;
  bool ended_ ABSL_GUARDED_BY(mutex_) = false;
};

grpc::ServerWriteReactor<JobStatus>* CoordinatorGrpcService::WatchJob(
    grpc::CallbackServerContext* context, const WatchJobRequest* request) {
  grpc::Status refused = Authorize(*context);
  if (refused.ok() && jobs_ == nullptr) refused = NoJobs();
  if (!refused.ok())
    return new Refused<grpc::ServerWriteReactor<JobStatus>>(Answer("WatchJob", refused));
  return new WatchStream(this, request->job_id());
}

grpc::Status CoordinatorGrpcService::KeyValueSet(grpc::ServerContext* context,
                                                 const KeyValueSetRequest* request,
                                                 KeyValueSetResponse* response) {
  MTRAIN_AUTHORIZE("KeyValueSet");
  return Answer("KeyValueSet", ToGrpcStatus(rendezvous_->Set(request->key(), request->value())));
}

grpc::Status CoordinatorGrpcService::KeyValueGet(grpc::ServerContext* context,
                                                 const KeyValueGetRequest* request,
                                                 KeyValueGetResponse* response) {
  MTRAIN_AUTHORIZE("KeyValueGet");
  absl::StatusOr<std::string> value = rendezvous_->Get(request->key());
  if (!value.ok()) return Answer("KeyValueGet", ToGrpcStatus(value.status()));
  response->set_value(*std::move(value));
  return grpc::Status::OK;
}

namespace {

absl::Duration RendezvousTimeoutOf(const KeyValueWaitRequest& request) {
  const absl::Duration timeout =
      request.timeout_ms() > 0 ? absl::Milliseconds(request.timeout_ms()) : kDefaultRendezvousWait;
  return std::min(timeout, kMaxRendezvousWait);
}

}  // namespace

// One KeyValueWait in progress: registered with the store, answered by the store's
// callback (exactly once), cancelled with the call. The callback may come before
// WaitAsync returns, and OnCancel at any time before OnDone, hence the ticket under a lock.
class CoordinatorGrpcService::KeyValueWaitCall : public grpc::ServerUnaryReactor {
 public:
  KeyValueWaitCall(CoordinatorGrpcService* service, const KeyValueWaitRequest& request)
      : service_(service) {
    const uint64_t ticket = service_->rendezvous_->WaitAsync(
        std::vector<std::string>(request.keys().begin(), request.keys().end()),
        RendezvousTimeoutOf(request), [this](absl::Status status) {
          Finish(service_->Answer("KeyValueWait", ToGrpcStatus(status)));
        });
    bool cancel = false;
    {
      MutexLock lock(&mutex_);
      ticket_ = ticket;
      cancel = cancelled_;
    }
    if (cancel) service_->rendezvous_->CancelWait(ticket);
  }

  void OnCancel() override {
    uint64_t ticket = 0;
    {
      MutexLock lock(&mutex_);
      cancelled_ = true;
      ticket = ticket_;
    }
    // Answers CANCELLED through the store's callback, unless it answered already.
    service_->rendezvous_->CancelWait(ticket);
  }
  void OnDone() override { delete this; }

 private:
  CoordinatorGrpcService* const service_;
  Mutex mutex_;
  uint64_t ticket_ ABSL_GUARDED_BY(mutex_) = 0;
  bool cancelled_ ABSL_GUARDED_BY(mutex_) = false;
};

grpc::ServerUnaryReactor* CoordinatorGrpcService::KeyValueWait(grpc::CallbackServerContext* context,
                                                               const KeyValueWaitRequest* request,
                                                               KeyValueWaitResponse* response) {
  if (grpc::Status auth = Authorize(*context); !auth.ok()) {
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    reactor->Finish(Answer("KeyValueWait", auth));
    return reactor;
  }
  return new KeyValueWaitCall(this, *request);
}

grpc::Status CoordinatorGrpcService::KeyValueWait(grpc::ServerContext* context,
                                                  const KeyValueWaitRequest* request,
                                                  KeyValueWaitResponse* response) {
  MTRAIN_AUTHORIZE("KeyValueWait");
  const absl::Duration timeout = RendezvousTimeoutOf(*request);
  std::vector<std::string> keys(request->keys().begin(), request->keys().end());
  // A cancelled call (client gone, or the server shutting down) stops waiting at once:
  // otherwise a stopping coordinator would wait out every rendezvous in progress.
  return Answer("KeyValueWait", ToGrpcStatus(rendezvous_->Wait(
                                    keys, timeout, [context] { return context->IsCancelled(); })));
}

// One rank's metrics stream. Each message is handed to the job manager as it arrives (on a
// gRPC callback thread); the loss-reporting rank's rows are then stored by the job
// manager's step writer, a tick's worth in one transaction, which calls back from its own
// thread. The stream reads ahead of the store by at most kMetricsReadAhead messages, so a
// rank stepping faster than the writer's tick is not held to one step a tick, and memory
// stays bounded (a rank that outruns the disk is held back by gRPC's flow control). The
// stream ends, and the rank hears OK, only once every step it sent is stored: a step
// acknowledged is a step stored. No thread waits meanwhile.
class CoordinatorGrpcService::MetricsStream : public grpc::ServerReadReactor<StepMetrics> {
 public:
  // Messages handed on but not yet stored, at most.
  static constexpr int kMetricsReadAhead = 32;

  // Refused streams (`refusal` not OK) end at once with it.
  MetricsStream(const CoordinatorGrpcService* service, const grpc::Status& refusal)
      : service_(service), flow_(kMetricsReadAhead) {
    if (!refusal.ok()) {
      Finish(service_->Answer("ReportMetrics", refusal));
      return;
    }
    Act(flow_.Start());
  }

  void OnReadDone(bool ok) override {
    if (!ok) {
      // The rank closed its side (its run ended) or the call was cancelled: end once what
      // it sent is stored.
      Act(flow_.Closed());
      return;
    }
    flow_.Read();
    // The job manager copies what it keeps, so the buffer can take the next message.
    service_->jobs_->OnMetrics(metrics_,
                               [this](absl::Status status) { Act(flow_.Stored(status)); });
    Act(flow_.HandedOn());
  }

  void OnDone() override { delete this; }

 private:
  // Starts what the flow decided, after its lock is released (gRPC may run a reaction
  // inline).
  void Act(MetricsReadAhead::Next next) {
    if (next == MetricsReadAhead::Next::kRead) StartRead(&metrics_);
    if (next != MetricsReadAhead::Next::kFinish) return;
    const absl::Status error = flow_.error();
    Finish(error.ok() ? grpc::Status::OK : service_->Answer("ReportMetrics", ToGrpcStatus(error)));
  }

  const CoordinatorGrpcService* const service_;
  StepMetrics metrics_;  // the read buffer: written by gRPC only while a read is outstanding
  MetricsReadAhead flow_;
};

grpc::ServerReadReactor<StepMetrics>* CoordinatorGrpcService::ReportMetrics(
    grpc::CallbackServerContext* context, ReportMetricsResponse* response) {
  grpc::Status refusal = Authorize(*context);
  if (refusal.ok() && jobs_ == nullptr) refusal = NoJobs();
  return new MetricsStream(this, refusal);
}

grpc::Status CoordinatorGrpcService::ReportRankResult(grpc::ServerContext* context,
                                                      const RankResult* request,
                                                      ReportRankResultResponse* response) {
  MTRAIN_AUTHORIZE("ReportRankResult");
  if (jobs_ == nullptr) return Answer("ReportRankResult", NoJobs());
  return Answer("ReportRankResult", ToGrpcStatus(jobs_->OnRankResult(*request)));
}

// One upload stream: each chunk goes to the store's receiver as it arrives, the next is
// asked for only after, and the stream ends at the chunk with `last` (or the first error).
class CoordinatorGrpcService::UploadStream : public grpc::ServerReadReactor<CheckpointChunk> {
 public:
  UploadStream(CoordinatorGrpcService* service, UploadCheckpointResponse* response)
      : service_(service), response_(response), receiver_(service->checkpoints_) {
    StartRead(&chunk_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {  // the client closed (or went) before the last chunk
      End(receiver_.started() ? receiver_.EndedEarly()
                              : absl::InvalidArgumentError("the upload stream carried no chunk"));
      return;
    }
    absl::StatusOr<std::optional<ReceivedCheckpointFile>> received = Take();
    if (!received.ok()) {
      End(received.status());
    } else if (received->has_value()) {
      response_->set_bytes_received((*received)->bytes_received);
      if ((*received)->committed.has_value()) {
        service_->jobs_->OnCheckpointCommitted(receiver_.header().job_id(),
                                               *(*received)->committed);
      }
      End(absl::OkStatus());
    } else {
      StartRead(&chunk_);
    }
  }
  void OnDone() override { delete this; }

 private:
  absl::StatusOr<std::optional<ReceivedCheckpointFile>> Take() {
    if (!receiver_.started()) {
      // Whether the generation may upload: asked once, at the stream's first chunk.
      RETURN_IF_ERROR(service_->jobs_->CheckCheckpointUpload(chunk_.job_id(), chunk_.generation(),
                                                             chunk_.step()));
    }
    return receiver_.Take(std::move(chunk_));
  }
  void End(const absl::Status& status) {
    Finish(service_->Answer("UploadCheckpoint", ToGrpcStatus(status)));
  }

  CoordinatorGrpcService* const service_;
  UploadCheckpointResponse* const response_;
  CheckpointFileReceiver receiver_;
  CheckpointChunk chunk_;
};

grpc::ServerReadReactor<CheckpointChunk>* CoordinatorGrpcService::UploadCheckpoint(
    grpc::CallbackServerContext* context, UploadCheckpointResponse* response) {
  grpc::Status refused = Authorize(*context);
  if (refused.ok() && (jobs_ == nullptr || checkpoints_ == nullptr)) refused = NoJobs();
  if (!refused.ok())
    return new Refused<grpc::ServerReadReactor<CheckpointChunk>>(
        Answer("UploadCheckpoint", refused));
  return new UploadStream(this, response);
}

grpc::Status CoordinatorGrpcService::ListCheckpoints(grpc::ServerContext* context,
                                                     const ListCheckpointsRequest* request,
                                                     ListCheckpointsResponse* response) {
  MTRAIN_AUTHORIZE("ListCheckpoints");
  if (jobs_ == nullptr || checkpoints_ == nullptr) return Answer("ListCheckpoints", NoJobs());
  if (absl::StatusOr<JobStatus> job = jobs_->Get(request->job_id()); !job.ok()) {
    return Answer("ListCheckpoints", ToGrpcStatus(job.status()));
  }
  for (CheckpointInfo& info : checkpoints_->List(request->job_id())) {
    *response->add_checkpoints() = std::move(info);
  }
  return grpc::Status::OK;
}

// One download stream: a chunk is read from the file only once the previous one is sent.
class CoordinatorGrpcService::DownloadStream : public grpc::ServerWriteReactor<CheckpointChunk> {
 public:
  DownloadStream(CoordinatorGrpcService* service, std::unique_ptr<CheckpointFileDownload> download)
      : service_(service), download_(std::move(download)) {
    SendNext();
  }

  void OnWriteDone(bool ok) override {
    if (!ok) {
      Finish(grpc::Status::CANCELLED);  // the client went
    } else if (sent_last_) {
      Finish(grpc::Status::OK);
    } else {
      SendNext();
    }
  }
  void OnDone() override { delete this; }

 private:
  void SendNext() {
    absl::StatusOr<CheckpointChunk> chunk = download_->Next();
    if (!chunk.ok()) {
      Finish(service_->Answer("DownloadCheckpoint", ToGrpcStatus(chunk.status())));
      return;
    }
    chunk_ = *std::move(chunk);
    sent_last_ = chunk_.last();
    StartWrite(&chunk_);
  }

  CoordinatorGrpcService* const service_;
  std::unique_ptr<CheckpointFileDownload> download_;
  CheckpointChunk chunk_;  // in flight until OnWriteDone
  bool sent_last_ = false;
};

grpc::ServerWriteReactor<CheckpointChunk>* CoordinatorGrpcService::DownloadCheckpoint(
    grpc::CallbackServerContext* context, const DownloadCheckpointRequest* request) {
  const auto refuse = [&](const grpc::Status& status) {
    return new Refused<grpc::ServerWriteReactor<CheckpointChunk>>(
        Answer("DownloadCheckpoint", status));
  };
  if (grpc::Status auth = Authorize(*context); !auth.ok()) return refuse(auth);
  if (jobs_ == nullptr || checkpoints_ == nullptr) return refuse(NoJobs());
  if (absl::StatusOr<JobStatus> job = jobs_->Get(request->job_id()); !job.ok()) {
    return refuse(ToGrpcStatus(job.status()));
  }
  absl::StatusOr<std::unique_ptr<CheckpointFileDownload>> download =
      checkpoints_->OpenDownload(request->job_id(), request->step(), request->file());
  if (!download.ok()) return refuse(ToGrpcStatus(download.status()));
  return new DownloadStream(this, *std::move(download));
}

#undef MTRAIN_AUTHORIZE

}  // namespace mtrain
