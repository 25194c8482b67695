#include "kernels/gelu_exact.h"

#include <cmath>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/gelu.h"

namespace mtrain::cpu {
namespace {

TEST(GeluExactTest, KnownValuesAndTheTanhFormNearby) {
  const std::vector<double> x = {-3.0, -1.0, 0.0, 0.5, 1.0, 2.0};
  std::vector<double> y(x.size()), tanh_form(x.size());
  GeluExactForward<double>(x.data(), y.data(), x.size());
  GeluForward<double>(x.data(), tanh_form.data(), x.size());
  // 0.5 x (1 + erf(x / sqrt 2)): x Phi(x), from the normal distribution's table.
  EXPECT_NEAR(y[1], -0.15865525393145707, 1e-15);
  EXPECT_EQ(y[2], 0.0);
  EXPECT_NEAR(y[4], 0.8413447460685429, 1e-15);
  EXPECT_NEAR(y[5], 1.9544997361036416, 1e-15);
  for (size_t i = 0; i < x.size(); ++i) {
    EXPECT_NEAR(y[i], tanh_form[i], 1e-3) << x[i];  // the approximation is close ...
    if (x[i] != 0) {
      EXPECT_NE(y[i], tanh_form[i]) << x[i];  // ... but not the same function
    }
  }
}

TEST(GeluExactTest, BackwardMatchesFiniteDifferencesAndAccumulates) {
  std::vector<double> x;
  for (double v = -6; v <= 6; v += 0.37) x.push_back(v);
  std::vector<double> d_y(x.size()), d_x(x.size(), 1.0);
  for (size_t i = 0; i < x.size(); ++i) d_y[i] = 0.5 + 0.1 * static_cast<double>(i % 7);
  GeluExactBackward<double>(d_y.data(), x.data(), d_x.data(), x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double h = 1e-6;
    double up = 0, down = 0;
    const double xu = x[i] + h, xd = x[i] - h;
    GeluExactForward<double>(&xu, &up, 1);
    GeluExactForward<double>(&xd, &down, 1);
    EXPECT_NEAR(d_x[i], 1.0 + d_y[i] * (up - down) / (2 * h), 1e-8) << x[i];
  }
}

}  // namespace
}  // namespace mtrain::cpu
