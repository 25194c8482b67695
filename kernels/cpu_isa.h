// Which vector instruction set the CPU kernels run, chosen once per process.
//
// The project compiles for x86-64-v2 (SSE4.2) so that its binaries run on every x86-64
// server. The kernels whose loops are bound by arithmetic (GeLU, LayerNorm, AdamW and the
// attention core) are built a second time for AVX2 and pick a build at run time: a function
// marked MTRAIN_TARGET_AVX2 is compiled for AVX2 together with the OpenMP loops outlined from
// it, and the per-element work it calls is always_inline so that it is compiled there too.
//
// Both builds give the same bits: AVX2 without FMA (target("avx2") does not enable it, and
// without FMA instructions nothing is contracted), no reassociation (no -ffast-math), and
// every reduction written with an explicit order. Tests compare the two builds bit for bit.
#ifndef MTRAIN_KERNELS_CPU_ISA_H_
#define MTRAIN_KERNELS_CPU_ISA_H_

#include <optional>

namespace mtrain::cpu {

// True where the CPU has AVX2, unless MTRAIN_CPU_ISA=generic is set in the environment
// (which forces the x86-64-v2 builds, for comparing the two). Checked once.
bool CpuKernelsUseAvx2();

// Tests only: makes CpuKernelsUseAvx2 return `avx2` (true only where the CPU has AVX2) until
// called with std::nullopt, which restores the detected choice.
void OverrideCpuKernelsIsaForTesting(std::optional<bool> avx2);

}  // namespace mtrain::cpu

#define MTRAIN_TARGET_AVX2 __attribute__((target("avx2")))
#define MTRAIN_ALWAYS_INLINE inline __attribute__((always_inline))
#define MTRAIN_ALWAYS_INLINE_LAMBDA __attribute__((always_inline))

#endif  // MTRAIN_KERNELS_CPU_ISA_H_
