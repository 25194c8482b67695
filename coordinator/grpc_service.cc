#include "coordinator/grpc_service.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/grpc_status.h"
#include "coordinator/plan/job_spec_validation.h"

namespace mtrain {
namespace {

// A client may ask to wait at most this long in one call, so a forgotten waiter cannot
// pin a server thread forever.
constexpr absl::Duration kMaxRendezvousWait = absl::Minutes(10);

}  // namespace

CoordinatorGrpcService::CoordinatorGrpcService(WorkerRegistry* workers, RendezvousStore* rendezvous)
    : workers_(workers), rendezvous_(rendezvous) {}

grpc::Status CoordinatorGrpcService::RegisterWorker(grpc::ServerContext* context,
                                                    const RegisterWorkerRequest* request,
                                                    RegisterWorkerResponse* response) {
  bool restarted = false;
  absl::Status status = workers_->Register(request->worker(), &restarted);
  if (!status.ok()) return ToGrpcStatus(status);
  response->set_heartbeat_interval_ms(
      absl::ToInt64Milliseconds(workers_->options().heartbeat_interval));
  response->set_heartbeat_timeout_ms(
      absl::ToInt64Milliseconds(workers_->options().heartbeat_timeout));
  return grpc::Status::OK;
}

grpc::Status CoordinatorGrpcService::Heartbeat(grpc::ServerContext* context,
                                               const HeartbeatRequest* request,
                                               HeartbeatResponse* response) {
  return ToGrpcStatus(workers_->Heartbeat(*request));
}

grpc::Status CoordinatorGrpcService::ListWorkers(grpc::ServerContext* context,
                                                 const ListWorkersRequest* request,
                                                 ListWorkersResponse* response) {
  for (WorkerStatus& worker : workers_->List()) {
    *response->add_workers() = std::move(worker);
  }
  return grpc::Status::OK;
}

grpc::Status CoordinatorGrpcService::SubmitJob(grpc::ServerContext* context,
                                               const SubmitJobRequest* request,
                                               SubmitJobResponse* response) {
  // Bad specs get their real error now; running jobs needs the job store and scheduler.
  absl::StatusOr<JobSpec> spec = ResolveJobSpec(request->spec());
  if (!spec.ok()) return ToGrpcStatus(spec.status());
  return grpc::Status(grpc::StatusCode::UNIMPLEMENTED,
                      "the spec is valid, but this coordinator cannot run jobs yet");
}

grpc::Status CoordinatorGrpcService::KeyValueSet(grpc::ServerContext* context,
                                                 const KeyValueSetRequest* request,
                                                 KeyValueSetResponse* response) {
  return ToGrpcStatus(rendezvous_->Set(request->key(), request->value()));
}

grpc::Status CoordinatorGrpcService::KeyValueGet(grpc::ServerContext* context,
                                                 const KeyValueGetRequest* request,
                                                 KeyValueGetResponse* response) {
  absl::StatusOr<std::string> value = rendezvous_->Get(request->key());
  if (!value.ok()) return ToGrpcStatus(value.status());
  response->set_value(*std::move(value));
  return grpc::Status::OK;
}

grpc::Status CoordinatorGrpcService::KeyValueWait(grpc::ServerContext* context,
                                                  const KeyValueWaitRequest* request,
                                                  KeyValueWaitResponse* response) {
  absl::Duration timeout = request->timeout_ms() > 0 ? absl::Milliseconds(request->timeout_ms())
                                                     : kDefaultRendezvousWait;
  timeout = std::min(timeout, kMaxRendezvousWait);
  std::vector<std::string> keys(request->keys().begin(), request->keys().end());
  return ToGrpcStatus(rendezvous_->Wait(keys, timeout));
}

}  // namespace mtrain
