#include "worker/agent.h"

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "common/grpc_status.h"

namespace mtrain {
namespace {

void SetDeadline(grpc::ClientContext* context) {
  context->set_deadline(std::chrono::system_clock::now() +
                        absl::ToChronoMilliseconds(kControlRpcDeadline));
}

}  // namespace

WorkerAgent::WorkerAgent(Coordinator::StubInterface* stub, WorkerInfo info)
    : stub_(stub), info_(std::move(info)) {}

absl::Status WorkerAgent::Register() {
  grpc::ClientContext context;
  SetDeadline(&context);
  RegisterWorkerRequest request;
  *request.mutable_worker() = info_;
  RegisterWorkerResponse response;
  absl::Status status = FromGrpcStatus(stub_->RegisterWorker(&context, request, &response));
  if (!status.ok()) return status;
  if (response.heartbeat_interval_ms() > 0) {
    heartbeat_interval_ = absl::Milliseconds(response.heartbeat_interval_ms());
  }
  ++registrations_;
  ReportState("registered", absl::StrCat("registered as ", info_.worker_id(), " (incarnation ",
                                         info_.incarnation_id(), "); heartbeat every ",
                                         absl::FormatDuration(heartbeat_interval_)));
  return absl::OkStatus();
}

absl::Status WorkerAgent::SendHeartbeat() {
  grpc::ClientContext context;
  SetDeadline(&context);
  HeartbeatRequest request;
  request.set_worker_id(info_.worker_id());
  request.set_incarnation_id(info_.incarnation_id());
  request.set_state(WORKER_STATE_IDLE);
  HeartbeatResponse response;
  absl::Status status = FromGrpcStatus(stub_->Heartbeat(&context, request, &response));
  if (status.ok()) ++heartbeats_;
  return status;
}

void WorkerAgent::ReportState(const std::string& state, const std::string& message) {
  if (state == reported_state_) return;
  reported_state_ = state;
  std::fprintf(stderr, "worker %s: %s\n", info_.worker_id().c_str(), message.c_str());
}

void WorkerAgent::Run(Notification* stop) {
  bool registered = false;
  absl::Duration backoff = absl::Milliseconds(100);
  while (!stop->HasBeenNotified()) {
    absl::Status status = registered ? SendHeartbeat() : Register();
    if (status.ok()) {
      registered = true;
      backoff = absl::Milliseconds(100);
      stop->WaitForNotificationWithTimeout(heartbeat_interval_);
      continue;
    }
    if (registered && (status.code() == absl::StatusCode::kNotFound ||
                       status.code() == absl::StatusCode::kFailedPrecondition)) {
      // The coordinator lost or replaced our record: register again at once.
      ReportState("re-registering", absl::StrCat("coordinator forgot this worker (",
                                                 status.message(), "); registering again"));
      registered = false;
      continue;
    }
    if (status.code() == absl::StatusCode::kInvalidArgument) {
      // Retrying the same bad registration cannot help; say so loudly, keep trying slowly
      // so a fixed coordinator picks the worker up.
      ReportState("rejected", absl::StrCat("registration rejected: ", status.ToString()));
    } else {
      ReportState("unreachable",
                  absl::StrCat("coordinator unreachable (", status.ToString(), "); retrying"));
    }
    registered = registered && status.code() != absl::StatusCode::kInvalidArgument;
    stop->WaitForNotificationWithTimeout(backoff);
    backoff = std::min(backoff * 2, kMaxReconnectBackoff);
  }
}

}  // namespace mtrain
