#include "kernels/bidirectional_attention.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/dropout.h"

namespace mtrain::cpu {
namespace {

// ---- The scalar reference: the kernel's first form, each query's scores one at a time.
// Where things are in qkv[B, S, H + 2 Hkv, D] and out[B, S, H, D].
struct Layout {
  explicit Layout(const AttentionShape& s)
      : S(s.seq), H(s.heads), Hkv(s.kv_head_count()), D(s.head_dim), row((H + 2 * Hkv) * D) {}
  size_t Query(int b, int i, int h) const { return (size_t(b) * S + i) * row + size_t(h) * D; }
  size_t Key(int b, int j, int g) const { return (size_t(b) * S + j) * row + size_t(H + g) * D; }
  size_t Value(int b, int j, int g) const {
    return (size_t(b) * S + j) * row + size_t(H + Hkv + g) * D;
  }
  size_t Out(int b, int i, int h) const { return ((size_t(b) * S + i) * H + h) * D; }
  size_t Lse(int b, int h, int i) const { return (size_t(b) * H + h) * S + i; }
  int S, H, Hkv, D;
  size_t row;
};

// The factor probability (b, h, i, j) is multiplied by after dropout: 0 or 1 / (1 - p).
template <typename T>
T DropFactor(const AttentionDropout& d, int total_heads, int b, int h, int i, int j, int S) {
  if (d.p <= 0) return T(1);
  const uint64_t index =
      ((uint64_t(b) * total_heads + d.head_offset + h) * uint64_t(S) + i) * uint64_t(S) + j;
  return DropoutKeep(d.key, index, d.p) ? T(1) / (T(1) - T(d.p)) : T(0);
}

// Query i's scaled scores over keys [0, length) into `scores`; returns their log-sum-exp
// and leaves the probabilities in `scores`.
template <typename T>
T Softmax(const T* qkv, const Layout& at, int b, int h, int i, int length, T* scores) {
  const int g = h / (at.H / at.Hkv);
  const T scale = T(1) / std::sqrt(T(at.D));
  const T* q = qkv + at.Query(b, i, h);
  T max = -INFINITY;
  for (int j = 0; j < length; ++j) {
    const T* k = qkv + at.Key(b, j, g);
    T dot = 0;
    for (int d = 0; d < at.D; ++d) dot += q[d] * k[d];
    scores[j] = dot * scale;
    max = std::max(max, scores[j]);
  }
  T sum = 0;
  for (int j = 0; j < length; ++j) {
    scores[j] = std::exp(scores[j] - max);
    sum += scores[j];
  }
  for (int j = 0; j < length; ++j) scores[j] /= sum;
  return max + std::log(sum);
}

template <typename T>
void ReferenceForward(const T* qkv, const int32_t* lengths, T* out, T* lse,
                      const AttentionShape& shape, const AttentionDropout& dropout) {
  const Layout at(shape);
  const int total_heads = dropout.total_heads > 0 ? dropout.total_heads : shape.heads;
  {
    std::vector<T> p(at.S);
    for (int b = 0; b < shape.batch; ++b) {
      for (int h = 0; h < at.H; ++h) {
        const int length = std::clamp(lengths[b], 1, at.S);
        const int g = h / (at.H / at.Hkv);
        for (int i = 0; i < at.S; ++i) {
          T* o = out + at.Out(b, i, h);
          std::fill(o, o + at.D, T(0));
          if (i >= length) {
            lse[at.Lse(b, h, i)] = T(0);
            continue;
          }
          lse[at.Lse(b, h, i)] = Softmax(qkv, at, b, h, i, length, p.data());
          for (int j = 0; j < length; ++j) {
            const T weight = p[j] * DropFactor<T>(dropout, total_heads, b, h, i, j, at.S);
            if (weight == T(0)) continue;
            const T* v = qkv + at.Value(b, j, g);
            for (int d = 0; d < at.D; ++d) o[d] += weight * v[d];
          }
        }
      }
    }
  }
}

template <typename T>
void ReferenceBackward(const T* d_out, const T* qkv, const T* out, const T* lse,
                       const int32_t* lengths, T* d_qkv, const AttentionShape& shape,
                       const AttentionDropout& dropout) {
  (void)lse;  // the probabilities are recomputed exactly as the forward made them
  const Layout at(shape);
  const int total_heads = dropout.total_heads > 0 ? dropout.total_heads : shape.heads;
  const int group = at.H / at.Hkv;
  const T scale = T(1) / std::sqrt(T(at.D));
  {
    std::vector<T> p(at.S), dp(at.S);
    for (int b = 0; b < shape.batch; ++b) {
      for (int g = 0; g < at.Hkv; ++g) {
        const int length = std::clamp(lengths[b], 1, at.S);
        // The group's query heads in order: this thread alone adds into key-value head g.
        for (int h = g * group; h < (g + 1) * group; ++h) {
          for (int i = 0; i < length; ++i) {
            Softmax(qkv, at, b, h, i, length, p.data());
            const T* d_o = d_out + at.Out(b, i, h);
            const T* o = out + at.Out(b, i, h);
            // delta = sum_j p'_ij dp'_ij = d_out_i . out_i
            T delta = 0;
            for (int d = 0; d < at.D; ++d) delta += d_o[d] * o[d];
            for (int j = 0; j < length; ++j) {
              const T factor = DropFactor<T>(dropout, total_heads, b, h, i, j, at.S);
              const T* v = qkv + at.Value(b, j, g);
              T* d_v = d_qkv + at.Value(b, j, g);
              T dp_kept = 0;  // d out_i . v_j: the gradient of the dropped probability
              for (int d = 0; d < at.D; ++d) dp_kept += d_o[d] * v[d];
              const T weight = p[j] * factor;
              for (int d = 0; d < at.D; ++d) d_v[d] += weight * d_o[d];
              dp[j] = p[j] * (dp_kept * factor - delta);  // d score_ij, before the scale
            }
            const T* q = qkv + at.Query(b, i, h);
            T* d_q = d_qkv + at.Query(b, i, h);
            for (int j = 0; j < length; ++j) {
              const T* k = qkv + at.Key(b, j, g);
              T* d_k = d_qkv + at.Key(b, j, g);
              const T ds = dp[j] * scale;
              for (int d = 0; d < at.D; ++d) {
                d_q[d] += ds * k[d];
                d_k[d] += ds * q[d];
              }
            }
          }
        }
      }
    }
  }
}

// ---- The kernel against it.

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

// Three padded sequences of 70 (one full, one of 5, one of 67: the kernel's query blocks
// are 64, so the last crosses one), 4 query heads reading 2 key-value heads of 16, with
// dropout on a head slice: the kernel's outputs, log-sum-exps and gradients against the
// scalar reference's (float: the blocked sums and the fast exponential differ from the
// reference's in the last bits; double: to 1e-12).
template <typename T>
void CompareWithReference(double tolerance) {
  const AttentionShape shape{3, 70, 4, 16, 2};
  const int32_t lengths[3] = {70, 5, 67};
  const size_t qkv_size = size_t(3) * 70 * (4 + 2 * 2) * 16;
  const size_t out_size = size_t(3) * 70 * 4 * 16;
  const size_t lse_size = size_t(3) * 4 * 70;
  const std::vector<double> qkv64 = Random(qkv_size, 11), d_out64 = Random(out_size, 12);
  const std::vector<T> qkv(qkv64.begin(), qkv64.end()), d_out(d_out64.begin(), d_out64.end());
  AttentionDropout dropout;
  dropout.p = 0.2f;
  dropout.key = 5;
  dropout.head_offset = 4;
  dropout.total_heads = 8;
  std::vector<T> out(out_size), lse(lse_size), d_qkv(qkv_size, T(0));
  std::vector<T> ref_out(out_size), ref_lse(lse_size), ref_d_qkv(qkv_size, T(0));
  BidirectionalAttentionForward<T>(qkv.data(), lengths, out.data(), lse.data(), shape, dropout);
  BidirectionalAttentionBackward<T>(d_out.data(), qkv.data(), out.data(), lse.data(), lengths,
                                    d_qkv.data(), shape, dropout);
  ReferenceForward<T>(qkv.data(), lengths, ref_out.data(), ref_lse.data(), shape, dropout);
  ReferenceBackward<T>(d_out.data(), qkv.data(), ref_out.data(), ref_lse.data(), lengths,
                       ref_d_qkv.data(), shape, dropout);
  const auto worst = [](const std::vector<T>& a, const std::vector<T>& b) {
    double w = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      w = std::max(w, std::abs(double(a[i]) - double(b[i])) / (1.0 + std::abs(double(b[i]))));
    }
    return w;
  };
  EXPECT_LT(worst(out, ref_out), tolerance);
  EXPECT_LT(worst(lse, ref_lse), tolerance);
  EXPECT_LT(worst(d_qkv, ref_d_qkv), tolerance);
  // Padded queries: exactly zero outputs and log-sum-exps; padded keys and values and
  // padded queries: exactly zero gradients.
  const size_t row = (4 + 2 * 2) * 16;
  for (int b = 0; b < 3; ++b) {
    for (int i = lengths[b]; i < 70; ++i) {
      for (int c = 0; c < 4 * 16; ++c) EXPECT_EQ(out[(size_t(b) * 70 + i) * 4 * 16 + c], T(0));
      for (int h = 0; h < 4; ++h) EXPECT_EQ(lse[(size_t(b) * 4 + h) * 70 + i], T(0));
      for (size_t c = 0; c < row; ++c) EXPECT_EQ(d_qkv[(size_t(b) * 70 + i) * row + c], T(0));
    }
  }
}

TEST(BidirectionalAttentionTest, MatchesTheScalarReferenceAcrossQueryBlocks) {
  CompareWithReference<float>(2e-5);
  CompareWithReference<double>(1e-12);
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
