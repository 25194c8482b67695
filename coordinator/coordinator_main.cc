// The coordinator daemon: serves the Coordinator gRPC service (plus health and
// reflection), and on --http Prometheus metrics and the status page, until SIGINT or
// SIGTERM. Jobs live in
// --state_dir/jobs.sqlite and survive restarts; checkpoints in --state_dir/checkpoints.
// One coordinator per state dir (--state_dir/LOCK) and per address: a second one exits 1
// before it changes anything.
//
//   coordinator --listen=127.0.0.1:0 --http=127.0.0.1:0 --state_dir=/var/lib/mtrain
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/grpc_connection.h"
#include "common/notification.h"
#include "common/shutdown_signal.h"
#include "coordinator/checkpoint_store.h"
#include "coordinator/coordinator_metrics.h"
#include "coordinator/grpc_service.h"
#include "coordinator/http_routes.h"
#include "coordinator/http_server.h"
#include "coordinator/job_manager.h"
#include "coordinator/job_store.h"
#include "coordinator/rendezvous_store.h"
#include "coordinator/server_token.h"
#include "coordinator/state_dir_lock.h"
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
ABSL_FLAG(std::string, http, "127.0.0.1:9464",
          "HOST:PORT serving Prometheus /metrics and the status page at /; port 0 picks a "
          "free port (printed); empty disables");
ABSL_FLAG(std::string, chart_js, mtrain::kDefaultChartJsPath,
          "Chart.js (UMD build) that the status page draws with, read at start and served "
          "at /static/chart.js; if unreadable the page shows its tables without the chart");
ABSL_FLAG(std::string, state_dir, "mtrain_state",
          "directory of the job database (jobs.sqlite) and checkpoints; created if missing; "
          "locked (DIR/LOCK) while this coordinator runs");
ABSL_FLAG(std::string, auth_token_file, "",
          "file holding a bearer token that every RPC must carry (health checks excepted); "
          "without it, a coordinator whose --listen is not loopback generates "
          "STATE_DIR/auth_token on first start and uses that");
ABSL_FLAG(uint64_t, rendezvous_max_bytes, mtrain::kDefaultRendezvousTotalBytes,
          "bound on the rendezvous keys and values of all live generations together (each "
          "generation also has its own bound, from its world size); beyond it KeyValueSet "
          "answers RESOURCE_EXHAUSTED");
ABSL_FLAG(absl::Duration, lost_rank_grace, absl::Seconds(10),
          "an assigned worker reporting idle this long lost its rank");
ABSL_FLAG(absl::Duration, backfill_window, absl::Minutes(5),
          "admission: a job that fits the free workers starts ahead of the oldest waiting job "
          "of its kind of worker until that job has waited this long; then nothing overtakes "
          "it (0: strict first come, first served)");
ABSL_FLAG(absl::Duration, step_write_interval, mtrain::kStepWriteInterval,
          "the loss-reporting ranks' step rows are stored at most one transaction per this "
          "interval, every row since the last in it (0: as soon as the previous one is done)");
ABSL_FLAG(absl::Duration, shrink_grace, absl::Seconds(30),
          "a failed job waits this long for a replacement worker before running with fewer "
          "data-parallel replicas (down to parallel.min_data)");
ABSL_FLAG(int, keep_checkpoints, 3,
          "committed checkpoints kept per job (older ones are deleted); at least 1");
ABSL_FLAG(absl::Duration, collective_timeout, absl::Minutes(5),
          "handed to every rank: bound on its rendezvous and on each collective or message; "
          "a hung peer is named when it runs out");
ABSL_FLAG(absl::Duration, job_retention, absl::InfiniteDuration(),
          "ended jobs are deleted, with their events, steps and checkpoints, this long after "
          "they ended (e.g. 720h); inf (the default) keeps them until `trainctl delete`");

namespace mtrain {
namespace {

// How long in-flight RPCs get at shutdown before they are cancelled. Streams (WatchJob,
// ReportMetrics) never end on their own, so this is how long every stop takes.
constexpr std::chrono::milliseconds kShutdownGrace(1000);

// Whether another socket already listens on HOST:PORT. The servers bind only after the job
// store is open and recovered (their handlers need it), and recovery re-queues running jobs;
// this check lets a coordinator whose port is taken exit before it has changed anything.
// SO_REUSEADDR (which both servers set too) keeps a just-stopped coordinator's connections
// in TIME_WAIT from counting; without SO_REUSEPORT the bind fails while anything listens.
// Only EADDRINUSE counts: anything else (a name that does not resolve, a port that is not a
// number, "unix:" addresses) is left for the server itself to report.
bool AddressInUse(const std::string& address) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos) return false;
  std::string host = address.substr(0, colon);
  const std::string port = address.substr(colon + 1);
  int port_number = 0;
  if (!absl::SimpleAtoi(port, &port_number) || port_number <= 0) return false;
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  addrinfo hints = {};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* addresses = nullptr;
  if (::getaddrinfo(host.empty() ? nullptr : host.c_str(), port.c_str(), &hints, &addresses) != 0) {
    return false;
  }
  bool in_use = false;
  for (const addrinfo* a = addresses; a != nullptr && !in_use; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    const int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(fd, a->ai_addr, a->ai_addrlen) != 0 && errno == EADDRINUSE) in_use = true;
    ::close(fd);
  }
  ::freeaddrinfo(addresses);
  return in_use;
}

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
  if (absl::GetFlag(FLAGS_rendezvous_max_bytes) == 0) {
    // Nothing could rendezvous: every job with more than one rank would fail.
    std::fprintf(stderr, "coordinator: --rendezvous_max_bytes must be > 0\n");
    return 2;
  }
  RendezvousStore rendezvous(absl::GetFlag(FLAGS_rendezvous_max_bytes));

  // The metrics are kept here and served by our own HTTP server below (with the status
  // page), so prometheus-cpp's Exposer binds nothing.
  absl::StatusOr<std::unique_ptr<CoordinatorMetrics>> metrics = CoordinatorMetrics::Start("");
  if (!metrics.ok()) {
    std::fprintf(stderr, "coordinator: metrics: %s\n", metrics.status().ToString().c_str());
    return 1;
  }
  // A bad --auth_token_file is refused before anything is touched; a generated token
  // (below) needs the state dir lock first.
  const std::string auth_token_file = absl::GetFlag(FLAGS_auth_token_file);
  if (!auth_token_file.empty()) {
    if (absl::Status readable = ReadServerTokenFile(auth_token_file).status(); !readable.ok()) {
      std::fprintf(stderr, "coordinator: %s\n", std::string(readable.message()).c_str());
      return 2;
    }
  }
  JobManagerOptions job_options;
  job_options.lost_rank_grace = absl::GetFlag(FLAGS_lost_rank_grace);
  job_options.shrink_grace = absl::GetFlag(FLAGS_shrink_grace);
  job_options.backfill_window = absl::GetFlag(FLAGS_backfill_window);
  job_options.step_write_interval = absl::GetFlag(FLAGS_step_write_interval);
  if (job_options.step_write_interval < absl::ZeroDuration() ||
      job_options.step_write_interval > absl::Seconds(10)) {
    std::fprintf(stderr, "coordinator: --step_write_interval: must be within 0 and 10s\n");
    return 1;
  }
  if (job_options.backfill_window < absl::ZeroDuration()) {
    std::fprintf(stderr, "coordinator: --backfill_window: must not be negative\n");
    return 1;
  }
  job_options.collective_timeout = absl::GetFlag(FLAGS_collective_timeout);
  if (job_options.collective_timeout <= absl::ZeroDuration()) {
    std::fprintf(stderr, "coordinator: --collective_timeout must be > 0\n");
    return 2;
  }
  job_options.job_retention = absl::GetFlag(FLAGS_job_retention);
  if (job_options.job_retention <= absl::ZeroDuration()) {
    std::fprintf(stderr, "coordinator: --job_retention=%s must be > 0 (inf keeps jobs forever)\n",
                 absl::FormatDuration(job_options.job_retention).c_str());
    return 2;
  }

  // Nothing above wrote anything. The addresses are checked before the state dir is
  // touched, so a coordinator started twice by mistake leaves the running one's state alone.
  const std::string listen = absl::GetFlag(FLAGS_listen);
  if (AddressInUse(listen)) {
    std::fprintf(stderr, "coordinator: cannot listen on %s (--listen): address in use\n",
                 listen.c_str());
    return 1;
  }
  const std::string http = absl::GetFlag(FLAGS_http);
  if (!http.empty() && AddressInUse(http)) {
    std::fprintf(stderr, "coordinator: --http: cannot serve HTTP on %s: address in use\n",
                 http.c_str());
    return 1;
  }
  // The lock comes before anything in the state dir is opened: a second coordinator on it
  // would re-queue (and so abort) the running one's jobs. Declared before the stores so it
  // is released only after they are closed.
  const std::string state_dir = absl::GetFlag(FLAGS_state_dir);
  absl::StatusOr<std::unique_ptr<StateDirLock>> lock = StateDirLock::Acquire(state_dir);
  if (!lock.ok()) {
    std::fprintf(stderr, "coordinator: %s\n", std::string(lock.status().message()).c_str());
    return 1;
  }
  absl::StatusOr<ServerToken> server_token = ChooseServerToken(listen, auth_token_file, state_dir);
  if (!server_token.ok()) {
    std::fprintf(stderr, "coordinator: %s\n", std::string(server_token.status().message()).c_str());
    return 2;
  }
  const std::string token = server_token->token;
  // Declared before everything that writes to it, so it is closed last: after the gRPC
  // server has stopped (its handlers joined) and the ticker has finished.
  absl::StatusOr<std::unique_ptr<JobStore>> store = JobStore::Open(state_dir + "/jobs.sqlite");
  if (!store.ok()) {
    std::fprintf(stderr, "coordinator: %s\n", store.status().ToString().c_str());
    return 1;
  }
  absl::StatusOr<std::unique_ptr<CheckpointStore>> checkpoints =
      CheckpointStore::Open(state_dir + "/checkpoints", absl::GetFlag(FLAGS_keep_checkpoints));
  if (!checkpoints.ok()) {
    std::fprintf(stderr, "coordinator: --keep_checkpoints/--state_dir: %s\n",
                 checkpoints.status().ToString().c_str());
    return 2;
  }
  absl::StatusOr<std::unique_ptr<JobManager>> jobs =
      JobManager::Create(RealClock::Get(), &workers, store->get(), &rendezvous, metrics->get(),
                         job_options, checkpoints->get());
  if (!jobs.ok()) {
    std::fprintf(stderr, "coordinator: %s\n", jobs.status().ToString().c_str());
    return 1;
  }
  CoordinatorGrpcService service(&workers, &rendezvous, jobs->get(), metrics->get(), token,
                                 checkpoints->get());

  // Declared after everything its routes read, so it stops (joining its threads) first.
  std::unique_ptr<CoordinatorHttpRoutes> routes;
  std::unique_ptr<HttpServer> http_server;
  if (!http.empty()) {
    absl::StatusOr<std::string> chart_js = ReadChartJs(absl::GetFlag(FLAGS_chart_js));
    if (!chart_js.ok()) {
      std::fprintf(stderr, "coordinator: --chart_js: %s; the status page will have no chart\n",
                   chart_js.status().ToString().c_str());
    }
    routes = std::make_unique<CoordinatorHttpRoutes>(jobs->get(), &workers, metrics->get(),
                                                     std::move(chart_js));
    absl::StatusOr<std::unique_ptr<HttpServer>> started = HttpServer::Start(
        http, [r = routes.get()](const HttpRequest& request) { return r->Handle(request); });
    if (!started.ok()) {
      std::fprintf(stderr, "coordinator: --http: %s\n", started.status().ToString().c_str());
      return 1;
    }
    http_server = *std::move(started);
  }

  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  // gRPC sets SO_REUSEPORT by default: a second coordinator on the same port would then
  // start fine and the kernel would split new connections between the two.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  ApplyCoordinatorServerArguments(&builder);  // BDP probing off (common/grpc_connection.h)
  int port = 0;
  builder.AddListeningPort(listen, grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || port == 0) {
    // Taken since AddressInUse looked, most likely.
    std::fprintf(stderr, "coordinator: cannot listen on %s (--listen; address in use?)\n",
                 listen.c_str());
    return 1;
  }
  const std::string host = listen.substr(0, listen.rfind(':'));
  // Tests and launchers read this line to find a port picked by the OS.
  std::printf("coordinator listening on %s:%d\n", host.c_str(), port);
  if (http_server != nullptr) {
    const std::string http_host = http.substr(0, http.rfind(':'));
    std::printf("coordinator metrics on http://%s:%d/metrics\n", http_host.c_str(),
                http_server->port());
    std::printf("coordinator status page on http://%s:%d/\n", http_host.c_str(),
                http_server->port());
  }
  std::printf("coordinator state in %s%s\n", state_dir.c_str(),
              token.empty() ? "" : "; every RPC needs the bearer token");
  if (server_token->generated_path.has_value()) {
    // Where workers and users find the token: the operator copies it to them.
    std::printf(
        "coordinator token in %s (%s: --listen %s is not loopback and no --auth_token_file "
        "was given); pass that file to workers and trainctl as --token_file\n",
        server_token->generated_path->c_str(),
        server_token->created ? "generated" : "generated earlier", listen.c_str());
  }
  std::fflush(stdout);

  // Admission, placement and failure detection run on their own clock.
  Notification stop_ticking;
  std::thread ticker([&] {
    while (!stop_ticking.WaitForNotificationWithTimeout(absl::Milliseconds(200))) {
      (*jobs)->Tick();
    }
  });

  std::thread waiter([&shutdown, &server, &http_server] {
    const int signal_number = shutdown.WaitForSignal();
    std::fprintf(stderr, "coordinator: signal %d, shutting down\n", signal_number);
    // Stopping HTTP alongside gRPC rather than after it keeps a page in flight off the
    // total. Its routes read objects that live until Run returns.
    std::thread http_stopper([&http_server] { http_server.reset(); });
    // Give in-flight calls a moment, then cancel them: watch and metrics streams would
    // otherwise hold the whole deadline. Returns once every handler has returned.
    server->Shutdown(std::chrono::system_clock::now() + kShutdownGrace);
    http_stopper.join();
  });
  server->Wait();
  waiter.join();
  stop_ticking.Notify();
  ticker.join();
  // Destruction in reverse order of declaration: the server, then the job manager, the job
  // store (SQLite closes, checkpointing its WAL) and last the state dir lock.
  return 0;
}

}  // namespace
}  // namespace mtrain

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("Megatron-class training service coordinator");
  absl::ParseCommandLine(argc, argv);
  // Debian's Abseil checks every absl::Mutex acquisition for lock-order cycles (a debug
  // aid its release builds normally leave off). gRPC's internals lock absl::Mutexes on
  // every call, and at 4,096 workers that check was 12% of the coordinator's CPU
  // (docs/PERFORMANCE.md, issue 37). The project's own locks are common/mutex.h (checked
  // by clang's thread-safety analysis and ThreadSanitizer), not absl::Mutex.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  return mtrain::Run();
}
