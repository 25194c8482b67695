#include "kernels/gelu.h"

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

// gelu(x) of the tanh approximation, evaluated independently in Python
// (0.5*x*(1+math.tanh(math.sqrt(2/math.pi)*(x+0.044715*x**3)))); gelu(1) = 0.841192 is also
// what torch.nn.functional.gelu(approximate="tanh") prints.
struct KnownValue {
  double x;
  double gelu;
};
constexpr KnownValue kKnownValues[] = {
    {0.0, 0.0},
    {1.0, 0.8411919906082768},
    {-1.0, -0.15880800939172324},
    {2.0, 1.954597694087775},
    {-3.0, -0.0036373920817729943},
    {0.5, 0.34571400982514394},
    {5.0, 4.999999770820381},
    {-5.0, -2.2917961972623857e-07},
};

TEST(GeluTest, DoubleMatchesKnownValues) {
  for (const KnownValue& known : kKnownValues) {
    double y = 0;
    GeluForward(&known.x, &y, 1);
    EXPECT_NEAR(y, known.gelu, 1e-15 + 1e-14 * std::abs(known.gelu)) << known.x;
  }
}

TEST(GeluTest, FloatMatchesKnownValues) {
  for (const KnownValue& known : kKnownValues) {
    const float x = static_cast<float>(known.x);
    float y = 0;
    GeluForward(&x, &y, 1);
    EXPECT_NEAR(y, known.gelu, 1e-6 + 1e-6 * std::abs(known.gelu)) << known.x;
  }
}

TEST(GeluTest, LargeArrayMatchesElementwise) {
  // Large enough for the parallel path: every element must still equal a one-element call.
  std::mt19937_64 rng(1);
  const std::vector<double> x = RandomVector(100000, rng, -6.0, 6.0);
  std::vector<double> y(x.size());
  GeluForward(x.data(), y.data(), x.size());
  for (size_t i = 0; i < x.size(); i += 997) {
    double single = 0;
    GeluForward(&x[i], &single, 1);
    EXPECT_EQ(y[i], single) << i;
  }
}

TEST(GeluTest, BackwardMatchesFiniteDifferences) {
  std::mt19937_64 rng(2);
  std::vector<double> x = RandomVector(40, rng, -4.0, 4.0);
  const std::vector<double> r = RandomVector(x.size(), rng);
  std::vector<double> d_x(x.size(), 0.0);
  GeluBackward(r.data(), x.data(), d_x.data(), x.size());
  auto objective = [&] {
    std::vector<double> y(x.size());
    GeluForward(x.data(), y.data(), x.size());
    return Dot(y, r);
  };
  ExpectGradientNear(d_x, NumericalGradient(&x, objective), "d_x");
}

TEST(GeluTest, BackwardAccumulates) {
  std::mt19937_64 rng(3);
  const std::vector<double> x = RandomVector(50, rng, -4.0, 4.0);
  const std::vector<double> d_y = RandomVector(x.size(), rng);
  std::vector<double> d_x(x.size(), 0.0);
  GeluBackward(d_y.data(), x.data(), d_x.data(), x.size());
  const std::vector<double> once = d_x;
  GeluBackward(d_y.data(), x.data(), d_x.data(), x.size());
  for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(d_x[i], 2 * once[i]);
}

TEST(GeluTest, FloatBackwardMatchesDouble) {
  std::mt19937_64 rng(4);
  const std::vector<double> x = RandomVector(1000, rng, -5.0, 5.0);
  const std::vector<float> x32(x.begin(), x.end());
  const std::vector<float> d_y32(x.size(), 1.0f);
  std::vector<float> d_x32(x.size(), 0.0f);
  GeluBackward(d_y32.data(), x32.data(), d_x32.data(), x.size());
  const std::vector<double> x64(x32.begin(), x32.end());
  const std::vector<double> d_y64(x.size(), 1.0);
  std::vector<double> d_x64(x.size(), 0.0);
  GeluBackward(d_y64.data(), x64.data(), d_x64.data(), x.size());
  for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(d_x32[i], d_x64[i], 1e-6) << x[i];
}

}  // namespace
}  // namespace mtrain::cpu
