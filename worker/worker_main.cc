// The worker daemon: one per device. Registers with the coordinator and heartbeats until
// SIGINT or SIGTERM.
//
//   worker --coordinator=127.0.0.1:7070 --device=auto
#include <unistd.h>

#include <cstdio>
#include <random>
#include <string>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/notification.h"
#include "common/shutdown_signal.h"
#include "grpcpp/grpcpp.h"
#include "worker/agent.h"
#include "worker/device_inventory.h"

ABSL_FLAG(std::string, coordinator, "127.0.0.1:7070", "coordinator gRPC address HOST:PORT");
ABSL_FLAG(std::string, device, "auto", "auto (CUDA if a GPU works, else CPU), cpu or cuda");
ABSL_FLAG(std::string, worker_id, "",
          "stable identity across restarts; default HOST-PID (a new worker each start)");

namespace mtrain {
namespace {

// 64 random bits as hex: distinguishes this process start from any other.
std::string NewIncarnationId() {
  std::random_device device;
  std::mt19937_64 rng((static_cast<uint64_t>(device()) << 32) ^ device() ^ getpid());
  return absl::StrFormat("%016x", rng());
}

int Run() {
  ShutdownSignal shutdown;  // Before any thread (see ShutdownSignal).

  absl::StatusOr<DeviceChoice> choice = ParseDeviceChoice(absl::GetFlag(FLAGS_device));
  if (!choice.ok()) {
    std::fprintf(stderr, "worker: %s\n", std::string(choice.status().message()).c_str());
    return 2;
  }
  std::string note;
  absl::StatusOr<WorkerInfo> info = DetectDevices(*choice, &note);
  if (!info.ok()) {
    std::fprintf(stderr, "worker: %s\n", std::string(info.status().message()).c_str());
    return 1;
  }
  std::string worker_id = absl::GetFlag(FLAGS_worker_id);
  if (worker_id.empty()) worker_id = absl::StrCat(info->host(), "-", getpid());
  info->set_worker_id(worker_id);
  info->set_incarnation_id(NewIncarnationId());

  const std::string address = absl::GetFlag(FLAGS_coordinator);
  std::printf("worker %s starting: %s; coordinator %s\n", worker_id.c_str(), note.c_str(),
              address.c_str());
  std::fflush(stdout);

  std::shared_ptr<grpc::Channel> channel =
      grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
  std::unique_ptr<Coordinator::Stub> stub = Coordinator::NewStub(channel);
  WorkerAgent agent(stub.get(), *info);

  Notification stop;
  std::thread waiter([&shutdown, &stop, &worker_id] {
    const int signal_number = shutdown.WaitForSignal();
    std::fprintf(stderr, "worker %s: signal %d, stopping\n", worker_id.c_str(), signal_number);
    stop.Notify();
  });
  agent.Run(&stop);
  waiter.join();
  return 0;
}

}  // namespace
}  // namespace mtrain

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("Megatron-class training service worker daemon");
  absl::ParseCommandLine(argc, argv);
  return mtrain::Run();
}
