// The one place that decides which GEMM kernel the CPU engine runs.
//
// The library is OpenBLAS (Debian's DYNAMIC_ARCH build, OpenMP threading: WORKSPACE's
// `system_openblas`). It was chosen by measurement (docs/PERFORMANCE.md, "Which GEMM
// library"): on AMD Zen 3 and Zen 4, at the model's shapes, it is within a few percent of
// BLIS 0.9 and of PyTorch's MKL, and ahead of oneDNN 2.6's sgemm; on Intel with AVX-512 its
// SkylakeX kernel brought the engine to PyTorch's speed (issue 32). What it does badly is
// choose: it picks its kernel from a table of processor model numbers, and Debian's 0.3.21
// runs its SSE3 `Prescott` kernel, 3-4x slower, on any processor newer than its table (an
// Intel Xeon of model 207 with AVX-512, for one).
//
// So the kernel is chosen here from the processor's features (cpu_features.h): AVX-512 ->
// SkylakeX, AVX2 with FMA -> Zen on AMD and Haswell elsewhere, AVX -> SandyBridge; the
// library's own choice is kept when it is at least as good, and never replaced by a kernel
// the library was not built with. OpenBLAS reads its kernel when it is loaded (before
// main); re-selecting it runs its own start-up again with OPENBLAS_CORETYPE set (its
// documented override), before anything calls a GEMM: this file does it from a static
// initialiser, at load time, when no thread exists yet. A user's own OPENBLAS_CORETYPE is
// respected (and warned about when weaker than the processor).
//
//   const GemmKernelChoice& gemm = EnsureBestGemmKernel();
//   std::cerr << gemm.Describe() << "\n";
//   if (!gemm.Warning().empty()) std::cerr << "warning: " << gemm.Warning() << "\n";
#ifndef MTRAIN_KERNELS_CPU_GEMM_LIBRARY_H_
#define MTRAIN_KERNELS_CPU_GEMM_LIBRARY_H_

#include <string>

#include "kernels/cpu_features.h"

namespace mtrain::cpu {

struct GemmKernelChoice {
  std::string library;  // "OpenBLAS 0.3.21"
  std::string kernel;   // the kernel (OpenBLAS core) it runs now: "SkylakeX"
  VectorIsa kernel_isa = VectorIsa::kSse;
  VectorIsa cpu_isa = VectorIsa::kSse;  // what an fp32 GEMM could use here (BestFp32Isa)
  std::string library_choice;           // the kernel the library chose by itself: "Prescott"
  // How `kernel` was reached: "the library's own choice", "forced from Prescott by the
  // processor's features", "OPENBLAS_CORETYPE=... in the environment".
  std::string how;

  bool WeakerThanCpu() const { return kernel_isa < cpu_isa; }
  // "OpenBLAS 0.3.21, kernel SkylakeX (avx512; forced from Prescott by the processor's
  // features), CPU avx512 (INTEL(R) XEON(R) ...)"
  std::string Describe() const;
  // Empty unless WeakerThanCpu(): what is lost and what to do.
  std::string Warning() const;
};

// The ISA an OpenBLAS core's fp32 kernels use ("SkylakeX" -> kAvx512, "Prescott" -> kSse).
// Unknown names count as kSse.
VectorIsa OpenBlasCoreIsa(const std::string& core);

// The OpenBLAS core this processor's features call for, whatever its model number.
std::string OpenBlasCoreFor(const CpuFeatures& cpu);

// Makes OpenBLAS run its best kernel for this processor (once per process; later calls
// return the same choice) and says what it runs. Must not race with a GEMM: this file
// calls it before main.
const GemmKernelChoice& EnsureBestGemmKernel();

// Tests only: runs OpenBLAS's kernel choice again with `core` (which must be in the
// library); true when it now runs `core`. EnsureBestGemmKernel's report is not updated:
// call this again with its kernel to go back.
bool ReselectGemmKernelForTesting(const std::string& core);

}  // namespace mtrain::cpu

#endif  // MTRAIN_KERNELS_CPU_GEMM_LIBRARY_H_
