// The one place that decides which GEMM library and kernel the CPU engine runs.
//
// Two libraries, both Debian's (OpenMP threading): OpenBLAS (WORKSPACE's `system_openblas`)
// and oneDNN (`system_dnnl`). Chosen by measurement (docs/PERFORMANCE.md, issue 32): on
// AMD Zen 3 (AVX2) the two are within the machine's noise of each other at the model's
// shapes and OpenBLAS stays, the library every test's numerics were first checked with; on
// an Intel Xeon with AVX-512 oneDNN's sgemm is 5-10% faster at the linear layers' shapes
// and the engine's step 9-16% shorter, so processors with AVX-512 run their fp32 GEMMs
// (Sgemm below: the linear layers and the attention core) through oneDNN. Double-precision
// GEMMs (finite-difference tests) stay on OpenBLAS. MTRAIN_CPU_GEMM=openblas or =onednn
// overrides the choice (the start line says so).
//
// OpenBLAS chooses its kernel badly: it picks it from a table of processor model numbers,
// and Debian's 0.3.21 runs its SSE3 `Prescott` kernel, 3-4x slower, on any processor newer
// than its table (an Intel Xeon of model 207 with AVX-512, for one). So its kernel is
// chosen here from the processor's features (cpu_features.h): AVX-512 -> SkylakeX, AVX2
// with FMA -> Zen on AMD and Haswell elsewhere, AVX -> SandyBridge; the library's own
// choice is kept when it is at least as good, and never replaced by a kernel the library
// was not built with. OpenBLAS reads its kernel when it is loaded (before main);
// re-selecting it runs its own start-up again with OPENBLAS_CORETYPE set (its documented
// override), before anything calls a GEMM: this file does it from a static initialiser,
// at load time, when no thread exists yet. A user's own OPENBLAS_CORETYPE is respected
// (and warned about when weaker than the processor). oneDNN dispatches by cpuid features
// itself; its ISA is reported and checked the same way.
//
//   const GemmKernelChoice& gemm = EnsureBestGemmKernel();
//   std::cerr << gemm.Describe() << "\n";
//   if (!gemm.Warning().empty()) std::cerr << "warning: " << gemm.Warning() << "\n";
#ifndef MTRAIN_KERNELS_CPU_GEMM_LIBRARY_H_
#define MTRAIN_KERNELS_CPU_GEMM_LIBRARY_H_

#include <string>

#include "kernels/cpu_features.h"

namespace mtrain::cpu {

// Which library runs the fp32 GEMMs.
enum class Fp32GemmLibrary { kOpenBlas, kOneDnn };

struct GemmKernelChoice {
  // The library of the fp32 GEMMs (Sgemm) and the kernel it runs: "OpenBLAS 0.3.21" and
  // its core "SkylakeX", or "oneDNN 2.6.3" and its ISA "avx512_core_bf16".
  Fp32GemmLibrary fp32_library = Fp32GemmLibrary::kOpenBlas;
  std::string library;
  std::string kernel;
  VectorIsa kernel_isa = VectorIsa::kSse;
  // Why that library: "the processor's features (avx512)", "MTRAIN_CPU_GEMM=openblas in
  // the environment".
  std::string library_how;
  // OpenBLAS's own kernel, whichever library runs the fp32 GEMMs (it runs the rest).
  std::string openblas_library;  // "OpenBLAS 0.3.21"
  std::string openblas_kernel;   // the core it runs now: "SkylakeX"
  VectorIsa openblas_kernel_isa = VectorIsa::kSse;
  VectorIsa cpu_isa = VectorIsa::kSse;  // what an fp32 GEMM could use here (BestFp32Isa)
  std::string library_choice;           // the kernel OpenBLAS chose by itself: "Prescott"
  // How OpenBLAS's kernel was reached: "the library's own choice", "forced from Prescott by the
  // processor's features", "OPENBLAS_CORETYPE=... in the environment".
  std::string how;

  // Either library's kernel below what the processor can run.
  bool WeakerThanCpu() const { return kernel_isa < cpu_isa || openblas_kernel_isa < cpu_isa; }
  // "oneDNN 2.6.3, kernel avx512_core_bf16 (avx512; the processor's features (avx512)),
  // OpenBLAS 0.3.21 kernel SkylakeX for the rest (forced from Prescott by the processor's
  // features), CPU avx512_bf16 (Intel(R) Xeon(R) ...)"
  std::string Describe() const;
  // Empty unless WeakerThanCpu(): what is lost and what to do.
  std::string Warning() const;
};

// The ISA an OpenBLAS core's fp32 kernels use ("SkylakeX" -> kAvx512, "Prescott" -> kSse).
// Unknown names count as kSse.
VectorIsa OpenBlasCoreIsa(const std::string& core);

// The OpenBLAS core this processor's features call for, whatever its model number.
std::string OpenBlasCoreFor(const CpuFeatures& cpu);

// The library this processor's features call for (the measurement in the header comment):
// oneDNN with AVX-512, OpenBLAS otherwise.
Fp32GemmLibrary Fp32GemmLibraryFor(const CpuFeatures& cpu);

// The ISA of a oneDNN CPU ISA name ("avx512_core_bf16" -> kAvx512Bf16); kSse when unknown.
VectorIsa OneDnnIsa(const std::string& name);

// Row-major C[m, n] = alpha op(A) op(B) + beta C through the chosen library, op(X) = X or
// X^T. Inside an OpenMP parallel region it runs on the calling thread alone. A given
// library, shape and thread count gives the same bits every call.
void Sgemm(bool transpose_a, bool transpose_b, int m, int n, int k, float alpha, const float* a,
           int lda, const float* b, int ldb, float beta, float* c, int ldc);

// Makes OpenBLAS run its best kernel for this processor (once per process; later calls
// return the same choice) and says what it runs. Must not race with a GEMM: this file
// calls it before main.
const GemmKernelChoice& EnsureBestGemmKernel();

// Tests only: makes Sgemm run `library` until called again (not thread-safe; no GEMM may
// run meanwhile). EnsureBestGemmKernel's report is not updated.
void UseFp32GemmLibraryForTesting(Fp32GemmLibrary library);

// Tests only: runs OpenBLAS's kernel choice again with `core` (which must be in the
// library); true when it now runs `core`. EnsureBestGemmKernel's report is not updated:
// call this again with its kernel to go back.
bool ReselectGemmKernelForTesting(const std::string& core);

}  // namespace mtrain::cpu

#endif  // MTRAIN_KERNELS_CPU_GEMM_LIBRARY_H_
