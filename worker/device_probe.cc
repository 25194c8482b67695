#include "worker/device_probe.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
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

DeviceProfile ProbeCpu(const CpuProbeOptions& options) {
  const int threads = options.threads > 0 ? options.threads : cpu::AvailableCores();
  cpu::SetCpuThreads(threads);
  constexpr int kLarge = 1024, kSmall = 64;
  const double large_rate = CubeRate(kLarge, options.seconds_per_measurement);
  const double small_rate = CubeRate(kSmall, options.seconds_per_measurement);

  DeviceProfile profile;
  profile.set_name(
      absl::StrCat("cpu (", threads, " threads of ", cpu::AvailableCores(), " cores, measured)"));
  profile.set_fp32_flops(large_rate);
  profile.set_matmul_efficiency(1.0);
  profile.set_matmul_half_size(MatmulHalfSize(kSmall, small_rate, kLarge, large_rate));
  profile.set_memory_bandwidth_bytes_per_second(CopyBandwidth(options.seconds_per_measurement));
  return profile;
}

}  // namespace mtrain
