#include "kernels/bidirectional_attention.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

#include "kernels/dropout.h"

namespace mtrain::cpu {
namespace {

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

}  // namespace

template <typename T>
void BidirectionalAttentionForward(const T* qkv, const int32_t* lengths, T* out, T* lse,
                                   const AttentionShape& shape, const AttentionDropout& dropout) {
  const Layout at(shape);
  const int total_heads = dropout.total_heads > 0 ? dropout.total_heads : shape.heads;
#pragma omp parallel
  {
    std::vector<T> p(at.S);
#pragma omp for collapse(2) schedule(static)
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
void BidirectionalAttentionBackward(const T* d_out, const T* qkv, const T* out, const T* lse,
                                    const int32_t* lengths, T* d_qkv, const AttentionShape& shape,
                                    const AttentionDropout& dropout) {
  (void)lse;  // the probabilities are recomputed exactly as the forward made them
  const Layout at(shape);
  const int total_heads = dropout.total_heads > 0 ? dropout.total_heads : shape.heads;
  const int group = at.H / at.Hkv;
  const T scale = T(1) / std::sqrt(T(at.D));
#pragma omp parallel
  {
    std::vector<T> p(at.S), dp(at.S);
#pragma omp for collapse(2) schedule(static)
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

template void BidirectionalAttentionForward<float>(const float*, const int32_t*, float*, float*,
                                                   const AttentionShape&, const AttentionDropout&);
template void BidirectionalAttentionForward<double>(const double*, const int32_t*, double*, double*,
                                                    const AttentionShape&, const AttentionDropout&);
template void BidirectionalAttentionBackward<float>(const float*, const float*, const float*,
                                                    const float*, const int32_t*, float*,
                                                    const AttentionShape&, const AttentionDropout&);
template void BidirectionalAttentionBackward<double>(const double*, const double*, const double*,
                                                     const double*, const int32_t*, double*,
                                                     const AttentionShape&,
                                                     const AttentionDropout&);

}  // namespace mtrain::cpu
