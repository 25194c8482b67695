#include "worker/agent.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/grpc_status.h"

namespace mtrain {
namespace {

// The last non-empty line of a rank's log (at most its last 4 KiB are read), or "".
std::string LastLogLine(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return "";
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg();
  const std::streamoff start = std::max<std::streamoff>(0, size - 4096);
  in.seekg(start);
  std::string tail(static_cast<size_t>(size - start), '\0');
  in.read(tail.data(), static_cast<std::streamsize>(tail.size()));
  while (!tail.empty() && (tail.back() == '\n' || tail.back() == '\r')) tail.pop_back();
  const size_t newline = tail.rfind('\n');
  return newline == std::string::npos ? tail : tail.substr(newline + 1);
}

std::string HowItEnded(const RankExit& exit) {
  return exit.signaled ? absl::StrCat("was killed by signal ", exit.signal)
                       : absl::StrCat("exited with code ", exit.exit_code);
}

}  // namespace

RankResult UnreportedRankResult(const RankExit& exit, const std::string& worker_id) {
  RankResult result;
  result.set_job_id(exit.assignment.job_id());
  result.set_generation(exit.assignment.generation());
  result.set_global_rank(exit.assignment.rank().global_rank());
  // A rank that ran out of memory in a worker thread says so in its log's last line
  // (train_main.cc's terminate handler): that line is the reason, and its code the code.
  const std::string last_line = LastLogLine(exit.log_path);
  const bool out_of_memory = last_line.find("RESOURCE_EXHAUSTED") != std::string::npos;
  result.set_code(static_cast<int>(out_of_memory ? absl::StatusCode::kResourceExhausted
                                                 : absl::StatusCode::kInternal));
  result.set_message(absl::StrCat("training process on worker ", worker_id, " ", HowItEnded(exit),
                                  " without reporting; log ", exit.log_path,
                                  last_line.empty() ? "" : absl::StrCat(": ", last_line)));
  return result;
}

bool IsCredentialRefusal(const absl::Status& status) {
  return status.code() == absl::StatusCode::kUnauthenticated ||
         status.code() == absl::StatusCode::kPermissionDenied;
}

absl::Status ExplainCredentialRefusal(const absl::Status& refusal, bool sent_token) {
  // The coordinator's message may suggest a trainctl flag; the fix here is the worker's.
  return absl::Status(refusal.code(),
                      sent_token
                          ? absl::StrCat("the coordinator refused our token (", refusal.ToString(),
                                         "): check worker --token_file")
                          : absl::StrCat("the coordinator wants a token and we sent none (",
                                         refusal.ToString(), "): pass worker --token_file=FILE"));
}

WorkerAgent::WorkerAgent(Coordinator::StubInterface* stub, WorkerInfo info, RankProcess* ranks,
                         std::string token)
    : stub_(stub), info_(std::move(info)), ranks_(ranks), token_(std::move(token)) {}

void WorkerAgent::Prepare(grpc::ClientContext* context) const {
  context->set_deadline(std::chrono::system_clock::now() +
                        absl::ToChronoMilliseconds(kControlRpcDeadline));
  if (!token_.empty()) context->AddMetadata("authorization", "Bearer " + token_);
}

void WorkerAgent::Execute(const WorkerCommand& command) {
  if (ranks_ == nullptr) return;
  if (command.has_abort()) {
    const AbortCommand& abort = command.abort();
    const Assignment& running = ranks_->assignment();
    if (ranks_->running() && running.job_id() == abort.job_id() &&
        running.generation() == abort.generation()) {
      std::fprintf(stderr, "worker %s: aborting %s generation %lld rank %d: %s\n",
                   info_.worker_id().c_str(), abort.job_id().c_str(),
                   static_cast<long long>(abort.generation()), running.rank().global_rank(),
                   abort.reason().c_str());
      ranks_->Abort();
    }
    return;
  }
  if (command.has_assign()) {
    const Assignment& a = command.assign();
    if (ranks_->running()) ranks_->Abort();  // an older generation the coordinator replaced
    absl::Status started = ranks_->Start(a);
    std::fprintf(stderr, "worker %s: %s %s generation %lld rank %d of %d%s\n",
                 info_.worker_id().c_str(), started.ok() ? "running" : "cannot run",
                 a.job_id().c_str(), static_cast<long long>(a.generation()), a.rank().global_rank(),
                 a.rank().world_size(),
                 started.ok() ? "" : absl::StrCat(": ", started.ToString()).c_str());
    if (!started.ok()) {
      grpc::ClientContext context;
      Prepare(&context);
      RankResult result;
      result.set_job_id(a.job_id());
      result.set_generation(a.generation());
      result.set_global_rank(a.rank().global_rank());
      result.set_code(static_cast<int>(started.code()));
      result.set_message(std::string(started.message()));
      ReportRankResultResponse response;
      (void)stub_->ReportRankResult(&context, result, &response);
    }
  }
}

void WorkerAgent::CheckRank() {
  if (ranks_ == nullptr) return;
  RankExit exit;
  if (ranks_->Poll(&exit) || exit.assignment.job_id().empty()) return;
  // Exit codes 0 and 1 mean the rank reported its result itself (train_main.cc).
  if (!exit.signaled && (exit.exit_code == 0 || exit.exit_code == 1)) return;
  std::fprintf(stderr, "worker %s: rank %d of %s %s (log %s)\n", info_.worker_id().c_str(),
               exit.assignment.rank().global_rank(), exit.assignment.job_id().c_str(),
               HowItEnded(exit).c_str(), exit.log_path.c_str());
  grpc::ClientContext context;
  Prepare(&context);
  const RankResult result = UnreportedRankResult(exit, info_.worker_id());
  ReportRankResultResponse response;
  (void)stub_->ReportRankResult(&context, result, &response);
}

absl::Status WorkerAgent::Register() {
  grpc::ClientContext context;
  Prepare(&context);
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
  CheckRank();
  grpc::ClientContext context;
  Prepare(&context);
  HeartbeatRequest request;
  request.set_worker_id(info_.worker_id());
  request.set_incarnation_id(info_.incarnation_id());
  const bool busy = ranks_ != nullptr && ranks_->running();
  request.set_state(busy ? WORKER_STATE_BUSY : WORKER_STATE_IDLE);
  if (busy) {
    request.set_job_id(ranks_->assignment().job_id());
    request.set_generation(ranks_->assignment().generation());
    request.set_rank_stopped_ms(absl::ToInt64Milliseconds(ranks_->StoppedFor(absl::Now())));
  }
  HeartbeatResponse response;
  absl::Status status = FromGrpcStatus(stub_->Heartbeat(&context, request, &response));
  if (!status.ok()) return status;
  ++heartbeats_;
  for (const WorkerCommand& command : response.commands()) Execute(command);
  return absl::OkStatus();
}

void WorkerAgent::ReportState(const std::string& state, const std::string& message) {
  if (state == reported_state_) return;
  reported_state_ = state;
  std::fprintf(stderr, "worker %s: %s\n", info_.worker_id().c_str(), message.c_str());
}

absl::Status WorkerAgent::Run(Notification* stop) {
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
    if (IsCredentialRefusal(status)) return ExplainCredentialRefusal(status, !token_.empty());
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
  return absl::OkStatus();
}

}  // namespace mtrain
