// What issue 15 did to the rendezvous store, against a running coordinator: store
// --values values of --value_bytes each, under made-up names and under the prefix of a live
// generation, and print how the coordinator answered and its resident memory before and
// after. The live generation is real: two simulated workers register, a 2-rank job is
// submitted and placed on them, and they heartbeat BUSY with it while the flood runs (so
// the generation stays live). Not a test; run through tests/bench/rendezvous_flood.sh.
//
//   rendezvous_flood --coordinator=HOST:PORT --coordinator_pid=PID [--values=600]
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/grpc_connection.h"
#include "google/protobuf/util/json_util.h"
#include "grpcpp/grpcpp.h"
#include "proto/coordinator.grpc.pb.h"

ABSL_FLAG(std::string, coordinator, "127.0.0.1:7070", "coordinator address");
ABSL_FLAG(int, coordinator_pid, 0, "the coordinator's pid, for its resident memory");
ABSL_FLAG(int, values, 600, "values stored under each kind of name");
ABSL_FLAG(int, value_bytes, 1 << 20, "bytes per value");

namespace mtrain {
namespace {

int64_t RssKiB(int pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(in, line)) {
    std::vector<std::string> words =
        absl::StrSplit(line, absl::ByAnyChar(" \t"), absl::SkipEmpty());
    int64_t kib = 0;
    if (words.size() >= 2 && words[0] == "VmRSS:" && absl::SimpleAtoi(words[1], &kib)) return kib;
  }
  return -1;
}

std::unique_ptr<grpc::ClientContext> Context() {
  auto context = std::make_unique<grpc::ClientContext>();
  context->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  return context;
}

int Run() {
  auto stub = Coordinator::NewStub(CoordinatorChannel(absl::GetFlag(FLAGS_coordinator)));
  const int pid = absl::GetFlag(FLAGS_coordinator_pid);
  const std::vector<std::string> workers = {"flood-w0", "flood-w1"};
  for (const std::string& id : workers) {
    RegisterWorkerRequest request;
    request.mutable_worker()->set_worker_id(id);
    request.mutable_worker()->set_host("flood-host");
    request.mutable_worker()->set_device_kind(DEVICE_KIND_CPU);
    request.mutable_worker()->set_incarnation_id("inc-" + id);
    RegisterWorkerResponse response;
    grpc::Status status = stub->RegisterWorker(Context().get(), request, &response);
    if (!status.ok()) {
      std::fprintf(stderr, "RegisterWorker: %s\n", status.error_message().c_str());
      return 1;
    }
  }
  SubmitJobRequest submit;
  if (!google::protobuf::util::JsonStringToMessage(
           R"({"name": "flood", "parallel": {"data": 2, "global_batch_size": 2},
               "train": {"steps": 1000000}, "device": "DEVICE_CPU"})",
           submit.mutable_spec())
           .ok()) {
    return 1;
  }
  SubmitJobResponse submitted;
  if (grpc::Status s = stub->SubmitJob(Context().get(), submit, &submitted); !s.ok()) {
    std::fprintf(stderr, "SubmitJob: %s\n", s.error_message().c_str());
    return 1;
  }
  // The assignments ride on heartbeat responses.
  std::string prefix;
  int64_t generation = 0;
  for (const std::string& id : workers) {
    HeartbeatRequest beat;
    beat.set_worker_id(id);
    beat.set_incarnation_id("inc-" + id);
    beat.set_state(WORKER_STATE_IDLE);
    HeartbeatResponse response;
    (void)stub->Heartbeat(Context().get(), beat, &response);
    for (const WorkerCommand& command : response.commands()) {
      if (command.has_assign()) {
        prefix = command.assign().rendezvous_prefix();
        generation = command.assign().generation();
      }
    }
  }
  if (prefix.empty()) {
    std::fprintf(stderr, "the job was not placed on the simulated workers\n");
    return 1;
  }
  // Keep the generation live: BUSY heartbeats with the job, as a worker running it sends.
  std::atomic<bool> stop{false};
  std::thread heartbeats([&] {
    while (!stop) {
      for (const std::string& id : workers) {
        HeartbeatRequest beat;
        beat.set_worker_id(id);
        beat.set_incarnation_id("inc-" + id);
        beat.set_state(WORKER_STATE_BUSY);
        beat.set_job_id(submitted.job_id());
        beat.set_generation(generation);
        HeartbeatResponse response;
        (void)stub->Heartbeat(Context().get(), beat, &response);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
    }
  });

  const int64_t rss_before = RssKiB(pid);
  const std::string value(static_cast<size_t>(absl::GetFlag(FLAGS_value_bytes)), 'x');
  std::printf("coordinator RSS before: %lld KiB; job %s generation %lld, prefix %s\n",
              static_cast<long long>(rss_before), submitted.job_id().c_str(),
              static_cast<long long>(generation), prefix.c_str());
  for (const std::string& kind : {std::string("flood/"), prefix + "flood-"}) {
    std::map<std::string, int> codes;
    std::map<std::string, std::string> first_message;
    for (int i = 0; i < absl::GetFlag(FLAGS_values); ++i) {
      KeyValueSetRequest request;
      request.set_key(absl::StrCat(kind, i));
      request.set_value(value);
      KeyValueSetResponse response;
      const grpc::Status status = stub->KeyValueSet(Context().get(), request, &response);
      // gRPC's codes are absl's, number for number.
      const std::string name =
          absl::StatusCodeToString(static_cast<absl::StatusCode>(status.error_code()));
      if (codes[name]++ == 0) first_message[name] = status.error_message();
    }
    std::printf("%d x %d bytes under %s*:\n", absl::GetFlag(FLAGS_values),
                absl::GetFlag(FLAGS_value_bytes), kind.c_str());
    for (const auto& [name, count] : codes) {
      std::printf("  %-20s %5d  %s\n", name.c_str(), count, first_message[name].c_str());
    }
    std::printf("  coordinator RSS now: %lld KiB\n", static_cast<long long>(RssKiB(pid)));
  }
  stop = true;
  heartbeats.join();
  CancelJobRequest cancel;
  cancel.set_job_id(submitted.job_id());
  CancelJobResponse cancelled;
  (void)stub->CancelJob(Context().get(), cancel, &cancelled);
  return 0;
}

}  // namespace
}  // namespace mtrain

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return mtrain::Run();
}
