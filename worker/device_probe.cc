#include "worker/device_probe.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "google/protobuf/util/json_util.h"
#include "kernels/cpu_features.h"
#include "kernels/cpu_gemm_library.h"
#include "kernels/cpu_peak.h"
#include "kernels/cpu_threads.h"
#include "kernels/matmul.h"

namespace mtrain {
namespace {

double Seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// The fastest run of `work` among repetitions filling `budget` seconds (at least 3).
template <typename Work>
double FastestSeconds(double budget, const Work& work) {
  double fastest = 1e30;
  const double start = Seconds();
  for (int repetition = 0; repetition < 3 || Seconds() - start < budget; ++repetition) {
    const double begin = Seconds();
    work();
    fastest = std::min(fastest, Seconds() - begin);
    if (repetition > 1000) break;
  }
  return fastest;
}

// FLOP/s of out[n, n] = in[n, n] weight[n, n]^T.
double CubeRate(int n, double budget) {
  std::vector<float> in(static_cast<size_t>(n) * n, 0.5f), weight(in.size(), 0.25f), out(in.size());
  const double seconds = FastestSeconds(budget, [&] {
    cpu::MatmulForward<float>(in.data(), weight.data(), nullptr, out.data(), n, n, n);
  });
  return 2.0 * n * n * n / seconds;
}

// Bytes moved per second by a large copy (read and write both counted).
double CopyBandwidth(double budget) {
  const size_t bytes = size_t{64} << 20;
  std::vector<char> from(bytes, 1), to(bytes, 2);
  const double seconds =
      FastestSeconds(budget, [&] { std::memcpy(to.data(), from.data(), bytes); });
  return 2.0 * bytes / seconds;
}

}  // namespace

double MatmulHalfSize(double small, double small_rate, double large, double large_rate) {
  if (!(small_rate > 0 && large_rate > 0) || small_rate >= large_rate) return 0;
  const double target = std::cbrt(small_rate / large_rate);  // f(small) / f(large)
  // f(small) / f(large) falls from 1 towards small / large as h grows: bisect.
  if (target <= small / large) return 1e9;
  double low = 0, high = 1e9;
  for (int iteration = 0; iteration < 200; ++iteration) {
    const double h = (low + high) / 2;
    const double ratio = (small / (small + h)) / (large / (large + h));
    (ratio > target ? low : high) = h;
  }
  return (low + high) / 2;
}

std::string CpuProbeOptions::DefaultProbeLockFile() {
  const char* tmp = std::getenv("TMPDIR");
  return absl::StrCat(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp", "/mtrain-cpu-probe.lock");
}

namespace {

// Holds an exclusive flock on a file while alive: the host's other probes wait for it. A
// lock the kernel drops when the process dies, so a killed worker never blocks the next.
class HostProbeLock {
 public:
  HostProbeLock(const std::string& path, double wait_seconds) {
    if (path.empty()) return;
    fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666);
    if (fd_ < 0) return;  // no lock to be had (a read-only /tmp): measure anyway
    const double deadline = Seconds() + wait_seconds;
    while (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
      if (errno != EWOULDBLOCK && errno != EINTR) break;
      if (Seconds() >= deadline) break;
      ::usleep(20000);
    }
  }
  ~HostProbeLock() {
    if (fd_ >= 0) ::close(fd_);  // releases the lock
  }
  HostProbeLock(const HostProbeLock&) = delete;
  HostProbeLock& operator=(const HostProbeLock&) = delete;

 private:
  int fd_ = -1;
};

}  // namespace

DeviceProfile ProbeCpu(const CpuProbeOptions& options) {
  const HostProbeLock lock(options.lock_file, options.lock_wait_seconds);
  const int cores = cpu::AvailableCores();
  const int threads = options.threads > 0 ? options.threads : cores;
  cpu::SetCpuThreads(threads);
  const cpu::GemmKernelChoice& gemm = cpu::EnsureBestGemmKernel();
  const cpu::CpuPeak& peak = cpu::CpuPeakOfThisMachine();
  const cpu::CpuFeatures& features = cpu::CpuFeaturesOfThisMachine();
  constexpr int kLarge = 1024, kSmall = 64;
  const double large_rate = CubeRate(kLarge, options.seconds_per_measurement);
  const double small_rate = CubeRate(kSmall, options.seconds_per_measurement);
  const double peak_flops = peak.FlopsPerCore() * std::min(threads, cores);

  DeviceProfile profile;
  profile.set_name(absl::StrCat("cpu (", threads, " threads of ", cores, " cores, measured)"));
  // The peak of the cores used, and the share of it the library's GEMM reaches (capped: a
  // clock measured slower than it runs must not make the efficiency exceed 1).
  profile.set_fp32_flops(peak_flops);
  profile.set_matmul_efficiency(std::clamp(large_rate / peak_flops, 1e-3, 1.0));
  profile.set_matmul_half_size(MatmulHalfSize(kSmall, small_rate, kLarge, large_rate));
  profile.set_memory_bandwidth_bytes_per_second(CopyBandwidth(options.seconds_per_measurement));
  profile.set_processor(features.model_name.empty() ? features.vendor : features.model_name);
  profile.set_isa(cpu::VectorIsaName(cpu::BestVectorIsa(features)));
  profile.set_gemm_library(gemm.library);
  profile.set_gemm_kernel(gemm.kernel);
  profile.set_cores(cores);
  profile.set_threads(threads);
  profile.set_flops_per_cycle(peak.FlopsPerCycle());
  profile.set_clock_hz(peak.clock_hz);
  return profile;
}

absl::StatusOr<DeviceProfile> MeasureCudaWithRankBinary(const std::string& train_binary,
                                                        int device) {
  int pipe_fds[2];
  if (::pipe(pipe_fds) != 0) return absl::InternalError("cannot create a pipe for the probe");
  const std::string flag = absl::StrCat("--measure_cuda_device=", device);
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(pipe_fds[0]);
    ::close(pipe_fds[1]);
    return absl::InternalError("cannot fork the GPU probe");
  }
  if (pid == 0) {
    ::dup2(pipe_fds[1], STDOUT_FILENO);
    ::dup2(pipe_fds[1], STDERR_FILENO);
    ::close(pipe_fds[0]);
    ::close(pipe_fds[1]);
    ::execl(train_binary.c_str(), train_binary.c_str(), flag.c_str(), static_cast<char*>(nullptr));
    std::fprintf(stderr, "cannot run %s: %s\n", train_binary.c_str(), std::strerror(errno));
    ::_exit(127);
  }
  ::close(pipe_fds[1]);
  std::string output;
  char buffer[4096];
  for (ssize_t n; (n = ::read(pipe_fds[0], buffer, sizeof(buffer))) != 0;) {
    if (n < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (output.size() < (1 << 20)) output.append(buffer, static_cast<size_t>(n));
  }
  ::close(pipe_fds[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  std::string last;
  for (absl::string_view line : absl::StrSplit(output, '\n', absl::SkipWhitespace())) {
    last = std::string(absl::StripAsciiWhitespace(line));
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(train_binary, " ", flag, " failed: ", last.empty() ? "no output" : last));
  }
  DeviceProfile profile;
  const auto parsed = google::protobuf::util::JsonStringToMessage(last, &profile);
  if (!parsed.ok()) {
    return absl::InternalError(
        absl::StrCat(train_binary, " ", flag, " printed no device profile: ", parsed.ToString()));
  }
  if (!(profile.fp32_flops() > 0) || !(profile.half_flops() >= 0) ||
      !(profile.memory_bandwidth_bytes_per_second() > 0)) {
    return absl::InternalError(
        absl::StrCat(train_binary, " ", flag, " printed a profile without positive rates: ", last));
  }
  return profile;
}

}  // namespace mtrain
