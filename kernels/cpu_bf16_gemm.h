// bf16 GEMMs for the CPU engine's `precision: PRECISION_BF16` (issue 32).
//
// As the CUDA engine's bf16 GEMMs do on tensor cores: the two operands are rounded to
// bfloat16 (to nearest, ties to even), their products summed in fp32, the result fp32.
// oneDNN's matmul computes them (AVX512_BF16 dot products, AMX tiles where the processor
// has them); everything else (normalisation, softmax, the optimizer with its fp32 master
// weights) stays fp32. A process chooses its GEMM precision once (the engine, at start):
// the linear layers' GEMMs (matmul.h) follow it.
//
//   RETURN_IF_ERROR(CpuBf16Support(CpuFeaturesOfThisMachine()));
//   SetGemmPrecision(GemmPrecision::kBf16);
#ifndef MTRAIN_KERNELS_CPU_BF16_GEMM_H_
#define MTRAIN_KERNELS_CPU_BF16_GEMM_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "kernels/cpu_features.h"

namespace mtrain::cpu {

// OK where `cpu` multiplies bf16 in hardware (AVX512_BF16 with AVX-512, or AMX-BF16);
// otherwise FailedPrecondition naming the precision, the processor and what it lacks.
absl::Status CpuBf16Support(const CpuFeatures& cpu);

// The precision of this process's fp32 linear-layer GEMMs. kFp32 unless set.
enum class GemmPrecision { kFp32, kBf16 };
void SetGemmPrecision(GemmPrecision precision);
GemmPrecision CurrentGemmPrecision();

// C[m, n] = alpha op(A) op(B) + beta C, row-major as Sgemm (cpu_gemm_library.h), with A and
// B rounded to bf16 first. Callable from inside an OpenMP parallel region (each thread
// keeps its own buffers and oneDNN primitives). Aborts if oneDNN refuses a valid shape
// (it has a reference implementation for every shape, so that is a broken installation).
void Bf16Gemm(bool transpose_a, bool transpose_b, int m, int n, int k, float alpha, const float* a,
              int lda, const float* b, int ldb, float beta, float* c, int ldc);

// The implementation oneDNN chose for a bf16 matmul of this shape ("brg:avx512_core_bf16"),
// for the engine's start line.
std::string Bf16GemmImplementation(int m, int n, int k);

// x rounded to the nearest bfloat16 (ties to even; NaN stays NaN), as its bits, and back.
uint16_t RoundToBf16(float x);
float Bf16ToFloat(uint16_t bits);

}  // namespace mtrain::cpu

#endif  // MTRAIN_KERNELS_CPU_BF16_GEMM_H_
