#include "worker/engine/flops.h"

#include <cstdlib>

#include "kernels/cpu_peak.h"
#include "kernels/cpu_threads.h"
#include "plan/cluster_description.h"

namespace mtrain {
namespace {

// MTRAIN_PEAK_TFLOPS in FLOP/s, or 0 when unset or not positive.
double PeakFromEnvironment() {
  if (const char* env = std::getenv("MTRAIN_PEAK_TFLOPS")) {
    const double tflops = std::atof(env);
    if (tflops > 0) return tflops * 1e12;
  }
  return 0;
}

}  // namespace

double GpuPeakFlops() {
  const double forced = PeakFromEnvironment();
  return forced > 0 ? forced : 989e12;
}

double CpuRankPeakFlops(int threads, int ranks_on_host, bool bf16_gemms) {
  const int cores = cpu::AvailableCores();
  const double rank_cores = CpuCoresPerRank(cores, threads, ranks_on_host);
  if (const double forced = PeakFromEnvironment(); forced > 0) return forced * rank_cores / cores;
  const cpu::CpuPeak& peak = cpu::CpuPeakOfThisMachine();
  return (bf16_gemms ? peak.Bf16FlopsPerCore() : peak.FlopsPerCore()) * rank_cores;
}

}  // namespace mtrain
