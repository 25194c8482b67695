// What the processor can do, read from cpuid (and xgetbv: what the OS saves on a context
// switch), never from its model number: the GEMM library choice (cpu_gemm_library.h) and
// the peak FLOP/s (cpu_peak.h) follow from these features alone, so a processor released
// after the libraries were built is served by what it reports, not by a table of models.
//
//   const CpuFeatures& cpu = CpuFeaturesOfThisMachine();
//   if (BestVectorIsa(cpu) >= VectorIsa::kAvx512) ...
//   std::cout << cpu.model_name << ": " << cpu.FlagList() << "\n";
#ifndef MTRAIN_KERNELS_CPU_FEATURES_H_
#define MTRAIN_KERNELS_CPU_FEATURES_H_

#include <string>

namespace mtrain::cpu {

struct CpuFeatures {
  std::string vendor;      // "GenuineIntel", "AuthenticAMD", ...
  std::string model_name;  // the brand string: "AMD EPYC 7B13", "INTEL(R) XEON(R) ..."
  int family = 0;          // display family and model (base plus extended fields)
  int model = 0;

  // Instructions the processor has AND whose register state the OS saves (a feature the
  // OS does not enable is reported false: using it would fault).
  bool sse42 = false;
  bool avx = false;
  bool fma = false;  // FMA3
  bool avx2 = false;
  bool avx512f = false;
  bool avx512dq = false;
  bool avx512cd = false;
  bool avx512bw = false;
  bool avx512vl = false;
  bool avx512_vnni = false;
  bool avx512_bf16 = false;
  bool avx512_fp16 = false;
  bool avx_vnni = false;
  // AMX tiles: the OS must also grant each process the tile state (Linux: arch_prctl
  // ARCH_REQ_XCOMP_PERM), which the library using them requests itself.
  bool amx_tile = false;
  bool amx_bf16 = false;
  bool amx_int8 = false;

  // The flags above that are set, space separated, in the names /proc/cpuinfo uses.
  std::string FlagList() const;
};

// The vector instruction sets that matter to a GEMM, weakest first. Each includes the ones
// before it.
enum class VectorIsa {
  kSse,         // 128-bit, no FMA (x86-64 baseline and -v2)
  kAvx,         // 256-bit, separate multiply and add
  kAvx2,        // 256-bit with FMA3 (Haswell, Zen 1-3)
  kAvx512,      // 512-bit F + DQ + CD + BW + VL with FMA (Skylake-SP and later, Zen 4+)
  kAvx512Bf16,  // plus bf16 dot products (Cooper Lake, Zen 4+)
  kAmxBf16,     // plus bf16 tile multiplies (Sapphire Rapids and later)
};

// "sse4.2", "avx", "avx2", "avx512", "avx512_bf16", "amx_bf16".
const char* VectorIsaName(VectorIsa isa);

// fp32 lanes of the ISA's widest register (4, 8 or 16).
int Fp32Lanes(VectorIsa isa);

// The best ISA `cpu` has: the AVX-512 levels need all of F, DQ, CD, BW and VL (what
// libraries' Skylake-SP kernels use), kAvx2 needs FMA too.
VectorIsa BestVectorIsa(const CpuFeatures& cpu);

// The ISA an fp32 GEMM can use: bf16 and AMX do not speed up fp32, so at most kAvx512.
VectorIsa BestFp32Isa(const CpuFeatures& cpu);

// Reads cpuid and xgetbv. Not cached; see CpuFeaturesOfThisMachine.
CpuFeatures ReadCpuFeatures();

// ReadCpuFeatures, once per process.
const CpuFeatures& CpuFeaturesOfThisMachine();

}  // namespace mtrain::cpu

#endif  // MTRAIN_KERNELS_CPU_FEATURES_H_
