#include "kernels/dropout.h"

#include <cmath>
#include <cstdint>
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

TEST(DropoutTest, ZeroProbabilityIsIdentity) {
  std::mt19937_64 rng(1);
  const std::vector<double> x = RandomVector(1000, rng);
  std::vector<double> y(x.size(), 5.0);
  DropoutForward(x.data(), y.data(), x.size(), 0.0f, DropoutKey(1, 2), 0);
  EXPECT_EQ(y, x);
  std::vector<double> in_place(x);
  DropoutForward(in_place.data(), in_place.data(), x.size(), 0.0f, DropoutKey(1, 2), 0);
  EXPECT_EQ(in_place, x);
  for (uint64_t index = 0; index < 1000; ++index) EXPECT_TRUE(DropoutKeep(7, index, 0.0f));
}

TEST(DropoutTest, KeepFractionIsOneMinusP) {
  const size_t n = 1000000;
  for (float p : {0.1f, 0.3f, 0.5f, 0.9f}) {
    const uint64_t key = DropoutKey(42, static_cast<uint64_t>(p * 100));
    size_t kept = 0;
    for (uint64_t index = 0; index < n; ++index) kept += DropoutKeep(key, index, p) ? 1 : 0;
    const double fraction = static_cast<double>(kept) / n;
    // Five standard deviations of a binomial proportion.
    const double tolerance = 5 * std::sqrt(p * (1 - p) / n);
    EXPECT_NEAR(fraction, 1.0 - p, tolerance) << "p = " << p;
  }
}

TEST(DropoutTest, TheInlineMaskDecidesAsDropoutKeep) {
  for (float p : {0.0f, 0.1f, 0.5f, 0.97f}) {
    const uint64_t key = DropoutKey(9, static_cast<uint64_t>(p * 100));
    const DropoutMask mask(key, p);
    size_t differ = 0;
    // Small indices and ones past 2^32 (a large attention's global index).
    for (uint64_t base : {uint64_t{0}, (uint64_t{1} << 33) + 12345}) {
      for (uint64_t index = base; index < base + 100000; ++index) {
        differ += mask.Keep(index) != DropoutKeep(key, index, p) ? 1 : 0;
      }
    }
    EXPECT_EQ(differ, 0u) << "p = " << p;
  }
}

TEST(DropoutTest, MaskIsAPureFunctionOfKeyAndIndex) {
  const uint64_t key = DropoutKey(1234, 5, 6, 7);
  EXPECT_EQ(key, DropoutKey(1234, 5, 6, 7));
  EXPECT_EQ(DropoutKey(1, 2), DropoutKey(1, 2, 0, 0));
  EXPECT_NE(DropoutKey(1, 2), DropoutKey(2, 1));
  EXPECT_NE(DropoutKey(1, 2, 3), DropoutKey(1, 2, 4));
  EXPECT_NE(DropoutKey(1, 2, 3, 4), DropoutKey(1, 2, 3, 5));
  size_t agree = 0;
  const uint64_t other_key = DropoutKey(1234, 5, 6, 8);
  for (uint64_t index = 0; index < 100000; ++index) {
    EXPECT_EQ(DropoutKeep(key, index, 0.5f), DropoutKeep(key, index, 0.5f));
    agree += DropoutKeep(key, index, 0.5f) == DropoutKeep(other_key, index, 0.5f) ? 1 : 0;
  }
  // Independent masks at p = 0.5 agree half of the time.
  EXPECT_NEAR(agree / 100000.0, 0.5, 0.01);
}

TEST(DropoutTest, ForwardScalesKeptAndZeroesDropped) {
  std::mt19937_64 rng(2);
  const std::vector<double> x = RandomVector(10000, rng);
  std::vector<double> y(x.size());
  const float p = 0.3f;
  const uint64_t key = DropoutKey(9, 9);
  const uint64_t base = 1000;
  DropoutForward(x.data(), y.data(), x.size(), p, key, base);
  for (size_t i = 0; i < x.size(); ++i) {
    const double expected = DropoutKeep(key, base + i, p) ? x[i] / (1.0 - p) : 0.0;
    EXPECT_NEAR(y[i], expected, 1e-15) << i;
  }
}

TEST(DropoutTest, SplitRangeWithIndexBaseEqualsOneCall) {
  std::mt19937_64 rng(3);
  const std::vector<float> x = kernel_testing::RandomFloatVector(200000, rng);
  const float p = 0.25f;
  const uint64_t key = DropoutKey(3, 1, 4);
  std::vector<float> whole(x.size()), split(x.size());
  DropoutForward(x.data(), whole.data(), x.size(), p, key, 77);
  const size_t first = 123457;  // uneven, and large enough for the parallel path
  DropoutForward(x.data(), split.data(), first, p, key, 77);
  DropoutForward(x.data() + first, split.data() + first, x.size() - first, p, key, 77 + first);
  EXPECT_EQ(whole, split);
  // In place gives the same as out of place.
  std::vector<float> in_place(x);
  DropoutForward(in_place.data(), in_place.data(), x.size(), p, key, 77);
  EXPECT_EQ(whole, in_place);
}

TEST(DropoutTest, BackwardMatchesFiniteDifferencesAndAccumulates) {
  std::mt19937_64 rng(4);
  std::vector<double> x = RandomVector(64, rng);
  const std::vector<double> r = RandomVector(x.size(), rng);
  const float p = 0.3f;
  const uint64_t key = DropoutKey(11, 12);
  std::vector<double> d_x(x.size(), 0.0);
  DropoutBackward(r.data(), d_x.data(), x.size(), p, key, 5);
  auto objective = [&] {
    std::vector<double> y(x.size());
    DropoutForward(x.data(), y.data(), x.size(), p, key, 5);
    return Dot(y, r);
  };
  ExpectGradientNear(d_x, NumericalGradient(&x, objective), "d_x");
  const std::vector<double> once = d_x;
  DropoutBackward(r.data(), d_x.data(), x.size(), p, key, 5);
  for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(d_x[i], 2 * once[i]);
  // p = 0 passes the gradient straight through, also accumulating.
  std::vector<double> d_x_identity(x.size(), 1.0);
  DropoutBackward(r.data(), d_x_identity.data(), x.size(), 0.0f, key, 5);
  for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(d_x_identity[i], 1.0 + r[i]);
}

TEST(DropoutTest, KeepProbabilityIsQuantizedTo24Bits) {
  // p below half a quantum rounds to "drop nothing"; p = 1 drops everything.
  for (uint64_t index = 0; index < 100000; ++index) {
    EXPECT_TRUE(DropoutKeep(5, index, 1e-8f));
    EXPECT_FALSE(DropoutKeep(5, index, 1.0f));
  }
}

}  // namespace
}  // namespace mtrain::cpu
