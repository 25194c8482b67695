#include "kernels/cpu_bf16_gemm.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <limits>
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

using kernel_testing::RandomFloatVector;

float Rounded(float x) { return Bf16ToFloat(RoundToBf16(x)); }

TEST(Bf16RoundingTest, RoundsToNearestWithTiesToEven) {
  EXPECT_EQ(RoundToBf16(1.0f), 0x3f80);
  EXPECT_EQ(RoundToBf16(-2.0f), 0xc000);
  // 1 + 2^-8 lies halfway between 1 and 1 + 2^-7: ties go to the even neighbour, 1.
  EXPECT_EQ(Rounded(1.0f + 0x1p-8f), 1.0f);
  // 1 + 3 * 2^-8 lies halfway between 1 + 2^-7 and 1 + 2^-6: the even one is 1 + 2^-6.
  EXPECT_EQ(Rounded(1.0f + 3 * 0x1p-8f), 1.0f + 0x1p-6f);
  // Just above halfway rounds up.
  EXPECT_EQ(Rounded(1.0f + 0x1p-8f + 0x1p-20f), 1.0f + 0x1p-7f);
  EXPECT_EQ(Rounded(std::numeric_limits<float>::infinity()),
            std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(Rounded(std::numeric_limits<float>::quiet_NaN())));
  // A NaN whose payload sits in the dropped bits must not become infinity.
  uint32_t low_payload_nan_bits = 0x7f800001u;
  float low_payload_nan;
  std::memcpy(&low_payload_nan, &low_payload_nan_bits, sizeof(float));
  EXPECT_TRUE(std::isnan(Rounded(low_payload_nan)));
  // Relative error at most half a unit in the last place: 2^-8 (8 significant bits).
  std::mt19937_64 rng(1);
  for (float x : RandomFloatVector(1000, rng, -100.0, 100.0)) {
    EXPECT_LE(std::abs(Rounded(x) - x), std::abs(x) * 0x1p-8f) << x;
  }
}

TEST(CpuBf16SupportTest, NeedsAvx512Bf16OrAmx) {
  CpuFeatures cpu;
  cpu.model_name = "Test CPU";
  cpu.avx = cpu.avx2 = cpu.fma = true;
  absl::Status status = CpuBf16Support(cpu);
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(status.message().find("precision: PRECISION_BF16"), std::string::npos) << status;
  EXPECT_NE(status.message().find("AVX512_BF16"), std::string::npos) << status;
  EXPECT_NE(status.message().find("Test CPU"), std::string::npos) << status;
  cpu.avx512f = cpu.avx512dq = cpu.avx512cd = cpu.avx512bw = cpu.avx512vl = true;
  EXPECT_FALSE(CpuBf16Support(cpu).ok());  // AVX-512 without its bf16 instructions
  cpu.avx512_bf16 = true;
  EXPECT_TRUE(CpuBf16Support(cpu).ok());
  cpu.avx512_bf16 = false;
  cpu.amx_tile = cpu.amx_bf16 = true;
  EXPECT_TRUE(CpuBf16Support(cpu).ok());
}

// C = alpha op(A) op(B) + beta C in double from the bf16-rounded operands: what Bf16Gemm
// computes up to its fp32 sums.
std::vector<double> Reference(bool ta, bool tb, int m, int n, int k, float alpha,
                              const std::vector<float>& a, int lda, const std::vector<float>& b,
                              int ldb, float beta, const std::vector<float>& c, int ldc) {
  std::vector<double> out(c.begin(), c.end());
  for (int i = 0; i < m; ++i) {
    for (int j = 0; j < n; ++j) {
      double sum = 0;
      for (int p = 0; p < k; ++p) {
        const float av =
            ta ? a[static_cast<size_t>(p) * lda + i] : a[static_cast<size_t>(i) * lda + p];
        const float bv =
            tb ? b[static_cast<size_t>(j) * ldb + p] : b[static_cast<size_t>(p) * ldb + j];
        sum += static_cast<double>(Rounded(av)) * Rounded(bv);
      }
      const size_t at = static_cast<size_t>(i) * ldc + j;
      out[at] = alpha * sum + (beta == 0.0f ? 0.0 : beta * static_cast<double>(c[at]));
    }
  }
  return out;
}

TEST(Bf16GemmTest, MatchesTheRoundedOperandsProductInEveryLayout) {
  std::mt19937_64 rng(2);
  const int m = 37, n = 45, k = 70;
  for (const bool ta : {false, true}) {
    for (const bool tb : {false, true}) {
      for (const float beta : {0.0f, 1.0f, 0.5f}) {
        const float alpha = beta == 0.5f ? 0.25f : 1.0f;
        SCOPED_TRACE(testing::Message() << "ta " << ta << " tb " << tb << " beta " << beta);
        // Leading dimensions wider than the rows, as the row-sliced GEMMs pass them.
        const int lda = (ta ? m : k) + 3, ldb = (tb ? k : n) + 5, ldc = n + 2;
        const std::vector<float> a = RandomFloatVector(static_cast<size_t>(ta ? k : m) * lda, rng);
        const std::vector<float> b = RandomFloatVector(static_cast<size_t>(tb ? n : k) * ldb, rng);
        std::vector<float> c = RandomFloatVector(static_cast<size_t>(m) * ldc, rng);
        const std::vector<double> expected =
            Reference(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
        Bf16Gemm(ta, tb, m, n, k, alpha, a.data(), lda, b.data(), ldb, beta, c.data(), ldc);
        for (int i = 0; i < m; ++i) {
          for (int j = 0; j < n; ++j) {
            const size_t at = static_cast<size_t>(i) * ldc + j;
            ASSERT_NEAR(c[at], expected[at], 1e-4) << i << "," << j;
          }
        }
      }
    }
  }
}

// The linear layers follow the process's GEMM precision: bf16 products differ from fp32
// ones by the operands' rounding (at most 2^-8 relative each), not more.
TEST(Bf16GemmTest, LinearLayersFollowTheProcessPrecision) {
  std::mt19937_64 rng(3);
  const int M = 256, K = 128, N = 96;
  const std::vector<float> in = RandomFloatVector(static_cast<size_t>(M) * K, rng);
  const std::vector<float> weight = RandomFloatVector(static_cast<size_t>(N) * K, rng);
  const std::vector<float> bias = RandomFloatVector(N, rng);
  std::vector<float> fp32(static_cast<size_t>(M) * N), bf16(fp32.size());
  MatmulForward(in.data(), weight.data(), bias.data(), fp32.data(), M, K, N);
  SetGemmPrecision(GemmPrecision::kBf16);
  MatmulForward(in.data(), weight.data(), bias.data(), bf16.data(), M, K, N);
  std::vector<float> d_in(in.size(), 0.0f), d_weight(weight.size(), 0.0f);
  MatmulBackward<float>(fp32.data(), in.data(), weight.data(), d_in.data(), d_weight.data(),
                        nullptr, M, K, N);
  SetGemmPrecision(GemmPrecision::kFp32);
  double largest = 0, differs = 0;
  for (size_t i = 0; i < fp32.size(); ++i) {
    largest = std::max(largest, std::abs(static_cast<double>(bf16[i]) - fp32[i]));
    differs += bf16[i] != fp32[i];
  }
  EXPECT_GT(differs, fp32.size() / 2) << "the bf16 run did not round its operands";
  EXPECT_LT(largest, 0.05) << "sums of 128 products of values in [-1, 1]";
  // The backward's bf16 products against fp32 ones computed apart.
  std::vector<float> d_in_fp32(in.size(), 0.0f);
  MatmulBackward<float>(fp32.data(), in.data(), weight.data(), d_in_fp32.data(), nullptr, nullptr,
                        M, K, N);
  double largest_backward = 0;
  for (size_t i = 0; i < d_in.size(); ++i) {
    largest_backward =
        std::max(largest_backward, std::abs(static_cast<double>(d_in[i]) - d_in_fp32[i]));
  }
  EXPECT_GT(largest_backward, 0.0);
  EXPECT_LT(largest_backward, 0.5);
}

TEST(CpuPeakTest, NominalBf16PeakFollowsTheIsa) {
  CpuPeak peak;
  peak.fp32_lanes = 16;
  peak.fma_units = 2;
  peak.clock_hz = 2e9;
  peak.bf16_isa = VectorIsa::kAvx512;
  EXPECT_EQ(peak.Bf16FlopsPerCycle(), 64);  // no bf16 instructions: the fp32 peak
  peak.bf16_isa = VectorIsa::kAvx512Bf16;
  EXPECT_EQ(peak.Bf16FlopsPerCycle(), 128);
  peak.bf16_isa = VectorIsa::kAmxBf16;
  EXPECT_EQ(peak.Bf16FlopsPerCycle(), 1024);
  EXPECT_EQ(peak.Bf16FlopsPerCore(), 1024 * 2e9);
}

// The bf16 peak is an upper bound on this machine: one core's bf16 GEMM never beats it
// (so a bf16 job's MFU stays below 100%). Printed: what bf16 reaches against fp32 here.
TEST(Bf16GemmTest, OneCoreRateStaysBelowTheBf16Peak) {
  const absl::Status bf16 = CpuBf16Support(CpuFeaturesOfThisMachine());
  if (!bf16.ok()) GTEST_SKIP() << "no bf16 instructions here: " << bf16.message();
  SetCpuThreads(1);
  const int n = 768;
  std::mt19937_64 rng(4);
  const std::vector<float> in = RandomFloatVector(static_cast<size_t>(n) * n, rng);
  const std::vector<float> weight = RandomFloatVector(static_cast<size_t>(n) * n, rng);
  std::vector<float> out(static_cast<size_t>(n) * n);
  auto rate = [&](GemmPrecision precision) {
    SetGemmPrecision(precision);
    double fastest = 1e30;
    for (int repetition = 0; repetition < 6; ++repetition) {
      const auto start = std::chrono::steady_clock::now();
      MatmulForward<float>(in.data(), weight.data(), nullptr, out.data(), n, n, n);
      fastest = std::min(
          fastest, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    }
    SetGemmPrecision(GemmPrecision::kFp32);
    return 2.0 * n * n * n / fastest;
  };
  const double bf16_rate = rate(GemmPrecision::kBf16);
  const double fp32_rate = rate(GemmPrecision::kFp32);
  const CpuPeak& peak = CpuPeakOfThisMachine();
  std::printf("one core, %d^3: bf16 %.1f GFLOP/s (nominal peak %.1f), fp32 %.1f (peak %.1f)\n", n,
              bf16_rate / 1e9, peak.Bf16FlopsPerCore() / 1e9, fp32_rate / 1e9,
              peak.FlopsPerCore() / 1e9);
  EXPECT_LE(bf16_rate, 1.05 * peak.Bf16FlopsPerCore());
  SetCpuThreads(AvailableCores());
}

TEST(Bf16GemmTest, NamesItsImplementation) {
  EXPECT_FALSE(Bf16GemmImplementation(64, 64, 64).empty());
  std::cout << "bf16 matmul here: " << Bf16GemmImplementation(2048, 768, 256) << " ("
            << VectorIsaName(BestVectorIsa(CpuFeaturesOfThisMachine())) << ")\n";
}

}  // namespace
}  // namespace mtrain::cpu
