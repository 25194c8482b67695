// The x86-64-v2, AVX2 and AVX-512 builds of every dispatched kernel (cpu_isa.h) give the
// same bits, on sizes that are and are not multiples of any vector width, with and without
// the OpenMP split.
#include "kernels/cpu_isa.h"

#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/adamw.h"
#include "kernels/gelu.h"
#include "kernels/layernorm.h"
#include "kernels/swiglu.h"
#include "kernels/test_util.h"

namespace mtrain::cpu {
namespace {

using kernel_testing::RandomFloatVector;

// Runs `kernel` (which fills its outputs) under each build this CPU runs and compares the
// outputs with the generic build's.
void ExpectSameBitsUnderBothBuilds(const std::function<std::vector<std::vector<float>>()>& kernel,
                                   const char* what) {
  OverrideCpuKernelIsaForTesting(KernelIsa::kGeneric);
  const std::vector<std::vector<float>> generic = kernel();
  for (const KernelIsa isa : {KernelIsa::kAvx2, KernelIsa::kAvx512}) {
    if (isa > CpuSupportedKernelIsa()) continue;
    OverrideCpuKernelIsaForTesting(isa);
    ASSERT_EQ(CpuKernelIsa(), isa);
    const std::vector<std::vector<float>> vector = kernel();
    ASSERT_EQ(generic.size(), vector.size());
    for (size_t i = 0; i < generic.size(); ++i) {
      ASSERT_EQ(generic[i].size(), vector[i].size());
      EXPECT_EQ(std::memcmp(generic[i].data(), vector[i].data(), generic[i].size() * sizeof(float)),
                0)
          << what << ", output " << i << ", " << KernelIsaName(isa) << " build";
    }
  }
  OverrideCpuKernelIsaForTesting(std::nullopt);
}

class CpuIsaTest : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override {
    if (CpuSupportedKernelIsa() == KernelIsa::kGeneric) {
      GTEST_SKIP() << "this CPU has no AVX2: only the generic build can run here";
    }
    if (CpuSupportedKernelIsa() < KernelIsa::kAvx512) {
      std::printf("this CPU has no AVX-512: comparing the AVX2 builds only\n");
    }
  }
};

TEST_P(CpuIsaTest, GeluBuildsAgree) {
  const size_t n = static_cast<size_t>(GetParam()) * 13;
  std::mt19937_64 rng(1);
  const std::vector<float> x = RandomFloatVector(n, rng, -6.0, 6.0);
  const std::vector<float> d_y = RandomFloatVector(n, rng);
  ExpectSameBitsUnderBothBuilds(
      [&] {
        std::vector<float> y(n), d_x(n, 0.5f);
        GeluForward(x.data(), y.data(), n);
        GeluBackward(d_y.data(), x.data(), d_x.data(), n);
        return std::vector<std::vector<float>>{y, d_x};
      },
      "GeLU");
}

TEST_P(CpuIsaTest, LayerNormBuildsAgree) {
  const int rows = GetParam();
  for (int C : {7, 64, 203}) {
    std::mt19937_64 rng(2);
    const size_t n = static_cast<size_t>(rows) * C;
    const std::vector<float> x = RandomFloatVector(n, rng, -3.0, 3.0);
    const std::vector<float> gamma = RandomFloatVector(C, rng);
    const std::vector<float> beta = RandomFloatVector(C, rng);
    const std::vector<float> d_y = RandomFloatVector(n, rng);
    ExpectSameBitsUnderBothBuilds(
        [&] {
          std::vector<float> y(n), mean(rows), rstd(rows), d_x(n, 0.25f), d_gamma(C, 0.0f),
              d_beta(C, 0.0f);
          LayerNormForward(x.data(), gamma.data(), beta.data(), y.data(), mean.data(), rstd.data(),
                           rows, C, 1e-5f);
          LayerNormBackward(d_y.data(), x.data(), gamma.data(), mean.data(), rstd.data(),
                            d_x.data(), d_gamma.data(), d_beta.data(), rows, C);
          return std::vector<std::vector<float>>{y, mean, rstd, d_x, d_gamma, d_beta};
        },
        "LayerNorm");
  }
}

TEST_P(CpuIsaTest, AdamWBuildsAgree) {
  const size_t n = static_cast<size_t>(GetParam()) * 1031;
  std::mt19937_64 rng(3);
  const std::vector<float> param = RandomFloatVector(n, rng);
  const std::vector<float> grad = RandomFloatVector(n, rng);
  ExpectSameBitsUnderBothBuilds(
      [&] {
        std::vector<float> p = param, m(n, 0.0f), v(n, 0.0f);
        AdamWHyperparameters h;
        h.lr = 1e-3f;
        h.weight_decay = 0.1f;
        h.grad_scale = 0.7f;
        for (h.step = 1; h.step <= 3; ++h.step)
          AdamWUpdate(p.data(), grad.data(), m.data(), v.data(), n, h);
        return std::vector<std::vector<float>>{p, m, v};
      },
      "AdamW");
}

TEST_P(CpuIsaTest, SwiGluBuildsAgree) {
  const int rows = GetParam();
  for (int F : {5, 96, 203}) {
    std::mt19937_64 rng(4);
    const std::vector<float> gate_up =
        RandomFloatVector(static_cast<size_t>(rows) * 2 * F, rng, -6.0, 6.0);
    const std::vector<float> d_y = RandomFloatVector(static_cast<size_t>(rows) * F, rng);
    ExpectSameBitsUnderBothBuilds(
        [&] {
          std::vector<float> y(static_cast<size_t>(rows) * F), d_gate_up(gate_up.size(), 0.5f);
          SwiGluForward(gate_up.data(), y.data(), rows, F);
          SwiGluBackward(d_y.data(), gate_up.data(), d_gate_up.data(), rows, F);
          return std::vector<std::vector<float>>{y, d_gate_up};
        },
        "SwiGLU");
  }
}

// 3: below every OpenMP threshold; 257: above them (several threads split the work).
INSTANTIATE_TEST_SUITE_P(Sizes, CpuIsaTest, ::testing::Values(3, 257));

}  // namespace
}  // namespace mtrain::cpu
