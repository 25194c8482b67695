#include "kernels/bidirectional_attention.h"

#include <omp.h>

#include <cmath>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace mtrain::cpu {
namespace {

// B = 2 sequences of S = 6 with 6 and 4 real positions; 4 query heads reading 2 key-value
// heads of size 4.
constexpr int kB = 2, kS = 6, kH = 4, kHkv = 2, kD = 4;
const int32_t kLengths[kB] = {6, 4};
constexpr size_t kQkv = size_t(kB) * kS * (kH + 2 * kHkv) * kD;
constexpr size_t kOut = size_t(kB) * kS * kH * kD;

AttentionShape Shape() { return AttentionShape{kB, kS, kH, kD, kHkv}; }

std::vector<double> Random(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(-1, 1);
  std::vector<double> v(n);
  for (double& x : v) x = u(rng);
  return v;
}

// sum(w * out): the loss whose gradient d_out = w.
double Loss(const std::vector<double>& qkv, const std::vector<double>& w,
            const AttentionDropout& dropout) {
  std::vector<double> out(kOut), lse(size_t(kB) * kH * kS);
  BidirectionalAttentionForward<double>(qkv.data(), kLengths, out.data(), lse.data(), Shape(),
                                        dropout);
  double loss = 0;
  for (size_t i = 0; i < kOut; ++i) loss += w[i] * out[i];
  return loss;
}

void CheckGradients(const AttentionDropout& dropout) {
  std::vector<double> qkv = Random(kQkv, 1);
  const std::vector<double> w = Random(kOut, 2);
  std::vector<double> out(kOut), lse(size_t(kB) * kH * kS), d_qkv(kQkv, 0.0);
  BidirectionalAttentionForward<double>(qkv.data(), kLengths, out.data(), lse.data(), Shape(),
                                        dropout);
  BidirectionalAttentionBackward<double>(w.data(), qkv.data(), out.data(), lse.data(), kLengths,
                                         d_qkv.data(), Shape(), dropout);
  double worst = 0;
  for (size_t i = 0; i < kQkv; ++i) {
    const double saved = qkv[i];
    const double h = 1e-6;
    qkv[i] = saved + h;
    const double up = Loss(qkv, w, dropout);
    qkv[i] = saved - h;
    const double down = Loss(qkv, w, dropout);
    qkv[i] = saved;
    const double numeric = (up - down) / (2 * h);
    worst = std::max(worst, std::abs(numeric - d_qkv[i]));
  }
  std::printf("bidirectional attention, dropout %.1f: worst gradient error %.2e\n", dropout.p,
              worst);
  EXPECT_LT(worst, 1e-7);
}

TEST(BidirectionalAttentionTest, GradientsMatchFiniteDifferences) {
  CheckGradients({});
  AttentionDropout dropout;
  dropout.p = 0.3f;
  dropout.key = 77;
  dropout.head_offset = 4;  // heads 4..7 of 8, as tensor rank 1 of 2 holds them
  dropout.total_heads = 8;
  CheckGradients(dropout);
}

TEST(BidirectionalAttentionTest, QueriesSeeBothDirectionsAndNoPadding) {
  std::vector<double> qkv = Random(kQkv, 3);
  std::vector<double> out(kOut), lse(size_t(kB) * kH * kS);
  BidirectionalAttentionForward<double>(qkv.data(), kLengths, out.data(), lse.data(), Shape(), {});
  const size_t row = (kH + 2 * kHkv) * kD;
  // Padded queries (sequence 1, positions 4 and 5): zero outputs.
  for (int i = 4; i < kS; ++i) {
    for (int c = 0; c < kH * kD; ++c) EXPECT_EQ(out[((1 * kS) + i) * kH * kD + c], 0.0);
  }
  // Changing a padded key and value changes nothing; changing a later real one changes the
  // first query's output (it looks forward, unlike causal attention).
  std::vector<double> changed = qkv;
  for (int c = kH * kD; c < static_cast<int>(row); ++c) changed[(1 * kS + 5) * row + c] += 1.0;
  std::vector<double> out2(kOut);
  BidirectionalAttentionForward<double>(changed.data(), kLengths, out2.data(), lse.data(), Shape(),
                                        {});
  EXPECT_EQ(out, out2);
  changed = qkv;
  for (int c = kH * kD; c < static_cast<int>(row); ++c) changed[(0 * kS + 5) * row + c] += 1.0;
  BidirectionalAttentionForward<double>(changed.data(), kLengths, out2.data(), lse.data(), Shape(),
                                        {});
  EXPECT_NE(out2[0], out[0]);
}

TEST(BidirectionalAttentionTest, TheSameBitsForAnyThreadCount) {
  const std::vector<double> qkv64 = Random(kQkv, 4), w64 = Random(kOut, 5);
  const std::vector<float> qkv(qkv64.begin(), qkv64.end()), w(w64.begin(), w64.end());
  AttentionDropout dropout;
  dropout.p = 0.1f;
  dropout.key = 9;
  std::vector<float> first;
  for (int threads : {1, 2, 3}) {
    omp_set_num_threads(threads);
    std::vector<float> out(kOut), lse(size_t(kB) * kH * kS), d_qkv(kQkv, 0.0f);
    BidirectionalAttentionForward<float>(qkv.data(), kLengths, out.data(), lse.data(), Shape(),
                                         dropout);
    BidirectionalAttentionBackward<float>(w.data(), qkv.data(), out.data(), lse.data(), kLengths,
                                          d_qkv.data(), Shape(), dropout);
    d_qkv.insert(d_qkv.end(), out.begin(), out.end());
    if (first.empty()) {
      first = d_qkv;
    } else {
      EXPECT_EQ(d_qkv, first) << threads << " threads";
    }
  }
}

}  // namespace
}  // namespace mtrain::cpu
