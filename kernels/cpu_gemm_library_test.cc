// The GEMM library and kernel the engine runs fit the processor it runs on (issue 32): on a machine
// with AVX-512, a Prescott (SSE3) or Haswell (AVX2) kernel fails here, and a kernel that
// reaches less than half of one core's peak fails too. Run alone (tag "exclusive"), so that
// the rate is measured on an otherwise idle machine.
#include "kernels/cpu_gemm_library.h"

#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu_features.h"
#include "kernels/cpu_peak.h"
#include "kernels/cpu_threads.h"
#include "kernels/matmul.h"
#include "kernels/test_util.h"

namespace mtrain::cpu {
namespace {

CpuFeatures WithIsa(VectorIsa isa, const char* vendor) {
  CpuFeatures cpu;
  cpu.vendor = vendor;
  cpu.sse42 = true;
  cpu.avx = isa >= VectorIsa::kAvx;
  cpu.fma = cpu.avx2 = isa >= VectorIsa::kAvx2;
  cpu.avx512f = cpu.avx512dq = cpu.avx512cd = cpu.avx512bw = cpu.avx512vl =
      isa >= VectorIsa::kAvx512;
  cpu.avx512_bf16 = isa >= VectorIsa::kAvx512Bf16;
  cpu.amx_tile = cpu.amx_bf16 = isa >= VectorIsa::kAmxBf16;
  return cpu;
}

TEST(CpuFeaturesTest, BestIsaNeedsEveryPart) {
  EXPECT_EQ(BestVectorIsa(WithIsa(VectorIsa::kAmxBf16, "GenuineIntel")), VectorIsa::kAmxBf16);
  EXPECT_EQ(BestFp32Isa(WithIsa(VectorIsa::kAmxBf16, "GenuineIntel")), VectorIsa::kAvx512);
  CpuFeatures partial = WithIsa(VectorIsa::kAvx512, "GenuineIntel");
  partial.avx512bw = false;  // Knights Landing: F and CD without BW/VL/DQ
  EXPECT_EQ(BestVectorIsa(partial), VectorIsa::kAvx2);
  CpuFeatures no_fma = WithIsa(VectorIsa::kAvx2, "GenuineIntel");
  no_fma.fma = false;
  EXPECT_EQ(BestVectorIsa(no_fma), VectorIsa::kAvx);
}

// The processor: an Intel Xeon of a model number newer than the library's table.
TEST(CpuGemmLibraryTest, CoreFollowsFeaturesNotModelNumber) {
  CpuFeatures xeon = WithIsa(VectorIsa::kAvx512Bf16, "GenuineIntel");
  xeon.family = 6;
  xeon.model = 207;
  EXPECT_EQ(OpenBlasCoreFor(xeon), "SkylakeX");
  EXPECT_EQ(OpenBlasCoreFor(WithIsa(VectorIsa::kAvx512, "AuthenticAMD")), "SkylakeX");
  EXPECT_EQ(OpenBlasCoreFor(WithIsa(VectorIsa::kAvx2, "AuthenticAMD")), "Zen");
  EXPECT_EQ(OpenBlasCoreFor(WithIsa(VectorIsa::kAvx2, "GenuineIntel")), "Haswell");
  EXPECT_EQ(OpenBlasCoreFor(WithIsa(VectorIsa::kAvx, "GenuineIntel")), "SandyBridge");
  EXPECT_EQ(OpenBlasCoreFor(WithIsa(VectorIsa::kSse, "GenuineIntel")), "Prescott");
}

TEST(CpuGemmLibraryTest, CoreIsaTable) {
  EXPECT_EQ(OpenBlasCoreIsa("Prescott"), VectorIsa::kSse);
  EXPECT_EQ(OpenBlasCoreIsa("Nehalem"), VectorIsa::kSse);
  EXPECT_EQ(OpenBlasCoreIsa("Sandybridge"), VectorIsa::kAvx);  // OpenBLAS's own spelling
  EXPECT_EQ(OpenBlasCoreIsa("Haswell"), VectorIsa::kAvx2);
  EXPECT_EQ(OpenBlasCoreIsa("Zen"), VectorIsa::kAvx2);
  EXPECT_EQ(OpenBlasCoreIsa("SkylakeX"), VectorIsa::kAvx512);
  EXPECT_EQ(OpenBlasCoreIsa("COOPERLAKE"), VectorIsa::kAvx512);
}

// The check that would have caught issue 32 on the machine it runs on.
TEST(CpuGemmLibraryTest, KernelMatchesThisProcessor) {
  const GemmKernelChoice& choice = EnsureBestGemmKernel();
  const CpuFeatures& cpu = CpuFeaturesOfThisMachine();
  std::printf("processor: %s (%s family %d model %d): %s\nGEMM: %s\n", cpu.model_name.c_str(),
              cpu.vendor.c_str(), cpu.family, cpu.model, cpu.FlagList().c_str(),
              choice.Describe().c_str());
  EXPECT_EQ(choice.cpu_isa, BestFp32Isa(cpu));
  EXPECT_FALSE(choice.WeakerThanCpu()) << choice.Warning();
  EXPECT_TRUE(choice.Warning().empty());
  // OpenBLAS really runs the reported kernel, and the fp32 library is the one the
  // processor's features call for (unless the environment says otherwise).
  EXPECT_EQ(choice.openblas_kernel, openblas_get_corename());
  if (std::getenv("MTRAIN_CPU_GEMM") == nullptr) {
    EXPECT_EQ(choice.fp32_library, Fp32GemmLibraryFor(cpu));
  }
  if (choice.fp32_library == Fp32GemmLibrary::kOneDnn) {
    EXPECT_EQ(choice.library.rfind("oneDNN ", 0), 0u) << choice.library;
    EXPECT_GE(OneDnnIsa(choice.kernel), choice.cpu_isa) << choice.kernel;
  } else {
    EXPECT_EQ(choice.kernel, choice.openblas_kernel);
  }
}

TEST(CpuGemmLibraryTest, LibraryFollowsFeatures) {
  EXPECT_EQ(Fp32GemmLibraryFor(WithIsa(VectorIsa::kAvx512Bf16, "GenuineIntel")),
            Fp32GemmLibrary::kOneDnn);
  EXPECT_EQ(Fp32GemmLibraryFor(WithIsa(VectorIsa::kAvx512, "GenuineIntel")),
            Fp32GemmLibrary::kOneDnn);
  EXPECT_EQ(Fp32GemmLibraryFor(WithIsa(VectorIsa::kAvx2, "AuthenticAMD")),
            Fp32GemmLibrary::kOpenBlas);
  EXPECT_EQ(Fp32GemmLibraryFor(WithIsa(VectorIsa::kSse, "GenuineIntel")),
            Fp32GemmLibrary::kOpenBlas);
  EXPECT_EQ(OneDnnIsa("avx512_core_bf16"), VectorIsa::kAvx512Bf16);
  EXPECT_EQ(OneDnnIsa("avx512_core"), VectorIsa::kAvx512);
  EXPECT_EQ(OneDnnIsa("avx2"), VectorIsa::kAvx2);
  EXPECT_EQ(OneDnnIsa("avx512_mic"), VectorIsa::kSse);
}

// Both libraries compute the same products (to rounding) at every transpose, with alpha and
// beta, at sizes that are not multiples of any block; each gives the same bits when called
// again.
TEST(CpuGemmLibraryTest, BothLibrariesAgree) {
  const int m = 67, n = 129, k = 333;
  std::mt19937_64 rng(11);
  const std::vector<float> a = kernel_testing::RandomFloatVector(m * k, rng);
  const std::vector<float> b = kernel_testing::RandomFloatVector(k * n, rng);
  const std::vector<float> c0 = kernel_testing::RandomFloatVector(m * n, rng);
  for (const bool ta : {false, true}) {
    for (const bool tb : {false, true}) {
      auto product = [&](Fp32GemmLibrary library) {
        UseFp32GemmLibraryForTesting(library);
        std::vector<float> c = c0;
        Sgemm(ta, tb, m, n, k, 0.5f, a.data(), ta ? m : k, b.data(), tb ? k : n, 2.0f, c.data(), n);
        return c;
      };
      const std::vector<float> openblas = product(Fp32GemmLibrary::kOpenBlas);
      const std::vector<float> onednn = product(Fp32GemmLibrary::kOneDnn);
      EXPECT_EQ(onednn, product(Fp32GemmLibrary::kOneDnn));
      for (int i = 0; i < m * n; ++i) {
        ASSERT_NEAR(openblas[i], onednn[i], 1e-4) << "ta " << ta << " tb " << tb << " at " << i;
      }
    }
  }
  UseFp32GemmLibraryForTesting(EnsureBestGemmKernel().fp32_library);
}

double OneCoreSgemmRate(int n) {
  std::mt19937_64 rng(7);
  const std::vector<float> in = kernel_testing::RandomFloatVector(static_cast<size_t>(n) * n, rng);
  const std::vector<float> weight = kernel_testing::RandomFloatVector(in.size(), rng);
  std::vector<float> out(in.size());
  double fastest = 1e30;
  for (int repetition = 0; repetition < 8; ++repetition) {
    const auto start = std::chrono::steady_clock::now();
    MatmulForward<float>(in.data(), weight.data(), nullptr, out.data(), n, n, n);
    fastest = std::min(
        fastest, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  return 2.0 * n * n * n / fastest;
}

TEST(CpuGemmLibraryTest, OneCoreSgemmReachesHalfOfTheIsaPeak) {
  SetCpuThreads(1);
  const CpuPeak& peak = CpuPeakOfThisMachine();
  const double rate = OneCoreSgemmRate(768);
  std::printf("one core: SGEMM 768^3 %.1f GFLOP/s; peak %s; %.0f%% of it\n", rate / 1e9,
              peak.Describe().c_str(), 100 * rate / peak.FlopsPerCore());
  EXPECT_GE(peak.clock_hz, 0.5e9);
  EXPECT_LE(peak.clock_hz, 7e9);
  EXPECT_GE(rate, 0.5 * peak.FlopsPerCore()) << EnsureBestGemmKernel().Describe();
  // A GEMM never beats the units it runs on: a peak below the measured rate is wrong.
  EXPECT_LE(rate, 1.05 * peak.FlopsPerCore());
}

// The mechanism that forces a kernel works on this machine too (where the library may
// already choose well): a weaker kernel really runs, gives the right products, and the
// best one comes back.
TEST(CpuGemmLibraryTest, KernelCanBeReselectedAndComputesTheSameProducts) {
  SetCpuThreads(1);
  const GemmKernelChoice& choice = EnsureBestGemmKernel();
  UseFp32GemmLibraryForTesting(Fp32GemmLibrary::kOpenBlas);  // the library being switched
  const int M = 67, K = 333, N = 129;
  std::mt19937_64 rng(3);
  const std::vector<float> in = kernel_testing::RandomFloatVector(M * K, rng);
  const std::vector<float> weight = kernel_testing::RandomFloatVector(N * K, rng);
  auto product = [&] {
    std::vector<float> out(M * N);
    MatmulForward<float>(in.data(), weight.data(), nullptr, out.data(), M, K, N);
    return out;
  };
  const std::vector<float> best = product();
  const double best_rate = OneCoreSgemmRate(512);
  ASSERT_TRUE(ReselectGemmKernelForTesting("Prescott"));
  EXPECT_STREQ(openblas_get_corename(), "Prescott");
  const std::vector<float> prescott = product();
  const double prescott_rate = OneCoreSgemmRate(512);
  ASSERT_TRUE(ReselectGemmKernelForTesting(choice.openblas_kernel));
  EXPECT_EQ(choice.openblas_kernel, openblas_get_corename());
  for (size_t i = 0; i < best.size(); ++i) EXPECT_NEAR(best[i], prescott[i], 1e-4) << i;
  std::printf("one core, 512^3: OpenBLAS %s %.1f GFLOP/s, Prescott %.1f GFLOP/s\n",
              choice.openblas_kernel.c_str(), best_rate / 1e9, prescott_rate / 1e9);
  if (choice.openblas_kernel_isa > VectorIsa::kSse) {
    EXPECT_GT(best_rate, 1.5 * prescott_rate);
  }
  UseFp32GemmLibraryForTesting(choice.fp32_library);
}

}  // namespace
}  // namespace mtrain::cpu
