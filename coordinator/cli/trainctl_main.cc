// trainctl: the command-line client of the coordinator.
//
//   trainctl [--coordinator=HOST:PORT] COMMAND [ARGS]
//
// Exit status 0 on success; otherwise non-zero with a one-line reason on stderr.
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "common/grpc_status.h"
#include "coordinator/cli/worker_table.h"
#include "coordinator/plan/job_spec_validation.h"
#include "google/protobuf/util/json_util.h"
#include "grpcpp/grpcpp.h"
#include "proto/coordinator.grpc.pb.h"

ABSL_FLAG(std::string, coordinator, "127.0.0.1:7070", "coordinator gRPC address HOST:PORT");
ABSL_FLAG(bool, json, false, "print machine-readable JSON (one object per line)");
ABSL_FLAG(int, timeout_seconds, 10, "deadline of each RPC");

namespace mtrain {
namespace {

constexpr const char* kUsage = R"(trainctl: drive the training coordinator

usage: trainctl [flags] COMMAND [ARGS]

commands:
  workers               list registered workers (--json for JSON lines)
  validate SPEC.json    check a job spec locally and print it with defaults filled in
  submit SPEC.json      submit a job (validated locally first)
  status JOB            show one job (--json)
  list                  list jobs
  cancel JOB            cancel a job
  watch JOB             stream a job's progress (--json for JSON lines)

flags:
  --coordinator=HOST:PORT   (default 127.0.0.1:7070)
  --json                    JSON output
  --timeout_seconds=N       RPC deadline (default 10)
)";

// A failed command: printed as one line on stderr, exit status 1.
int Fail(const std::string& command, const absl::Status& status) {
  std::string reason = status.ToString();
  if (status.code() == absl::StatusCode::kUnimplemented && status.message().empty()) {
    reason += "this coordinator does not serve the RPC yet";
  }
  std::fprintf(stderr, "trainctl %s: %s\n", command.c_str(), reason.c_str());
  return 1;
}

class Client {
 public:
  explicit Client(const std::string& address)
      : stub_(Coordinator::NewStub(
            grpc::CreateChannel(address, grpc::InsecureChannelCredentials()))) {}

  Coordinator::Stub* stub() { return stub_.get(); }

  // A context with the --timeout_seconds deadline.
  std::unique_ptr<grpc::ClientContext> Context() {
    auto context = std::make_unique<grpc::ClientContext>();
    context->set_deadline(std::chrono::system_clock::now() +
                          std::chrono::seconds(absl::GetFlag(FLAGS_timeout_seconds)));
    return context;
  }

 private:
  std::unique_ptr<Coordinator::Stub> stub_;
};

std::string ToJsonLine(const google::protobuf::Message& message) {
  std::string json;
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  (void)google::protobuf::util::MessageToJsonString(message, &json, options);
  return json;
}

int Workers(Client& client) {
  ListWorkersResponse response;
  absl::Status status = FromGrpcStatus(
      client.stub()->ListWorkers(client.Context().get(), ListWorkersRequest(), &response));
  if (!status.ok()) return Fail("workers", status);
  if (absl::GetFlag(FLAGS_json)) {
    for (const WorkerStatus& worker : response.workers()) {
      std::printf("%s\n", ToJsonLine(worker).c_str());
    }
  } else {
    std::printf("%s", FormatWorkerTable(response).c_str());
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
  SubmitJobRequest request;
  *request.mutable_spec() = *spec;
  SubmitJobResponse response;
  absl::Status status =
      FromGrpcStatus(client.stub()->SubmitJob(client.Context().get(), request, &response));
  if (!status.ok()) return Fail("submit", status);
  std::printf("%s\n", response.job_id().c_str());
  return 0;
}

int Status(Client& client, const std::string& job_id) {
  GetJobRequest request;
  request.set_job_id(job_id);
  JobStatus response;
  absl::Status status =
      FromGrpcStatus(client.stub()->GetJob(client.Context().get(), request, &response));
  if (!status.ok()) return Fail("status", status);
  std::printf("%s\n", ToJsonLine(response).c_str());
  return 0;
}

int List(Client& client) {
  ListJobsResponse response;
  absl::Status status =
      FromGrpcStatus(client.stub()->ListJobs(client.Context().get(), ListJobsRequest(), &response));
  if (!status.ok()) return Fail("list", status);
  for (const JobStatus& job : response.jobs()) std::printf("%s\n", ToJsonLine(job).c_str());
  return 0;
}

int Cancel(Client& client, const std::string& job_id) {
  CancelJobRequest request;
  request.set_job_id(job_id);
  CancelJobResponse response;
  absl::Status status =
      FromGrpcStatus(client.stub()->CancelJob(client.Context().get(), request, &response));
  if (!status.ok()) return Fail("cancel", status);
  return 0;
}

int Watch(Client& client, const std::string& job_id) {
  grpc::ClientContext context;  // No deadline: a watch lasts as long as the job.
  WatchJobRequest request;
  request.set_job_id(job_id);
  auto reader = client.stub()->WatchJob(&context, request);
  JobStatus update;
  while (reader->Read(&update)) std::printf("%s\n", ToJsonLine(update).c_str());
  absl::Status status = FromGrpcStatus(reader->Finish());
  if (!status.ok()) return Fail("watch", status);
  return 0;
}

int Run(const std::vector<char*>& args) {
  if (args.size() < 2) {
    std::fprintf(stderr, "%s", kUsage);
    return 2;
  }
  const std::string command = args[1];
  const size_t want_args = (command == "workers" || command == "list") ? 0 : 1;
  if (command == "help" || command == "--help") {
    std::printf("%s", kUsage);
    return 0;
  }
  if (args.size() != 2 + want_args) {
    std::fprintf(stderr, "trainctl %s: expected %zu argument(s), got %zu (see trainctl help)\n",
                 command.c_str(), want_args, args.size() - 2);
    return 2;
  }
  if (command == "validate") return Validate(args[2]);
  Client client(absl::GetFlag(FLAGS_coordinator));
  if (command == "workers") return Workers(client);
  if (command == "list") return List(client);
  if (command == "submit") return Submit(client, args[2]);
  if (command == "status") return Status(client, args[2]);
  if (command == "cancel") return Cancel(client, args[2]);
  if (command == "watch") return Watch(client, args[2]);
  std::fprintf(stderr, "trainctl: unknown command '%s' (see trainctl help)\n", command.c_str());
  return 2;
}

}  // namespace
}  // namespace mtrain

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(mtrain::kUsage);
  std::vector<char*> args = absl::ParseCommandLine(argc, argv);
  return mtrain::Run(args);
}
