#include "kernels/rms_norm.h"

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

constexpr double kEps = 1e-5;

struct RmsNormProblem {
  int rows = 3, C = 70;  // C > one column block of the d_gamma reduction
  std::vector<double> x, gamma, r;

  explicit RmsNormProblem(uint64_t seed) {
    std::mt19937_64 rng(seed);
    x = RandomVector(rows * C, rng, -2.0, 2.0);
    gamma = RandomVector(C, rng, 0.5, 1.5);
    r = RandomVector(rows * C, rng);
  }
  double Objective(std::vector<double>* rstd = nullptr) const {
    std::vector<double> y(rows * C), saved(rows);
    RmsNormForward(x.data(), gamma.data(), y.data(), saved.data(), rows, C, kEps);
    if (rstd != nullptr) *rstd = saved;
    return Dot(y, r);
  }
};

TEST(RmsNormTest, ForwardMatchesFormula) {
  const RmsNormProblem problem(1);
  std::vector<double> y(problem.rows * problem.C), rstd(problem.rows);
  RmsNormForward(problem.x.data(), problem.gamma.data(), y.data(), rstd.data(), problem.rows,
                 problem.C, kEps);
  for (int row = 0; row < problem.rows; ++row) {
    const double* x = problem.x.data() + row * problem.C;
    double mean_square = 0;
    for (int c = 0; c < problem.C; ++c) mean_square += x[c] * x[c] / problem.C;
    const double expected_rstd = 1.0 / std::sqrt(mean_square + kEps);
    EXPECT_NEAR(rstd[row], expected_rstd, 1e-12);
    for (int c = 0; c < problem.C; ++c) {
      EXPECT_NEAR(y[row * problem.C + c], x[c] * expected_rstd * problem.gamma[c], 1e-13);
    }
  }
}

TEST(RmsNormTest, ScalingTheInputChangesNothing) {
  // No centring: a row times a positive constant normalizes to the same output (up to eps).
  RmsNormProblem problem(2);
  std::vector<double> y(problem.rows * problem.C), scaled_y(y.size()), rstd(problem.rows);
  RmsNormForward(problem.x.data(), problem.gamma.data(), y.data(), rstd.data(), problem.rows,
                 problem.C, 0.0);
  for (double& v : problem.x) v *= 7.5;
  RmsNormForward(problem.x.data(), problem.gamma.data(), scaled_y.data(), rstd.data(), problem.rows,
                 problem.C, 0.0);
  for (size_t i = 0; i < y.size(); ++i) EXPECT_NEAR(y[i], scaled_y[i], 1e-12) << i;
}

TEST(RmsNormTest, BackwardMatchesFiniteDifferences) {
  RmsNormProblem problem(3);
  std::vector<double> rstd;
  problem.Objective(&rstd);
  std::vector<double> d_x(problem.x.size(), 0.0), d_gamma(problem.C, 0.0);
  RmsNormBackward(problem.r.data(), problem.x.data(), problem.gamma.data(), rstd.data(), d_x.data(),
                  d_gamma.data(), problem.rows, problem.C);
  auto objective = [&] { return problem.Objective(); };
  ExpectGradientNear(d_x, NumericalGradient(&problem.x, objective), "d_x");
  ExpectGradientNear(d_gamma, NumericalGradient(&problem.gamma, objective), "d_gamma");
}

TEST(RmsNormTest, BackwardAccumulates) {
  RmsNormProblem problem(4);
  std::vector<double> rstd;
  problem.Objective(&rstd);
  std::vector<double> once(problem.x.size(), 0.0), twice(problem.x.size(), 0.0);
  std::vector<double> g1(problem.C, 0.0), g2(problem.C, 0.0);
  RmsNormBackward(problem.r.data(), problem.x.data(), problem.gamma.data(), rstd.data(),
                  once.data(), g1.data(), problem.rows, problem.C);
  for (int k = 0; k < 2; ++k) {
    RmsNormBackward(problem.r.data(), problem.x.data(), problem.gamma.data(), rstd.data(),
                    twice.data(), g2.data(), problem.rows, problem.C);
  }
  for (size_t i = 0; i < once.size(); ++i) EXPECT_NEAR(twice[i], 2 * once[i], 1e-12);
  for (int c = 0; c < problem.C; ++c) EXPECT_NEAR(g2[c], 2 * g1[c], 1e-12);
}

}  // namespace
}  // namespace mtrain::cpu
