#include "kernels/test_util.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "gtest/gtest.h"

namespace mtrain::kernel_testing {

std::vector<double> RandomVector(size_t n, std::mt19937_64& rng, double lo, double hi) {
  std::uniform_real_distribution<double> uniform(lo, hi);
  std::vector<double> values(n);
  for (double& value : values) value = uniform(rng);
  return values;
}

std::vector<float> RandomFloatVector(size_t n, std::mt19937_64& rng, double lo, double hi) {
  std::uniform_real_distribution<double> uniform(lo, hi);
  std::vector<float> values(n);
  for (float& value : values) value = static_cast<float>(uniform(rng));
  return values;
}

double Dot(const std::vector<double>& a, const std::vector<double>& b) {
  EXPECT_EQ(a.size(), b.size());
  double sum = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) sum += a[i] * b[i];
  return sum;
}

std::vector<double> NumericalGradient(std::vector<double>* x,
                                      const std::function<double()>& objective, double h) {
  std::vector<double> gradient(x->size());
  for (size_t i = 0; i < x->size(); ++i) {
    const double original = (*x)[i];
    (*x)[i] = original + h;
    const double plus = objective();
    (*x)[i] = original - h;
    const double minus = objective();
    (*x)[i] = original;
    gradient[i] = (plus - minus) / (2 * h);
  }
  return gradient;
}

void ExpectGradientNear(const std::vector<double>& analytic, const std::vector<double>& numeric,
                        const std::string& name, double rel_tol, double floor) {
  ASSERT_EQ(analytic.size(), numeric.size()) << name;
  double largest = 0;
  double worst_relative_error = 0;
  for (size_t i = 0; i < analytic.size(); ++i) {
    const double scale = std::max({std::abs(analytic[i]), std::abs(numeric[i]), floor});
    const double relative_error = std::abs(analytic[i] - numeric[i]) / scale;
    worst_relative_error = std::max(worst_relative_error, relative_error);
    largest = std::max(largest, std::abs(analytic[i]));
    EXPECT_LE(relative_error, rel_tol)
        << name << "[" << i << "]: analytic " << analytic[i] << " numeric " << numeric[i];
  }
  // A gradient that is zero everywhere would pass against a zero objective: refuse it.
  EXPECT_GT(largest, 1e-3) << name << " is (nearly) zero everywhere";
  char formatted[32];
  std::snprintf(formatted, sizeof(formatted), "%.3e", worst_relative_error);
  ::testing::Test::RecordProperty(name + "_worst_relative_error", formatted);
}

}  // namespace mtrain::kernel_testing
