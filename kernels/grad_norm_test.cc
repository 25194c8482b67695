#include "kernels/grad_norm.h"

#include <cmath>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace mtrain::cpu {
namespace {

TEST(GradNormTest, SumOfSquaresIsExactOnSmallIntegers) {
  // 1^2 + ... + n^2 = n (n + 1) (2n + 1) / 6, for lengths around the 8-wide lanes.
  for (size_t n : {0, 1, 7, 8, 9, 17, 1000}) {
    std::vector<float> x32(n);
    std::vector<double> x64(n);
    for (size_t i = 0; i < n; ++i) {
      // Alternate signs: squares must not care.
      x32[i] = static_cast<float>(i % 2 == 0 ? i + 1 : -static_cast<double>(i + 1));
      x64[i] = x32[i];
    }
    const double expected = static_cast<double>(n * (n + 1) * (2 * n + 1) / 6);
    EXPECT_EQ(SumOfSquares(x32.data(), n), expected) << n;
    EXPECT_EQ(SumOfSquares(x64.data(), n), expected) << n;
  }
}

TEST(GradNormTest, SumOfSquaresAccumulatesFloatInDouble) {
  // 2^24 + 1 is not representable in float: a float accumulator would lose the ones.
  std::vector<float> x(1 << 20, 1.0f);
  x[0] = 4096.0f;  // 4096^2 = 2^24
  EXPECT_EQ(SumOfSquares(x.data(), x.size()), 16777216.0 + (x.size() - 1));
}

TEST(GradNormTest, SumOfSquaresIsDeterministic) {
  std::mt19937_64 rng(1);
  std::normal_distribution<float> normal;
  std::vector<float> x(100003);
  for (float& value : x) value = normal(rng);
  const double first = SumOfSquares(x.data(), x.size());
  EXPECT_EQ(SumOfSquares(x.data(), x.size()), first);
  double reference = 0;
  for (float value : x) reference += static_cast<double>(value) * value;
  EXPECT_NEAR(first, reference, 1e-9 * reference);
}

TEST(GradNormTest, ClipCoefficientMatchesTorch) {
  // torch.nn.utils.clip_grad_norm_: clamp(max_norm / (total_norm + 1e-6), max=1).
  EXPECT_DOUBLE_EQ(ClipCoefficient(4.0, 1.0), 1.0 / (4.0 + 1e-6));
  EXPECT_DOUBLE_EQ(ClipCoefficient(10.0, 2.5), 2.5 / (10.0 + 1e-6));
  EXPECT_EQ(ClipCoefficient(0.5, 1.0), 1.0);
  EXPECT_EQ(ClipCoefficient(0.0, 1.0), 1.0);
  // At norm == max_norm the epsilon keeps the factor just below 1.
  EXPECT_LT(ClipCoefficient(1.0, 1.0), 1.0);
  EXPECT_GT(ClipCoefficient(1.0, 1.0), 0.999998);
}

TEST(GradNormTest, ClippingDisabledWhenMaxNormNotPositive) {
  EXPECT_EQ(ClipCoefficient(100.0, 0.0), 1.0);
  EXPECT_EQ(ClipCoefficient(100.0, -1.0), 1.0);
}

}  // namespace
}  // namespace mtrain::cpu
