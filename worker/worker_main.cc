// The worker daemon: one per device. Registers with the coordinator and heartbeats until
// SIGINT or SIGTERM.
//
// Exit status: 0 after a signal; 2 for a configuration error (a bad flag value, an
// unreadable --token_file, a token the coordinator refuses); 1 when the devices cannot
// be used.
//
//   worker --coordinator=127.0.0.1:7070 --device=auto
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/grpc_connection.h"
#include "common/notification.h"
#include "common/shutdown_signal.h"
#include "data/data_roots.h"
#include "grpcpp/grpcpp.h"
#include "kernels/cpu_gemm_library.h"
#include "worker/agent.h"
#include "worker/coordinator_client.h"
#include "worker/device_inventory.h"
#include "worker/device_probe.h"
#include "worker/rank_process.h"

ABSL_FLAG(std::string, coordinator, "127.0.0.1:7070", "coordinator gRPC address HOST:PORT");
ABSL_FLAG(std::string, device, "auto", "auto (CUDA if a GPU works, else CPU), cpu or cuda");
ABSL_FLAG(std::string, worker_id, "",
          "stable identity across restarts; default HOST-PID (a new worker each start)");
ABSL_FLAG(std::string, token_file, "",
          "file holding the coordinator's bearer token (when it requires one)");
ABSL_FLAG(std::string, train_binary, "",
          "the `train` binary that runs assigned ranks (default: beside this binary)");
ABSL_FLAG(int, threads, 0, "CPU threads of each rank this worker runs (0: all cores)");
ABSL_FLAG(bool, probe_device, true,
          "measure the CPU at start (matrix-multiply rate, memory bandwidth; about half a "
          "second) and report it for the coordinator's planner");
ABSL_FLAG(std::string, log_dir, "",
          "where assigned ranks' logs go (default /tmp/mtrain-worker-ID)");
ABSL_FLAG(std::string, data_root, "",
          "comma-separated directories a job's data.path must resolve inside (realpath, "
          "symlinks followed); default: the directory of the shipped corpus and "
          "$MTRAIN_DATA_DIR");

namespace mtrain {
namespace {

std::string SiblingBinary(const std::string& name) {
  char self[4096];
  const ssize_t n = ::readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n <= 0) return name;
  self[n] = '\0';
  const std::string path(self);
  return path.substr(0, path.rfind('/') + 1) + name;
}

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
  if (info->device_kind() == DEVICE_KIND_CPU && absl::GetFlag(FLAGS_probe_device)) {
    *info->mutable_profile() =
        ProbeCpu({.threads = absl::GetFlag(FLAGS_threads), .seconds_per_measurement = 0.1});
    info->mutable_profile()->set_memory_bytes(info->memory_bytes());
    const DeviceProfile& profile = info->profile();
    note = absl::StrCat(
        note, absl::StrFormat("; %s (%s), peak %.0f GFLOP/s fp32 (%d FLOP/cycle x %.2f GHz x %d "
                              "threads); %s kernel %s measured %.0f GFLOP/s (%.0f%% of peak, half "
                              "size %.0f), %.1f GB/s memory",
                              profile.processor(), profile.isa(), profile.fp32_flops() / 1e9,
                              profile.flops_per_cycle(), profile.clock_hz() / 1e9,
                              std::min(profile.threads(), profile.cores()), profile.gemm_library(),
                              profile.gemm_kernel(),
                              profile.fp32_flops() * profile.matmul_efficiency() / 1e9,
                              100 * profile.matmul_efficiency(), profile.matmul_half_size(),
                              profile.memory_bandwidth_bytes_per_second() / 1e9));
    if (const std::string warning = cpu::EnsureBestGemmKernel().Warning(); !warning.empty()) {
      std::fprintf(stderr, "worker: warning: %s\n", warning.c_str());
    }
  }

  if (info->device_kind() == DEVICE_KIND_CUDA && absl::GetFlag(FLAGS_probe_device)) {
    // The CUDA runtime stays out of the daemon: the rank binary measures the GPU.
    std::string train = absl::GetFlag(FLAGS_train_binary);
    if (train.empty()) train = SiblingBinary("train");
    absl::StatusOr<DeviceProfile> profile = MeasureCudaWithRankBinary(train, 0);
    if (profile.ok()) {
      *info->mutable_profile() = *profile;
      note = absl::StrCat(
          note, absl::StrFormat("; measured %.0f TFLOP/s bf16 GEMM (half size %.0f), %.0f TFLOP/s "
                                "fp32, %.0f GB/s memory",
                                profile->half_flops() / 1e12, profile->matmul_half_size(),
                                profile->fp32_flops() / 1e12,
                                profile->memory_bandwidth_bytes_per_second() / 1e9));
    } else {
      note = absl::StrCat(note, "; GPU not measured (", profile.status().message(),
                          "): plans need --cluster");
    }
  }

  const std::string address = absl::GetFlag(FLAGS_coordinator);
  std::printf("worker %s starting: %s; coordinator %s\n", worker_id.c_str(), note.c_str(),
              address.c_str());
  std::fflush(stdout);

  absl::StatusOr<std::string> token = ReadTokenFile(absl::GetFlag(FLAGS_token_file));
  if (!token.ok()) {
    std::fprintf(stderr, "worker: --token_file: %s\n",
                 std::string(token.status().message()).c_str());
    return 2;
  }
  RankProcessOptions rank_options;
  rank_options.train_binary = absl::GetFlag(FLAGS_train_binary);
  if (rank_options.train_binary.empty()) rank_options.train_binary = SiblingBinary("train");
  if (::access(rank_options.train_binary.c_str(), X_OK) != 0) {
    std::fprintf(stderr, "worker: %s is not executable (--train_binary)\n",
                 rank_options.train_binary.c_str());
    return 2;
  }
  // Checked here, so a mistyped root stops the daemon instead of failing every job.
  std::vector<std::string> data_roots = DefaultDataRoots();
  if (const std::string roots_flag = absl::GetFlag(FLAGS_data_root); !roots_flag.empty()) {
    absl::StatusOr<std::vector<std::string>> parsed = ParseDataRoots(roots_flag);
    if (!parsed.ok()) {
      std::fprintf(stderr, "worker: %s\n", std::string(parsed.status().message()).c_str());
      return 2;
    }
    data_roots = *std::move(parsed);
  }
  std::printf("worker %s: data roots: %s\n", worker_id.c_str(),
              data_roots.empty() ? "none (jobs may use only the shipped corpus)"
                                 : absl::StrJoin(data_roots, ",").c_str());
  std::fflush(stdout);
  rank_options.data_roots = absl::StrJoin(data_roots, ",");
  rank_options.coordinator = address;
  rank_options.token_file = absl::GetFlag(FLAGS_token_file);
  rank_options.threads = absl::GetFlag(FLAGS_threads);
  rank_options.log_dir = absl::GetFlag(FLAGS_log_dir);
  rank_options.hide_gpus = info->device_kind() == DEVICE_KIND_CPU;
  if (rank_options.log_dir.empty()) rank_options.log_dir = "/tmp/mtrain-worker-" + worker_id;
  RankProcess ranks(rank_options);

  std::shared_ptr<grpc::Channel> channel = CoordinatorChannel(address);
  std::unique_ptr<Coordinator::Stub> stub = Coordinator::NewStub(channel);
  WorkerAgent agent(stub.get(), *info, &ranks, *token);

  Notification stop;
  std::atomic<bool> giving_up{false};
  std::thread waiter([&shutdown, &stop, &worker_id, &giving_up] {
    const int signal_number = shutdown.WaitForSignal();
    if (!giving_up.load()) {
      std::fprintf(stderr, "worker %s: signal %d, stopping\n", worker_id.c_str(), signal_number);
    }
    stop.Notify();
  });
  const absl::Status ended = agent.Run(&stop);
  if (!ended.ok()) {
    // Only a refused token ends Run early. SIGTERM aimed at the waiter (blocked in every
    // thread, so it stays pending until the waiter's sigwait takes it) wakes it, so the
    // daemon still shuts down through the destructors, stopping a running rank.
    giving_up.store(true);
    pthread_kill(waiter.native_handle(), SIGTERM);
  }
  waiter.join();
  if (!ended.ok()) {
    std::fprintf(stderr, "worker: %s\n", std::string(ended.message()).c_str());
    return 2;
  }
  return 0;
}

}  // namespace
}  // namespace mtrain

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("Megatron-class training service worker daemon");
  absl::ParseCommandLine(argc, argv);
  return mtrain::Run();
}
