#include "kernels/layernorm.h"

#include <omp.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/test_util.h"

namespace mtrain::cpu {
namespace {

using kernel_testing::Dot;
using kernel_testing::ExpectGradientNear;
using kernel_testing::NumericalGradient;
using kernel_testing::RandomFloatVector;
using kernel_testing::RandomVector;

constexpr double kEps = 1e-5;

struct LayerNormProblem {
  int rows = 3, C = 7;
  std::vector<double> x, gamma, beta, r;

  explicit LayerNormProblem(uint64_t seed) {
    std::mt19937_64 rng(seed);
    x = RandomVector(rows * C, rng, -2.0, 2.0);
    gamma = RandomVector(C, rng, 0.5, 1.5);
    beta = RandomVector(C, rng);
    r = RandomVector(rows * C, rng);
  }

  // Forward into y/mean/rstd; returns L = <y, R>.
  double Forward(std::vector<double>* y, std::vector<double>* mean,
                 std::vector<double>* rstd) const {
    y->assign(rows * C, 0.0);
    mean->assign(rows, 0.0);
    rstd->assign(rows, 0.0);
    LayerNormForward(x.data(), gamma.data(), beta.data(), y->data(), mean->data(), rstd->data(),
                     rows, C, kEps);
    return Dot(*y, r);
  }
  double Objective() const {
    std::vector<double> y, mean, rstd;
    return Forward(&y, &mean, &rstd);
  }
};

TEST(LayerNormTest, ForwardMatchesFormula) {
  LayerNormProblem problem(1);
  std::vector<double> y, mean, rstd;
  problem.Forward(&y, &mean, &rstd);
  for (int row = 0; row < problem.rows; ++row) {
    const double* x = problem.x.data() + row * problem.C;
    double expected_mean = 0;
    for (int c = 0; c < problem.C; ++c) expected_mean += x[c] / problem.C;
    double variance = 0;
    for (int c = 0; c < problem.C; ++c) {
      variance += (x[c] - expected_mean) * (x[c] - expected_mean) / problem.C;
    }
    const double expected_rstd = 1.0 / std::sqrt(variance + kEps);
    EXPECT_NEAR(mean[row], expected_mean, 1e-14);
    EXPECT_NEAR(rstd[row], expected_rstd, 1e-12);
    for (int c = 0; c < problem.C; ++c) {
      const double expected =
          (x[c] - expected_mean) * expected_rstd * problem.gamma[c] + problem.beta[c];
      EXPECT_NEAR(y[row * problem.C + c], expected, 1e-13) << row << "," << c;
    }
  }
}

TEST(LayerNormTest, ForwardNormalizesConstantShiftAway) {
  // With gamma = 1 and beta = 0 the output has zero mean and (almost) unit variance, and
  // shifting the input by a constant changes nothing.
  std::mt19937_64 rng(2);
  const int C = 64;
  std::vector<float> x = RandomFloatVector(C, rng);
  std::vector<float> shifted(x);
  for (float& value : shifted) value += 3.0f;
  const std::vector<float> gamma(C, 1.0f), beta(C, 0.0f);
  std::vector<float> y(C), y_shifted(C);
  float mean = 0, rstd = 0;
  LayerNormForward(x.data(), gamma.data(), beta.data(), y.data(), &mean, &rstd, 1, C, 1e-5f);
  LayerNormForward(shifted.data(), gamma.data(), beta.data(), y_shifted.data(), &mean, &rstd, 1, C,
                   1e-5f);
  double sum = 0, squares = 0;
  for (int c = 0; c < C; ++c) {
    sum += y[c];
    squares += y[c] * y[c];
    EXPECT_NEAR(y[c], y_shifted[c], 1e-5);
  }
  EXPECT_NEAR(sum / C, 0.0, 1e-6);
  EXPECT_NEAR(squares / C, 1.0, 1e-3);
}

TEST(LayerNormTest, BackwardMatchesFiniteDifferences) {
  LayerNormProblem problem(3);
  std::vector<double> y, mean, rstd;
  problem.Forward(&y, &mean, &rstd);
  std::vector<double> d_x(problem.rows * problem.C, 0.0);
  std::vector<double> d_gamma(problem.C, 0.0), d_beta(problem.C, 0.0);
  LayerNormBackward(problem.r.data(), problem.x.data(), problem.gamma.data(), mean.data(),
                    rstd.data(), d_x.data(), d_gamma.data(), d_beta.data(), problem.rows,
                    problem.C);
  auto objective = [&] { return problem.Objective(); };
  ExpectGradientNear(d_x, NumericalGradient(&problem.x, objective), "d_x");
  ExpectGradientNear(d_gamma, NumericalGradient(&problem.gamma, objective), "d_gamma");
  ExpectGradientNear(d_beta, NumericalGradient(&problem.beta, objective), "d_beta");
}

TEST(LayerNormTest, BackwardAccumulates) {
  LayerNormProblem problem(4);
  std::vector<double> y, mean, rstd;
  problem.Forward(&y, &mean, &rstd);
  std::vector<double> d_x(problem.rows * problem.C, 0.0);
  std::vector<double> d_gamma(problem.C, 0.0), d_beta(problem.C, 0.0);
  auto backward = [&] {
    LayerNormBackward(problem.r.data(), problem.x.data(), problem.gamma.data(), mean.data(),
                      rstd.data(), d_x.data(), d_gamma.data(), d_beta.data(), problem.rows,
                      problem.C);
  };
  backward();
  const std::vector<double> once_x = d_x, once_gamma = d_gamma, once_beta = d_beta;
  backward();
  for (size_t i = 0; i < d_x.size(); ++i) EXPECT_EQ(d_x[i], 2 * once_x[i]);
  for (size_t i = 0; i < d_gamma.size(); ++i) EXPECT_EQ(d_gamma[i], 2 * once_gamma[i]);
  for (size_t i = 0; i < d_beta.size(); ++i) EXPECT_EQ(d_beta[i], 2 * once_beta[i]);
}

// Forward and backward outputs of a GPT-2-sized float problem with `threads` OpenMP threads.
struct LayerNormRun {
  std::vector<float> y, mean, rstd, d_x, d_gamma, d_beta;
};

LayerNormRun RunLayerNorm(int threads) {
  const int rows = 256, C = 768;  // large enough to take the parallel path
  std::mt19937_64 rng(5);
  const std::vector<float> x = RandomFloatVector(rows * C, rng, -3.0, 3.0);
  const std::vector<float> gamma = RandomFloatVector(C, rng);
  const std::vector<float> beta = RandomFloatVector(C, rng);
  const std::vector<float> d_y = RandomFloatVector(rows * C, rng);
  LayerNormRun run{std::vector<float>(rows * C), std::vector<float>(rows),
                   std::vector<float>(rows),     std::vector<float>(rows * C, 0.0f),
                   std::vector<float>(C, 0.0f),  std::vector<float>(C, 0.0f)};
  const int previous_threads = omp_get_max_threads();
  omp_set_num_threads(threads);
  LayerNormForward(x.data(), gamma.data(), beta.data(), run.y.data(), run.mean.data(),
                   run.rstd.data(), rows, C, 1e-5f);
  LayerNormBackward(d_y.data(), x.data(), gamma.data(), run.mean.data(), run.rstd.data(),
                    run.d_x.data(), run.d_gamma.data(), run.d_beta.data(), rows, C);
  omp_set_num_threads(previous_threads);
  return run;
}

bool BitIdentical(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(LayerNormTest, BitIdenticalForAnyThreadCount) {
  const LayerNormRun one = RunLayerNorm(1);
  for (int threads : {2, 3}) {
    const LayerNormRun many = RunLayerNorm(threads);
    EXPECT_TRUE(BitIdentical(one.y, many.y)) << threads;
    EXPECT_TRUE(BitIdentical(one.mean, many.mean)) << threads;
    EXPECT_TRUE(BitIdentical(one.rstd, many.rstd)) << threads;
    EXPECT_TRUE(BitIdentical(one.d_x, many.d_x)) << threads;
    EXPECT_TRUE(BitIdentical(one.d_gamma, many.d_gamma)) << threads;
    EXPECT_TRUE(BitIdentical(one.d_beta, many.d_beta)) << threads;
  }
}

}  // namespace
}  // namespace mtrain::cpu
