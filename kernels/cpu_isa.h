// Which vector instruction set the CPU kernels run, chosen once per process.
//
// The project compiles for x86-64-v2 (SSE4.2) so that its binaries run on every x86-64
// server. The kernels whose loops are bound by arithmetic (GeLU, SwiGLU, LayerNorm, AdamW
// and the attention core) are built twice more, for AVX2 and for AVX-512, and pick a build
// at run time: a function marked MTRAIN_TARGET_AVX2 or MTRAIN_TARGET_AVX512 is compiled for
// that ISA together with the OpenMP loops outlined from it, and the per-element work it
// calls is always_inline so that it is compiled there too.
//
// Every build gives the same bits: no fused multiply-adds (GCC's AVX-512 target implies
// FMA, so these kernels are compiled with -ffp-contract=off: nothing is contracted), no
// reassociation (no -ffast-math), and every reduction written with an explicit order.
// Tests compare the builds bit for bit. On an Intel Xeon the AVX-512 builds of GeLU and
// SwiGLU run 2-2.5x faster than the AVX2 ones (docs/PERFORMANCE.md, issue 32).
#ifndef MTRAIN_KERNELS_CPU_ISA_H_
#define MTRAIN_KERNELS_CPU_ISA_H_

#include <optional>

namespace mtrain::cpu {

// The kernels' builds, weakest first.
enum class KernelIsa { kGeneric, kAvx2, kAvx512 };

// "generic", "avx2", "avx512".
const char* KernelIsaName(KernelIsa isa);

// The best build this CPU runs (AVX-512 needs F, BW, DQ and VL with the OS saving their
// registers; AVX2 needs AVX2), capped by MTRAIN_CPU_ISA=generic or =avx2 in the
// environment (for comparing builds). Checked once.
KernelIsa CpuKernelIsa();

// The best build this CPU can run, whatever the environment says.
KernelIsa CpuSupportedKernelIsa();

// Tests only: makes CpuKernelIsa return `isa` (which must be at most
// CpuSupportedKernelIsa) until called with std::nullopt, which restores the detected one.
void OverrideCpuKernelIsaForTesting(std::optional<KernelIsa> isa);

}  // namespace mtrain::cpu

#define MTRAIN_TARGET_AVX2 __attribute__((target("avx2")))
#define MTRAIN_TARGET_AVX512 __attribute__((target("avx2,avx512f,avx512bw,avx512dq,avx512vl")))
#define MTRAIN_ALWAYS_INLINE inline __attribute__((always_inline))
#define MTRAIN_ALWAYS_INLINE_LAMBDA __attribute__((always_inline))

#endif  // MTRAIN_KERNELS_CPU_ISA_H_
