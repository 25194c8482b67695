// Measures the link the planner's cost model calls intra_node for CPU ranks on this host:
// `--members` processes (forked before any Gloo state exists, meeting through a directory
// store) all-reduce buffers of several sizes over loopback TCP, as tensor-parallel ranks
// do, and the ring model t = 2 (n - 1) latency + 2 (n - 1) / n bytes / bandwidth is fitted
// to the mean times by least squares. Prints the table and a LinkProfile as JSON for a
// cluster description (deploy/clusters/cpu_host.json):
//   bazel run //worker/parallel:gloo_link_probe -- --members=2 [--busy | --compute_ms=2]
// --compute_ms measures what a tensor-parallel rank pays: each member computes that long
// before every all-reduce (as a layer's GEMMs run between its all-reduces) and the cost
// of an all-reduce is the loop's time less the same computation without all-reduces. On
// shared cores that includes waiting for the slower member and for Gloo's event-loop
// threads to be scheduled, which an idle probe never sees.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "worker/parallel/gloo_communicator.h"
#include "worker/parallel/key_value_store.h"

ABSL_FLAG(int, members, 2, "processes in the group");
ABSL_FLAG(int, iterations, 40, "all-reduces timed per size");
ABSL_FLAG(bool, busy, false,
          "each member keeps a compute thread busy meanwhile, as a training rank's kernels "
          "do: Gloo's event-loop thread then competes with it for the core");

ABSL_FLAG(double, compute_ms, 0,
          "milliseconds of single-thread computation before each all-reduce (0: none); the "
          "reported time is the loop's less the computation alone");

namespace mtrain {
namespace {

const std::vector<size_t> kBytes = {4 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20};

// Arithmetic that keeps one core busy until `stop`.
void BusyLoop(const std::atomic<bool>* stop) {
  volatile float sink = 0;
  float x = 1.0f;
  while (!stop->load(std::memory_order_relaxed)) {
    for (int i = 0; i < 100000; ++i) x = x * 0.999999f + 1e-7f;
    sink = x;
  }
  (void)sink;
}

// Arithmetic for `loops` rounds (about 0.1 ms each on one core).
void Compute(int64_t loops) {
  volatile float sink = 0;
  float x = 1.0f;
  for (int64_t l = 0; l < loops; ++l) {
    for (int i = 0; i < 100000; ++i) x = x * 0.999999f + 1e-7f;
  }
  sink = x;
  (void)sink;
}

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Rounds of Compute() that take `milliseconds` on this core when nothing else runs.
int64_t CalibrateLoops(double milliseconds) {
  const int64_t trial = 200;
  const auto start = std::chrono::steady_clock::now();
  Compute(trial);
  const double per_loop = SecondsSince(start) / trial;
  return std::max<int64_t>(1, static_cast<int64_t>(milliseconds * 1e-3 / per_loop + 0.5));
}

int RunMember(const std::string& directory, int rank, int members, int iterations, bool busy,
              double compute_ms) {
  const int64_t loops = compute_ms > 0 ? CalibrateLoops(compute_ms) : 0;
  std::atomic<bool> stop{false};
  std::thread worker;
  if (busy) worker = std::thread(BusyLoop, &stop);
  struct Join {
    std::atomic<bool>* stop;
    std::thread* thread;
    ~Join() {
      stop->store(true);
      if (thread->joinable()) thread->join();
    }
  } join{&stop, &worker};
  absl::StatusOr<std::unique_ptr<DirectoryStore>> store = DirectoryStore::Open(directory);
  absl::StatusOr<GlooDevice> device = CreateGlooDevice("127.0.0.1");
  if (!store.ok() || !device.ok()) return 2;
  GroupSpec spec;
  spec.name = "probe";
  for (int r = 0; r < members; ++r) spec.members.push_back(r);
  spec.global_rank = rank;
  spec.timeout = absl::Seconds(60);
  absl::StatusOr<std::unique_ptr<Communicator>> group = ConnectGlooGroup(**store, *device, spec);
  if (!group.ok()) return 3;
  std::ofstream out(absl::StrCat(directory, "/times-", rank));
  for (size_t bytes : kBytes) {
    std::vector<float> data(bytes / sizeof(float), 1.0f);
    if (!(*group)->Barrier().ok()) return 4;
    for (int warm = 0; warm < 3; ++warm) {
      if (!(*group)->AllReduce(data.data(), data.size(), ReduceOp::kSum).ok()) return 4;
    }
    // The computation alone, every member at once (they contend for the cores as they do
    // in the timed loop).
    double compute_seconds = 0;
    if (loops > 0) {
      if (!(*group)->Barrier().ok()) return 4;
      const auto start = std::chrono::steady_clock::now();
      for (int i = 0; i < iterations; ++i) Compute(loops);
      compute_seconds = SecondsSince(start);
      if (!(*group)->Barrier().ok()) return 4;
    }
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < iterations; ++i) {
      if (loops > 0) Compute(loops);
      if (!(*group)->AllReduce(data.data(), data.size(), ReduceOp::kSum).ok()) return 5;
    }
    const double seconds = SecondsSince(start) - compute_seconds;
    out << bytes << " " << seconds / iterations << "\n";
  }
  return 0;
}

}  // namespace
}  // namespace mtrain

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const int members = absl::GetFlag(FLAGS_members);
  const int iterations = absl::GetFlag(FLAGS_iterations);
  if (members < 2) {
    std::fprintf(stderr, "gloo_link_probe: --members must be >= 2\n");
    return 2;
  }
  char pattern[] = "/tmp/gloo-link-probe-XXXXXX";
  const std::string directory = ::mkdtemp(pattern);
  std::vector<pid_t> children;
  for (int rank = 0; rank < members; ++rank) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::_exit(mtrain::RunMember(directory, rank, members, iterations, absl::GetFlag(FLAGS_busy),
                                absl::GetFlag(FLAGS_compute_ms)));
    }
    children.push_back(pid);
  }
  for (pid_t pid : children) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      std::fprintf(stderr, "gloo_link_probe: a member failed (status %d)\n", status);
      return 1;
    }
  }
  // Least squares of t = a x + b y with x = 2 (n - 1), y = 2 (n - 1) / n bytes:
  // a = latency, b = 1 / bandwidth.
  std::ifstream in(directory + "/times-0");
  double sxx = 0, sxy = 0, syy = 0, sxt = 0, syt = 0;
  const double n = members;
  std::printf("bytes      seconds per all-reduce (%d members)\n", members);
  size_t bytes = 0;
  double seconds = 0;
  while (in >> bytes >> seconds) {
    std::printf("%-10zu %.6f\n", bytes, seconds);
    const double x = 2 * (n - 1), y = 2 * (n - 1) / n * bytes;
    sxx += x * x;
    sxy += x * y;
    syy += y * y;
    sxt += x * seconds;
    syt += y * seconds;
  }
  const double det = sxx * syy - sxy * sxy;
  const double latency = (sxt * syy - syt * sxy) / det;
  const double inverse_bandwidth = (sxx * syt - sxy * sxt) / det;
  std::printf("{\"bandwidth_bytes_per_second\": %.3g, \"latency_seconds\": %.3g}\n",
              inverse_bandwidth > 0 ? 1 / inverse_bandwidth : 0.0, latency > 0 ? latency : 0.0);
  return 0;
}
