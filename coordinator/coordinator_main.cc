// The coordinator daemon: serves the Coordinator gRPC service (plus health and
// reflection) until SIGINT or SIGTERM.
//
//   coordinator --listen=127.0.0.1:0     # port 0 picks a free port and prints it
#include <cstdio>
#include <memory>
#include <string>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/shutdown_signal.h"
#include "coordinator/grpc_service.h"
#include "coordinator/rendezvous_store.h"
#include "coordinator/worker_registry.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/health_check_service_interface.h"

ABSL_FLAG(std::string, listen, "127.0.0.1:7070",
          "gRPC address HOST:PORT; port 0 picks a free port (printed at start)");
ABSL_FLAG(absl::Duration, heartbeat_interval, mtrain::kDefaultHeartbeatInterval,
          "how often workers are asked to heartbeat");
ABSL_FLAG(absl::Duration, heartbeat_timeout, mtrain::kDefaultHeartbeatTimeout,
          "a worker silent for this long is considered dead");

namespace mtrain {
namespace {

int Run() {
  // Before any thread exists (see ShutdownSignal).
  ShutdownSignal shutdown;

  WorkerRegistryOptions registry_options;
  registry_options.heartbeat_interval = absl::GetFlag(FLAGS_heartbeat_interval);
  registry_options.heartbeat_timeout = absl::GetFlag(FLAGS_heartbeat_timeout);
  if (registry_options.heartbeat_interval <= absl::ZeroDuration() ||
      registry_options.heartbeat_timeout <= registry_options.heartbeat_interval) {
    std::fprintf(stderr, "coordinator: --heartbeat_timeout must exceed --heartbeat_interval > 0\n");
    return 2;
  }
  WorkerRegistry workers(RealClock::Get(), registry_options);
  RendezvousStore rendezvous;
  CoordinatorGrpcService service(&workers, &rendezvous);

  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  int port = 0;
  const std::string listen = absl::GetFlag(FLAGS_listen);
  builder.AddListeningPort(listen, grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || port == 0) {
    std::fprintf(stderr, "coordinator: cannot listen on %s (--listen)\n", listen.c_str());
    return 1;
  }
  const std::string host = listen.substr(0, listen.rfind(':'));
  // Tests and launchers read this line to find a port picked by the OS.
  std::printf("coordinator listening on %s:%d\n", host.c_str(), port);
  std::fflush(stdout);

  std::thread waiter([&shutdown, &server] {
    const int signal_number = shutdown.WaitForSignal();
    std::fprintf(stderr, "coordinator: signal %d, shutting down\n", signal_number);
    // Give in-flight calls (e.g. rendezvous waits) a moment, then cancel them.
    server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  });
  server->Wait();
  waiter.join();
  return 0;
}

}  // namespace
}  // namespace mtrain

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("Megatron-class training service coordinator");
  absl::ParseCommandLine(argc, argv);
  return mtrain::Run();
}
