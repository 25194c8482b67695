#include "kernels/adamw.h"

#include <cmath>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace mtrain::cpu {
namespace {

// Hyperparameters exactly representable in float, so the hand computation below is exact
// up to the final rounding.
AdamWHyperparameters HandHyperparameters(long long step) {
  AdamWHyperparameters h;
  h.lr = 0.125f;
  h.beta1 = 0.75f;
  h.beta2 = 0.875f;
  h.eps = 0.0625f;
  h.weight_decay = 0.5f;
  h.step = step;
  return h;
}

TEST(AdamWTest, MatchesHandComputedTwoSteps) {
  // param 2, gradients 0.5 then -1.
  // Step 1: m = 0.25 * 0.5 = 0.125, v = 0.125 * 0.25 = 0.03125,
  //   m_hat = 0.125 / 0.25 = 0.5, v_hat = 0.03125 / 0.125 = 0.25,
  //   param = 2 - 0.125 * (0.5 / (0.5 + 0.0625) + 0.5 * 2) = 1.76388888...
  // Step 2: m = 0.75 * 0.125 - 0.25 = -0.15625, v = 0.875 * 0.03125 + 0.125 = 0.15234375,
  //   m_hat = -0.15625 / (1 - 0.75^2) = -5/14, v_hat = 0.15234375 / (1 - 0.875^2) = 0.65,
  //   param = 1.7638888 - 0.125 * (-5/14 / (sqrt(0.65) + 0.0625) + 0.5 * 1.7638888)
  //         = 1.70503472777...
  double param = 2.0, m = 0.0, v = 0.0;
  const double grad1 = 0.5, grad2 = -1.0;
  AdamWUpdate(&param, &grad1, &m, &v, 1, HandHyperparameters(1));
  EXPECT_DOUBLE_EQ(m, 0.125);
  EXPECT_DOUBLE_EQ(v, 0.03125);
  EXPECT_NEAR(param, 2.0 - 0.125 * (0.5 / 0.5625 + 1.0), 1e-15);
  AdamWUpdate(&param, &grad2, &m, &v, 1, HandHyperparameters(2));
  EXPECT_DOUBLE_EQ(m, -0.15625);
  EXPECT_DOUBLE_EQ(v, 0.15234375);
  const double step1 = 1.7638888888888888;
  EXPECT_NEAR(param, step1 - 0.125 * ((-5.0 / 14.0) / (std::sqrt(0.65) + 0.0625) + 0.5 * step1),
              1e-15);
  EXPECT_NEAR(param, 1.7050347277765776, 1e-15);

  float param32 = 2.0f, m32 = 0.0f, v32 = 0.0f;
  const float grad1_32 = 0.5f, grad2_32 = -1.0f;
  AdamWUpdate(&param32, &grad1_32, &m32, &v32, 1, HandHyperparameters(1));
  AdamWUpdate(&param32, &grad2_32, &m32, &v32, 1, HandHyperparameters(2));
  EXPECT_NEAR(param32, 1.7050347277765776, 1e-6);
}

// torch.optim.AdamW's single-tensor update, transcribed step for step (decay applied to the
// parameter first, then the bias-corrected Adam step).
void TorchAdamWStep(std::vector<double>* param, const std::vector<double>& grad,
                    std::vector<double>* exp_avg, std::vector<double>* exp_avg_sq,
                    const AdamWHyperparameters& h) {
  const double lr = h.lr, beta1 = h.beta1, beta2 = h.beta2, eps = h.eps;
  const double bias_correction1 = 1 - std::pow(beta1, static_cast<double>(h.step));
  const double bias_correction2 = 1 - std::pow(beta2, static_cast<double>(h.step));
  const double step_size = lr / bias_correction1;
  for (size_t i = 0; i < param->size(); ++i) {
    const double g = grad[i] * static_cast<double>(h.grad_scale);
    (*param)[i] *= 1 - lr * static_cast<double>(h.weight_decay);
    (*exp_avg)[i] += (g - (*exp_avg)[i]) * (1 - beta1);
    (*exp_avg_sq)[i] = (*exp_avg_sq)[i] * beta2 + (1 - beta2) * g * g;
    const double denom = std::sqrt((*exp_avg_sq)[i]) / std::sqrt(bias_correction2) + eps;
    (*param)[i] -= step_size * (*exp_avg)[i] / denom;
  }
}

void ExpectMatchesTorch(float weight_decay, float grad_scale) {
  std::mt19937_64 rng(1);
  std::normal_distribution<double> normal;
  const size_t n = 100;
  std::vector<double> param(n), m(n, 0.0), v(n, 0.0);
  for (double& p : param) p = normal(rng);
  std::vector<double> torch_param = param, torch_m = m, torch_v = v;
  for (long long step = 1; step <= 6; ++step) {
    std::vector<double> grad(n);
    for (double& g : grad) g = normal(rng) * 0.1;
    AdamWHyperparameters h;
    h.lr = 1e-2f;
    h.weight_decay = weight_decay;
    h.grad_scale = grad_scale;
    h.step = step;
    AdamWUpdate(param.data(), grad.data(), m.data(), v.data(), n, h);
    TorchAdamWStep(&torch_param, grad, &torch_m, &torch_v, h);
  }
  for (size_t i = 0; i < n; ++i) {
    EXPECT_NEAR(param[i], torch_param[i], 1e-13) << i;
    EXPECT_NEAR(m[i], torch_m[i], 1e-15) << i;
    EXPECT_NEAR(v[i], torch_v[i], 1e-15) << i;
  }
}

TEST(AdamWTest, MatchesTorchFormula) { ExpectMatchesTorch(0.1f, 1.0f); }
TEST(AdamWTest, MatchesTorchFormulaWithoutDecay) { ExpectMatchesTorch(0.0f, 1.0f); }
TEST(AdamWTest, MatchesTorchFormulaWithGradScale) { ExpectMatchesTorch(0.1f, 0.3f); }

TEST(AdamWTest, DecayIsDecoupledFromTheGradient) {
  // Zero gradient and fresh moments: only the decay moves the parameter, by lr * wd * param,
  // not through the adaptive denominator; without decay nothing moves.
  AdamWHyperparameters h;
  h.lr = 0.1f;
  h.weight_decay = 0.5f;
  double param = 3.0, m = 0.0, v = 0.0;
  const double zero = 0.0;
  AdamWUpdate(&param, &zero, &m, &v, 1, h);
  EXPECT_NEAR(param, 3.0 - 0.1f * 0.5f * 3.0, 1e-15);
  h.weight_decay = 0.0f;
  double undecayed = 3.0;
  m = v = 0.0;
  AdamWUpdate(&undecayed, &zero, &m, &v, 1, h);
  EXPECT_EQ(undecayed, 3.0);
}

TEST(AdamWTest, GradScaleMultipliesGradients) {
  std::mt19937_64 rng(2);
  std::normal_distribution<float> normal;
  const size_t n = 64;
  const float scale = 0.3f;
  std::vector<float> param(n), grad(n);
  for (size_t i = 0; i < n; ++i) {
    param[i] = normal(rng);
    grad[i] = normal(rng);
  }
  std::vector<float> scaled_grad(n);
  for (size_t i = 0; i < n; ++i) scaled_grad[i] = grad[i] * scale;
  AdamWHyperparameters h;
  h.lr = 1e-3f;
  h.weight_decay = 0.01f;
  std::vector<float> param_a = param, m_a(n, 0.0f), v_a(n, 0.0f);
  std::vector<float> param_b = param, m_b(n, 0.0f), v_b(n, 0.0f);
  for (long long step = 1; step <= 3; ++step) {
    h.step = step;
    h.grad_scale = scale;
    AdamWUpdate(param_a.data(), grad.data(), m_a.data(), v_a.data(), n, h);
    h.grad_scale = 1.0f;
    AdamWUpdate(param_b.data(), scaled_grad.data(), m_b.data(), v_b.data(), n, h);
  }
  EXPECT_EQ(param_a, param_b);
  EXPECT_EQ(m_a, m_b);
  EXPECT_EQ(v_a, v_b);
  EXPECT_NE(param_a, param);
}

}  // namespace
}  // namespace mtrain::cpu
