#include "kernels/swiglu.h"

#include <cmath>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/test_util.h"

namespace mtrain::cpu {
namespace {

using kernel_testing::Dot;
using kernel_testing::ExpectGradientNear;
using kernel_testing::NumericalGradient;
using kernel_testing::RandomVector;

constexpr int kRows = 4, kF = 9;

TEST(SwiGluTest, ForwardMatchesFormula) {
  std::mt19937_64 rng(1);
  // Wide inputs: both tails of the sigmoid.
  std::vector<double> gate_up = RandomVector(kRows * 2 * kF, rng, -40.0, 40.0);
  std::vector<double> y(kRows * kF);
  SwiGluForward(gate_up.data(), y.data(), kRows, kF);
  for (int row = 0; row < kRows; ++row) {
    for (int c = 0; c < kF; ++c) {
      const double g = gate_up[row * 2 * kF + c], u = gate_up[row * 2 * kF + kF + c];
      const double expected = g / (1.0 + std::exp(-g)) * u;
      EXPECT_NEAR(y[row * kF + c], expected, 1e-12 * std::max(1.0, std::fabs(expected)));
      EXPECT_TRUE(std::isfinite(y[row * kF + c]));
    }
  }
}

TEST(SwiGluTest, BackwardMatchesFiniteDifferences) {
  std::mt19937_64 rng(2);
  std::vector<double> gate_up = RandomVector(kRows * 2 * kF, rng, -4.0, 4.0);
  const std::vector<double> r = RandomVector(kRows * kF, rng);
  auto objective = [&] {
    std::vector<double> y(kRows * kF);
    SwiGluForward(gate_up.data(), y.data(), kRows, kF);
    return Dot(y, r);
  };
  std::vector<double> d_gate_up(gate_up.size(), 0.0);
  SwiGluBackward(r.data(), gate_up.data(), d_gate_up.data(), kRows, kF);
  ExpectGradientNear(d_gate_up, NumericalGradient(&gate_up, objective), "d_gate_up");
}

TEST(SwiGluTest, FloatAgreesWithDouble) {
  std::mt19937_64 rng(3);
  const std::vector<double> wide = RandomVector(kRows * 2 * kF, rng, -8.0, 8.0);
  const std::vector<float> narrow(wide.begin(), wide.end());
  std::vector<double> y(kRows * kF);
  std::vector<float> y_float(kRows * kF);
  SwiGluForward(wide.data(), y.data(), kRows, kF);
  SwiGluForward(narrow.data(), y_float.data(), kRows, kF);
  for (size_t i = 0; i < y.size(); ++i) {
    EXPECT_NEAR(y_float[i], y[i], 1e-6 * std::max(1.0, std::fabs(y[i]))) << i;
  }
}

}  // namespace
}  // namespace mtrain::cpu
