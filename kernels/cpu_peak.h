// The peak fp32 FLOP/s of this machine's cores, for MFU and the planner: FLOPs a cycle a
// core from the ISA (vector width, and the number of FMA units, measured) times the
// measured clock. Data-sheet clocks and FMA-unit counts vary by SKU and are not in cpuid,
// so both are measured (about 10 ms, once per process):
//   clock      a chain of dependent register adds, one a cycle on every x86-64 core
//   FMA units  independent FMAs on the widest vector registers, divided by the clock and
//              by what one unit does a cycle (2 x lanes), rounded to 1 or 2
// The peak is an upper bound by construction (a GEMM never issues more FMAs a cycle than
// the units take), so an MFU against it is never above 100% but for measurement noise.
//
//   const CpuPeak& peak = CpuPeakOfThisMachine();
//   double job_peak = peak.FlopsPerCore() * cores;
#ifndef MTRAIN_KERNELS_CPU_PEAK_H_
#define MTRAIN_KERNELS_CPU_PEAK_H_

#include <string>

#include "kernels/cpu_features.h"

namespace mtrain::cpu {

struct CpuPeak {
  VectorIsa isa = VectorIsa::kSse;  // the widest fp32 ISA (BestFp32Isa)
  int fp32_lanes = 4;
  // Vector multiply-adds a cycle: FMA units measured where the ISA has FMA; without FMA,
  // one multiply and one add a cycle count as one unit.
  int fma_units = 1;
  double clock_hz = 0;  // measured under load on one core

  int FlopsPerCycle() const { return 2 * fp32_lanes * fma_units; }
  double FlopsPerCore() const { return FlopsPerCycle() * clock_hz; }
  // The nominal bf16 peak, for the MFU of a job whose GEMMs run in bf16: AMX-BF16 tiles
  // multiply 16 x 32 by 32 x 16 in 16 cycles (1,024 FLOP a cycle); AVX512_BF16's dot
  // product does two multiply-adds a lane where an FMA does one (twice the fp32 rate);
  // without either, the fp32 peak. What a core reaches can be far below (PERFORMANCE.md).
  VectorIsa bf16_isa = VectorIsa::kSse;  // BestVectorIsa
  int Bf16FlopsPerCycle() const;
  double Bf16FlopsPerCore() const { return Bf16FlopsPerCycle() * clock_hz; }
  // "32 FLOP/cycle (avx2: 8 lanes x 2 FMA units x 2) x 3.49 GHz = 111.7 GFLOP/s a core"
  std::string Describe() const;
};

// Measures the clock (fastest of several short runs), in Hz.
double MeasureClockHz();

// Measures FMA units for `isa` against `clock_hz`: 1 or 2 (1 without FMA instructions).
int MeasureFmaUnits(VectorIsa isa, double clock_hz);

// Measured once per process, for this machine's BestFp32Isa.
const CpuPeak& CpuPeakOfThisMachine();

}  // namespace mtrain::cpu

#endif  // MTRAIN_KERNELS_CPU_PEAK_H_
