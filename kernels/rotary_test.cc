#include "kernels/rotary.h"

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

constexpr int kSeq = 5, kBatch = 2, kHeads = 3, kHeadDim = 8;
constexpr double kTheta = 10000.0;
constexpr int kRows = kBatch * kSeq;
constexpr int kWidth = kHeads * kHeadDim;

TEST(RotaryTest, RotatesEachPairByPositionTimesFrequency) {
  const RotaryTable table = MakeRotaryTable(kSeq, kHeadDim, kTheta);
  std::mt19937_64 rng(1);
  const std::vector<double> x = RandomVector(kRows * kWidth, rng);
  std::vector<double> y = x;
  ApplyRotary(y.data(), kRows, kWidth, kHeads, kSeq, 0, table, /*inverse=*/false);
  for (int row = 0; row < kRows; ++row) {
    const int position = row % kSeq;
    for (int h = 0; h < kHeads; ++h) {
      for (int i = 0; i < kHeadDim / 2; ++i) {
        const double angle = position * std::pow(kTheta, -2.0 * i / kHeadDim);
        const int a = row * kWidth + h * kHeadDim + i, b = a + kHeadDim / 2;
        // The table holds float cos/sin (not exactly orthogonal): that is the tolerance.
        EXPECT_NEAR(y[a], x[a] * std::cos(angle) - x[b] * std::sin(angle), 3e-7);
        EXPECT_NEAR(y[b], x[b] * std::cos(angle) + x[a] * std::sin(angle), 3e-7);
      }
    }
  }
}

TEST(RotaryTest, ScoresDependOnlyOnRelativePosition) {
  // The point of rotary positions: <R(p) q, R(k) key> = <R(p + s) q, R(k + s) key>.
  const RotaryTable table = MakeRotaryTable(64, kHeadDim, kTheta);
  std::mt19937_64 rng(2);
  const std::vector<double> q = RandomVector(kHeadDim, rng), key = RandomVector(kHeadDim, rng);
  auto score = [&](int query_position, int key_position) {
    std::vector<double> rq = q, rk = key;
    ApplyRotary(rq.data(), 1, kHeadDim, 1, 1, query_position, table, false);
    ApplyRotary(rk.data(), 1, kHeadDim, 1, 1, key_position, table, false);
    return Dot(rq, rk);
  };
  EXPECT_NEAR(score(7, 3), score(40, 36), 1e-6);
  EXPECT_NEAR(score(9, 9), Dot(q, key), 1e-6);
  EXPECT_GT(std::fabs(score(7, 3) - score(7, 6)), 1e-4);  // and they do depend on it
}

TEST(RotaryTest, InverseUndoesAndBackwardMatchesFiniteDifferences) {
  const RotaryTable table = MakeRotaryTable(kSeq + 3, kHeadDim, kTheta);
  std::mt19937_64 rng(3);
  // Rows of [q | k | v] like the fused projection: rotary on q and k, stride 3 widths.
  const int stride = 3 * kWidth;
  std::vector<double> x = RandomVector(kRows * stride, rng);
  const std::vector<double> r = RandomVector(kRows * stride, rng);
  auto rotate = [&](std::vector<double>* v, bool inverse) {
    ApplyRotary(v->data(), kRows, stride, 2 * kHeads, kSeq, /*first_position=*/3, table, inverse);
  };
  std::vector<double> round_trip = x;
  rotate(&round_trip, false);
  rotate(&round_trip, true);
  for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(round_trip[i], x[i], 1e-6) << i;

  auto objective = [&] {
    std::vector<double> y = x;
    rotate(&y, false);
    return Dot(y, r);
  };
  std::vector<double> d_x = r;
  rotate(&d_x, true);  // the backward pass
  ExpectGradientNear(d_x, NumericalGradient(&x, objective), "d_x");
  // v's columns are untouched: their gradient is r itself.
  for (int row = 0; row < kRows; ++row) {
    for (int c = 2 * kWidth; c < stride; ++c) EXPECT_EQ(d_x[row * stride + c], r[row * stride + c]);
  }
}

}  // namespace
}  // namespace mtrain::cpu
