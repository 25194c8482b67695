#include "worker/coordinator_client.h"

#include <algorithm>
#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/grpc_connection.h"
#include "common/grpc_status.h"

namespace mtrain {
namespace {

// Bound on one control RPC; rendezvous waits get their own timeout on top.
constexpr absl::Duration kRpcTimeout = absl::Seconds(30);

}  // namespace

absl::StatusOr<std::string> ReadTokenFile(const std::string& path) {
  if (path.empty()) return std::string();
  std::ifstream in(path);
  if (!in) return absl::InvalidArgumentError(absl::StrCat("cannot read token file ", path));
  std::stringstream text;
  text << in.rdbuf();
  return std::string(absl::StripTrailingAsciiWhitespace(text.str()));
}

CoordinatorClient::CoordinatorClient(const std::string& address, std::string token)
    : stub_(Coordinator::NewStub(CoordinatorChannel(address))), token_(std::move(token)) {}

CoordinatorClient::~CoordinatorClient() {
  if (metrics_stream_ != nullptr) {
    metrics_stream_->WritesDone();
    (void)metrics_stream_->Finish();
  }
}

void CoordinatorClient::Prepare(grpc::ClientContext* context, absl::Duration timeout) const {
  if (!token_.empty()) context->AddMetadata("authorization", "Bearer " + token_);
  context->set_deadline(std::chrono::system_clock::now() + absl::ToChronoNanoseconds(timeout));
}

absl::Status CoordinatorClient::ReportStep(const StepMetrics& metrics) {
  if (metrics_stream_ == nullptr) {
    metrics_context_ = std::make_unique<grpc::ClientContext>();
    // The stream lives as long as the training run.
    Prepare(metrics_context_.get(), absl::Hours(24 * 365));
    metrics_stream_ = stub_->ReportMetrics(metrics_context_.get(), &metrics_response_);
  }
  if (metrics_stream_->Write(metrics)) return absl::OkStatus();
  // The coordinator closed the stream: its status says why.
  absl::Status status = FromGrpcStatus(metrics_stream_->Finish());
  metrics_stream_.reset();
  if (status.ok()) status = absl::UnavailableError("the coordinator closed the metrics stream");
  return status;
}

absl::Status CoordinatorClient::ReportResult(const Assignment& assignment,
                                             const absl::Status& result) {
  if (metrics_stream_ != nullptr) {
    // Every step is delivered before the result, so the job's last step is recorded first.
    metrics_stream_->WritesDone();
    (void)metrics_stream_->Finish();
    metrics_stream_.reset();
  }
  grpc::ClientContext context;
  Prepare(&context, kRpcTimeout);
  RankResult request;
  request.set_job_id(assignment.job_id());
  request.set_generation(assignment.generation());
  request.set_global_rank(assignment.rank().global_rank());
  request.set_code(static_cast<int>(result.code()));
  request.set_message(std::string(result.message()));
  ReportRankResultResponse response;
  return FromGrpcStatus(stub_->ReportRankResult(&context, request, &response));
}

absl::Status CoordinatorKeyValueStore::Set(const std::string& key, const std::string& value) {
  grpc::ClientContext context;
  client_->Prepare(&context, kRpcTimeout);
  KeyValueSetRequest request;
  request.set_key(prefix_ + key);
  request.set_value(value);
  KeyValueSetResponse response;
  return FromGrpcStatus(client_->stub()->KeyValueSet(&context, request, &response));
}

absl::StatusOr<std::string> CoordinatorKeyValueStore::Get(const std::string& key) {
  grpc::ClientContext context;
  client_->Prepare(&context, kRpcTimeout);
  KeyValueGetRequest request;
  request.set_key(prefix_ + key);
  KeyValueGetResponse response;
  absl::Status status = FromGrpcStatus(client_->stub()->KeyValueGet(&context, request, &response));
  if (!status.ok()) return status;
  return response.value();
}

absl::Status CoordinatorKeyValueStore::Wait(const std::vector<std::string>& keys,
                                            absl::Duration timeout) {
  grpc::ClientContext context;
  client_->Prepare(&context, timeout + kRpcTimeout);
  KeyValueWaitRequest request;
  for (const std::string& key : keys) request.add_keys(prefix_ + key);
  // At least 1 ms, rounded up: the RPC reads 0 as "the coordinator's default" (30 s), so a
  // caller waiting out the last fraction of a millisecond must not get half a minute.
  request.set_timeout_ms(
      std::max<int64_t>(1, absl::ToInt64Milliseconds(absl::Ceil(timeout, absl::Milliseconds(1)))));
  KeyValueWaitResponse response;
  return FromGrpcStatus(client_->stub()->KeyValueWait(&context, request, &response));
}

}  // namespace mtrain
