#include "kernels/cpu_peak.h"

#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cmath>

#include "absl/strings/str_format.h"

namespace mtrain::cpu {
namespace {

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Each measurement keeps the fastest of this many runs: a run that lost its core to another
// process for a moment only ever reads slower.
constexpr int kRepetitions = 7;

// Cycles of `iterations` passes of 16 dependent adds. Register-to-register adds: some cores
// fold an add of a small immediate into the renamer at no latency, never one of a register.
double DependentAddSeconds(long iterations) {
  const double start = Now();
  long counter = iterations;
  long value = 0;
  const long one = 1;
  __asm__ volatile(
      "1:\n\t"
      "add %[one], %[value]\n\tadd %[one], %[value]\n\tadd %[one], %[value]\n\t"
      "add %[one], %[value]\n\tadd %[one], %[value]\n\tadd %[one], %[value]\n\t"
      "add %[one], %[value]\n\tadd %[one], %[value]\n\tadd %[one], %[value]\n\t"
      "add %[one], %[value]\n\tadd %[one], %[value]\n\tadd %[one], %[value]\n\t"
      "add %[one], %[value]\n\tadd %[one], %[value]\n\tadd %[one], %[value]\n\t"
      "add %[one], %[value]\n\t"
      "dec %[counter]\n\t"
      "jnz 1b\n\t"
      : [value] "+r"(value), [counter] "+r"(counter)
      : [one] "r"(one)
      : "cc");
  return Now() - start;
}

// Vector FMAs on independent accumulators (more than latency x units, so that the units,
// not the latency, bound them), written in assembly so that nothing but the FMAs and the
// loop runs. acc <- acc * 0.999 + 0.001 from 0 stays in (0, 1): no denormals, no overflow.
// Returns the seconds of `iterations` passes of kFma256Chains (kFma512Chains) FMAs.
constexpr int kFma256Chains = 12;  // of 16 registers; 5-cycle latency x 2 units = 10 in flight
constexpr int kFma512Chains = 16;  // 4-cycle latency x 2 units = 8 in flight

__attribute__((target("avx2,fma"))) double Fma256Seconds(long iterations) {
  const __m256 scale = _mm256_set1_ps(0.999f), shift = _mm256_set1_ps(0.001f);
  long counter = iterations;
  const double start = Now();
  __asm__ volatile(
      "vxorps %%ymm0, %%ymm0, %%ymm0\n\t"
      "vxorps %%ymm1, %%ymm1, %%ymm1\n\t"
      "vxorps %%ymm2, %%ymm2, %%ymm2\n\t"
      "vxorps %%ymm3, %%ymm3, %%ymm3\n\t"
      "vxorps %%ymm4, %%ymm4, %%ymm4\n\t"
      "vxorps %%ymm5, %%ymm5, %%ymm5\n\t"
      "vxorps %%ymm6, %%ymm6, %%ymm6\n\t"
      "vxorps %%ymm7, %%ymm7, %%ymm7\n\t"
      "vxorps %%ymm8, %%ymm8, %%ymm8\n\t"
      "vxorps %%ymm9, %%ymm9, %%ymm9\n\t"
      "vxorps %%ymm10, %%ymm10, %%ymm10\n\t"
      "vxorps %%ymm11, %%ymm11, %%ymm11\n\t"
      "1:\n\t"
      "vfmadd213ps %[shift], %[scale], %%ymm0\n\t"
      "vfmadd213ps %[shift], %[scale], %%ymm1\n\t"
      "vfmadd213ps %[shift], %[scale], %%ymm2\n\t"
      "vfmadd213ps %[shift], %[scale], %%ymm3\n\t"
      "vfmadd213ps %[shift], %[scale], %%ymm4\n\t"
      "vfmadd213ps %[shift], %[scale], %%ymm5\n\t"
      "vfmadd213ps %[shift], %[scale], %%ymm6\n\t"
      "vfmadd213ps %[shift], %[scale], %%ymm7\n\t"
      "vfmadd213ps %[shift], %[scale], %%ymm8\n\t"
      "vfmadd213ps %[shift], %[scale], %%ymm9\n\t"
      "vfmadd213ps %[shift], %[scale], %%ymm10\n\t"
      "vfmadd213ps %[shift], %[scale], %%ymm11\n\t"
      "dec %[counter]\n\t"
      "jnz 1b\n\t"
      "vzeroupper\n\t"
      : [counter] "+r"(counter)
      : [scale] "x"(scale), [shift] "x"(shift)
      : "cc", "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9",
        "xmm10", "xmm11");
  return Now() - start;
}

__attribute__((target("avx512f"))) double Fma512Seconds(long iterations) {
  const __m512 scale = _mm512_set1_ps(0.999f), shift = _mm512_set1_ps(0.001f);
  long counter = iterations;
  const double start = Now();
  __asm__ volatile(
      "vpxord %%zmm0, %%zmm0, %%zmm0\n\t"
      "vpxord %%zmm1, %%zmm1, %%zmm1\n\t"
      "vpxord %%zmm2, %%zmm2, %%zmm2\n\t"
      "vpxord %%zmm3, %%zmm3, %%zmm3\n\t"
      "vpxord %%zmm4, %%zmm4, %%zmm4\n\t"
      "vpxord %%zmm5, %%zmm5, %%zmm5\n\t"
      "vpxord %%zmm6, %%zmm6, %%zmm6\n\t"
      "vpxord %%zmm7, %%zmm7, %%zmm7\n\t"
      "vpxord %%zmm8, %%zmm8, %%zmm8\n\t"
      "vpxord %%zmm9, %%zmm9, %%zmm9\n\t"
      "vpxord %%zmm10, %%zmm10, %%zmm10\n\t"
      "vpxord %%zmm11, %%zmm11, %%zmm11\n\t"
      "vpxord %%zmm12, %%zmm12, %%zmm12\n\t"
      "vpxord %%zmm13, %%zmm13, %%zmm13\n\t"
      "vpxord %%zmm14, %%zmm14, %%zmm14\n\t"
      "vpxord %%zmm15, %%zmm15, %%zmm15\n\t"
      "1:\n\t"
      "vfmadd213ps %[shift], %[scale], %%zmm0\n\t"
      "vfmadd213ps %[shift], %[scale], %%zmm1\n\t"
      "vfmadd213ps %[shift], %[scale], %%zmm2\n\t"
      "vfmadd213ps %[shift], %[scale], %%zmm3\n\t"
      "vfmadd213ps %[shift], %[scale], %%zmm4\n\t"
      "vfmadd213ps %[shift], %[scale], %%zmm5\n\t"
      "vfmadd213ps %[shift], %[scale], %%zmm6\n\t"
      "vfmadd213ps %[shift], %[scale], %%zmm7\n\t"
      "vfmadd213ps %[shift], %[scale], %%zmm8\n\t"
      "vfmadd213ps %[shift], %[scale], %%zmm9\n\t"
      "vfmadd213ps %[shift], %[scale], %%zmm10\n\t"
      "vfmadd213ps %[shift], %[scale], %%zmm11\n\t"
      "vfmadd213ps %[shift], %[scale], %%zmm12\n\t"
      "vfmadd213ps %[shift], %[scale], %%zmm13\n\t"
      "vfmadd213ps %[shift], %[scale], %%zmm14\n\t"
      "vfmadd213ps %[shift], %[scale], %%zmm15\n\t"
      "dec %[counter]\n\t"
      "jnz 1b\n\t"
      "vzeroupper\n\t"
      : [counter] "+r"(counter)
      : [scale] "v"(scale), [shift] "v"(shift)
      : "cc", "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9",
        "xmm10", "xmm11", "xmm12", "xmm13", "xmm14", "xmm15");
  return Now() - start;
}

template <typename Run>
double Fastest(const Run& run) {
  double fastest = 1e30;
  for (int r = 0; r < kRepetitions; ++r) fastest = std::min(fastest, run());
  return fastest;
}

}  // namespace

std::string CpuPeak::Describe() const {
  return absl::StrFormat(
      "%d FLOP/cycle (%s: %d lanes x %d FMA unit%s x 2) x %.2f GHz = %.1f "
      "GFLOP/s a core",
      FlopsPerCycle(), VectorIsaName(isa), fp32_lanes, fma_units, fma_units == 1 ? "" : "s",
      clock_hz / 1e9, FlopsPerCore() / 1e9);
}

double MeasureClockHz() {
  constexpr long kIterations = 100000;  // 1.6M cycles: about 0.5 ms at 3 GHz
  DependentAddSeconds(kIterations);     // wakes the core from a low-power state
  const double seconds = Fastest([] { return DependentAddSeconds(kIterations); });
  return 16.0 * kIterations / seconds;
}

int MeasureFmaUnits(VectorIsa isa, double clock_hz) {
  if (isa < VectorIsa::kAvx2 || clock_hz <= 0) return 1;
  constexpr long kIterations = 100000;
  const bool wide = isa >= VectorIsa::kAvx512;
  const double fmas = static_cast<double>(wide ? kFma512Chains : kFma256Chains) * kIterations;
  auto run = [wide] { return wide ? Fma512Seconds(kIterations) : Fma256Seconds(kIterations); };
  run();  // wakes the wide units (some cores power them down)
  // The best of many runs: a core shares its units with its SMT sibling, and a busy
  // sibling (another process, or this one's spinning threads) halves what one run sees.
  double best_per_cycle = 0;
  for (int repetition = 0; repetition < 3 * kRepetitions; ++repetition) {
    best_per_cycle = std::max(best_per_cycle, fmas / run() / clock_hz);
  }
  // One unit cannot exceed 1 a cycle (a few percent more with the clock's error); two
  // measure 1.6-2.0 on a quiet core.
  return best_per_cycle >= 1.25 ? 2 : 1;
}

int CpuPeak::Bf16FlopsPerCycle() const {
  if (bf16_isa >= VectorIsa::kAmxBf16) return 1024;
  if (bf16_isa >= VectorIsa::kAvx512Bf16) return 2 * FlopsPerCycle();
  return FlopsPerCycle();
}

const CpuPeak& CpuPeakOfThisMachine() {
  static const CpuPeak* const peak = [] {
    auto* p = new CpuPeak;
    p->isa = BestFp32Isa(CpuFeaturesOfThisMachine());
    p->bf16_isa = BestVectorIsa(CpuFeaturesOfThisMachine());
    p->fp32_lanes = Fp32Lanes(p->isa);
    p->clock_hz = MeasureClockHz();
    p->fma_units = MeasureFmaUnits(p->isa, p->clock_hz);
    return p;
  }();
  return *peak;
}

}  // namespace mtrain::cpu
