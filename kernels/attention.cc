#include "kernels/attention.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernels/dropout.h"

namespace mtrain::cpu {
namespace {

// ---------------------------------------------------------------------------------------------
// A small dense product, C (+)= A B, tiled so that each row of B loaded from cache feeds
// several rows of C held in registers. Every element of C is summed over k in increasing
// order starting from its initial value, whatever the tile shape, so the result is the same
// for every tiling and thread count.

// Reads A one scalar at a time: A[row, k] = data[row * row_stride + k * k_stride], which
// serves a matrix (k_stride 1) and its transpose (row_stride 1) alike.
template <typename T>
struct ScalarOperand {
  const T* data;
  size_t row_stride;
  size_t k_stride;
  T at(int row, int k) const {
    return data[static_cast<size_t>(row) * row_stride + static_cast<size_t>(k) * k_stride];
  }
};

constexpr int kTileRows = 4;
// Two 128-bit vectors of T per row: 4 x 2 accumulator registers.
template <typename T>
constexpr int kTileCols = 32 / static_cast<int>(sizeof(T));

template <typename T, int kRows, int kCols>
inline void ProductTile(const ScalarOperand<T>& a, const T* b, size_t ldb, T* c, size_t ldc,
                        int row0, int col0, int k_count, bool accumulate) {
  // Fully unrolled so that the compiler keeps `acc` in vector registers.
  T acc[kRows][kCols];
#pragma GCC unroll 8
  for (int r = 0; r < kRows; ++r) {
#pragma GCC unroll 8
    for (int col = 0; col < kCols; ++col) {
      acc[r][col] = accumulate ? c[static_cast<size_t>(row0 + r) * ldc + col0 + col] : T(0);
    }
  }
  for (int k = 0; k < k_count; ++k) {
    const T* b_row = b + static_cast<size_t>(k) * ldb + col0;
#pragma GCC unroll 8
    for (int r = 0; r < kRows; ++r) {
      const T a_rk = a.at(row0 + r, k);
#pragma GCC unroll 8
      for (int col = 0; col < kCols; ++col) acc[r][col] += a_rk * b_row[col];
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < kRows; ++r) {
#pragma GCC unroll 8
    for (int col = 0; col < kCols; ++col) {
      c[static_cast<size_t>(row0 + r) * ldc + col0 + col] = acc[r][col];
    }
  }
}

// C[0:rows, 0:cols] = (accumulate ? C : 0) + sum_{k < k_count} A[:, k] B[k, :], with B and
// C row-major (leading dimensions ldb, ldc).
template <typename T>
void Product(const ScalarOperand<T>& a, const T* b, size_t ldb, T* c, size_t ldc, int rows,
             int cols, int k_count, bool accumulate) {
  constexpr int kCols = kTileCols<T>;
  const int full_cols = cols - cols % kCols;
  int row = 0;
  for (; row + kTileRows <= rows; row += kTileRows) {
    for (int col = 0; col < full_cols; col += kCols) {
      ProductTile<T, kTileRows, kCols>(a, b, ldb, c, ldc, row, col, k_count, accumulate);
    }
  }
  for (; row < rows; ++row) {
    for (int col = 0; col < full_cols; col += kCols) {
      ProductTile<T, 1, kCols>(a, b, ldb, c, ldc, row, col, k_count, accumulate);
    }
  }
  for (row = 0; row < rows; ++row) {
    for (int col = full_cols; col < cols; ++col) {
      T sum = accumulate ? c[static_cast<size_t>(row) * ldc + col] : T(0);
      for (int k = 0; k < k_count; ++k) sum += a.at(row, k) * b[static_cast<size_t>(k) * ldb + col];
      c[static_cast<size_t>(row) * ldc + col] = sum;
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Addressing of one (batch, head) pair inside the packed tensors.
struct HeadView {
  const AttentionShape& shape;
  int batch;
  int head;

  size_t qkv_stride() const { return static_cast<size_t>(3) * shape.heads * shape.head_dim; }
  size_t out_stride() const { return static_cast<size_t>(shape.heads) * shape.head_dim; }
  size_t token(int position) const { return static_cast<size_t>(batch) * shape.seq + position; }

  // Offsets of q, k and v of `position` inside qkv[B, S, 3, H, D].
  size_t q(int position) const {
    return token(position) * qkv_stride() + static_cast<size_t>(head) * shape.head_dim;
  }
  size_t k(int position) const { return q(position) + out_stride(); }
  size_t v(int position) const { return q(position) + 2 * out_stride(); }
  // Offset of this head's slice of out[B, S, H, D] at `position`.
  size_t out(int position) const {
    return token(position) * out_stride() + static_cast<size_t>(head) * shape.head_dim;
  }
  // Offset of row `i` of this head's [S, S] block in att[B, H, S, S] (and in scratch).
  size_t att_row(int i) const {
    return ((static_cast<size_t>(batch) * shape.heads + head) * shape.seq + i) * shape.seq;
  }
};

// Which attention probabilities survive dropout, by the global index documented in
// attention.h, so that head-parallel ranks drop what a single rank would.
class ProbabilityDropout {
 public:
  ProbabilityDropout(const AttentionDropout& dropout, const AttentionShape& shape, int batch,
                     int head)
      : p_(dropout.p), key_(dropout.key), seq_(static_cast<uint64_t>(shape.seq)) {
    const uint64_t total_heads = dropout.total_heads > 0 ? dropout.total_heads : shape.heads;
    head_base_ =
        (static_cast<uint64_t>(batch) * total_heads + dropout.head_offset + head) * seq_ * seq_;
  }

  bool enabled() const { return p_ != 0.0f; }
  bool Keep(int i, int j) const {
    return DropoutKeep(key_, head_base_ + static_cast<uint64_t>(i) * seq_ + j, p_);
  }

 private:
  float p_;
  uint64_t key_;
  uint64_t seq_;
  uint64_t head_base_ = 0;
};

// This head's K (or V) as a [D, S] matrix, so that products against every key read
// contiguous rows.
template <typename T>
std::vector<T> Transposed(const T* qkv, const HeadView& view, bool values) {
  const int S = view.shape.seq;
  const int D = view.shape.head_dim;
  std::vector<T> transposed(static_cast<size_t>(D) * S);
  for (int j = 0; j < S; ++j) {
    const T* row = qkv + (values ? view.v(j) : view.k(j));
    for (int d = 0; d < D; ++d) transposed[static_cast<size_t>(d) * S + j] = row[d];
  }
  return transposed;
}

// keep_scales[i - i0][j] = M_ij / (1 - p), or 0 where dropped, for rows [i0, i_end) and
// j <= i; 0 for i < j < i_end (the columns a block product reads). Each element is hashed
// once and the row serves every use of the mask.
template <typename T>
void KeepScales(int i0, int i_end, int S, const ProbabilityDropout& dropout, T drop_scale,
                T* keep_scales) {
  for (int i = i0; i < i_end; ++i) {
    T* row = keep_scales + static_cast<size_t>(i - i0) * S;
    for (int j = 0; j <= i; ++j) row[j] = dropout.Keep(i, j) ? drop_scale : T(0);
    std::fill(row + i + 1, row + i_end, T(0));
  }
}

// weights[r][j] = p_rows[r][j] * keep_scales[r][j] for the rows and columns of a block.
template <typename T>
void ScaleRows(const T* p_rows, const T* keep_scales, int rows, int cols, int S, T* weights) {
  for (size_t r = 0; r < static_cast<size_t>(rows); ++r) {
    for (int j = 0; j < cols; ++j) weights[r * S + j] = p_rows[r * S + j] * keep_scales[r * S + j];
  }
}

// Forward of one head, kTileRows queries at a time: scores, causal softmax into att, then
// out = dropout(att) V.
template <typename T>
void HeadForward(const T* qkv, T* out, T* att, const HeadView& view,
                 const ProbabilityDropout& dropout, T drop_scale) {
  const int S = view.shape.seq;
  const int D = view.shape.head_dim;
  const T scale = T(1) / std::sqrt(static_cast<T>(D));
  const std::vector<T> k_transposed = Transposed(qkv, view, /*values=*/false);
  const size_t block_size = dropout.enabled() ? static_cast<size_t>(kTileRows) * S : 0;
  std::vector<T> keep_scales(block_size), weights(block_size);

  for (int i0 = 0; i0 < S; i0 += kTileRows) {
    const int i_end = std::min(i0 + kTileRows, S);
    const int rows = i_end - i0;
    T* att_rows = att + view.att_row(i0);
    // Scores q_i . k_j for j < i_end; the part above the diagonal is overwritten below.
    Product(ScalarOperand<T>{qkv + view.q(i0), view.qkv_stride(), 1}, k_transposed.data(),
            static_cast<size_t>(S), att_rows, static_cast<size_t>(S), rows, i_end, D, false);
    for (int i = i0; i < i_end; ++i) {
      T* row = att_rows + static_cast<size_t>(i - i0) * S;
      const int visible = i + 1;  // causal: keys 0..i
      for (int j = 0; j < visible; ++j) row[j] *= scale;
      const T row_max = *std::max_element(row, row + visible);
      T sum = 0;
      for (int j = 0; j < visible; ++j) {
        row[j] = std::exp(row[j] - row_max);
        sum += row[j];
      }
      const T inverse_sum = T(1) / sum;
      for (int j = 0; j < visible; ++j) row[j] *= inverse_sum;
      std::fill(row + visible, row + S, T(0));
    }
    const T* weight_rows = att_rows;
    if (dropout.enabled()) {
      KeepScales(i0, i_end, S, dropout, drop_scale, keep_scales.data());
      ScaleRows(att_rows, keep_scales.data(), rows, i_end, S, weights.data());
      weight_rows = weights.data();
    }
    Product(ScalarOperand<T>{weight_rows, static_cast<size_t>(S), 1}, qkv + view.v(0),
            view.qkv_stride(), out + view.out(i0), view.out_stride(), rows, D, i_end, false);
  }
}

// Backward of one head with the saved (pre-dropout) probabilities P, kept mask M and
// s = 1 / (1 - p), kTileRows queries at a time:
//   dP_ij = (dO_i . V_j) M_ij s               (scratch)
//   dS_ij = P_ij (dP_ij - sum_k P_ik dP_ik)   (scratch, in place, times the score scale)
//   dQ_i = sum_j dS_ij K_j,   dK_j += sum_i dS_ij Q_i,   dV_j += sum_i (P M s)_ij dO_i
// dQ/dK/dV are summed in local buffers and added to d_qkv once at the end.
template <typename T>
void HeadBackward(const T* d_out, const T* qkv, const T* att, T* d_qkv, T* scratch,
                  const HeadView& view, const ProbabilityDropout& dropout, T drop_scale) {
  const int S = view.shape.seq;
  const int D = view.shape.head_dim;
  const T scale = T(1) / std::sqrt(static_cast<T>(D));
  const size_t head_size = static_cast<size_t>(S) * D;
  const std::vector<T> v_transposed = Transposed(qkv, view, /*values=*/true);
  std::vector<T> d_q(head_size, T(0));
  std::vector<T> d_k(head_size, T(0));
  std::vector<T> d_v(head_size, T(0));
  const size_t block_size = dropout.enabled() ? static_cast<size_t>(kTileRows) * S : 0;
  std::vector<T> keep_scales(block_size), weights(block_size);

  for (int i0 = 0; i0 < S; i0 += kTileRows) {
    const int i_end = std::min(i0 + kTileRows, S);
    const int rows = i_end - i0;
    const T* p_rows = att + view.att_row(i0);
    T* d_rows = scratch + view.att_row(i0);
    if (dropout.enabled()) KeepScales(i0, i_end, S, dropout, drop_scale, keep_scales.data());
    Product(ScalarOperand<T>{d_out + view.out(i0), view.out_stride(), 1}, v_transposed.data(),
            static_cast<size_t>(S), d_rows, static_cast<size_t>(S), rows, i_end, D, false);
    for (int i = i0; i < i_end; ++i) {
      const T* p_row = p_rows + static_cast<size_t>(i - i0) * S;
      T* d_row = d_rows + static_cast<size_t>(i - i0) * S;
      const int visible = i + 1;
      if (dropout.enabled()) {
        const T* keep_row = keep_scales.data() + static_cast<size_t>(i - i0) * S;
        for (int j = 0; j < visible; ++j) d_row[j] *= keep_row[j];
      }
      T p_dot_dp = 0;
      for (int j = 0; j < visible; ++j) p_dot_dp += p_row[j] * d_row[j];
      for (int j = 0; j < visible; ++j) d_row[j] = p_row[j] * (d_row[j] - p_dot_dp) * scale;
      std::fill(d_row + visible, d_row + i_end, T(0));
    }
    const T* weight_rows = p_rows;
    if (dropout.enabled()) {
      ScaleRows(p_rows, keep_scales.data(), rows, i_end, S, weights.data());
      weight_rows = weights.data();
    }
    // dQ of this block's queries: every key they see is in columns [0, i_end).
    Product(ScalarOperand<T>{d_rows, static_cast<size_t>(S), 1}, qkv + view.k(0), view.qkv_stride(),
            d_q.data() + static_cast<size_t>(i0) * D, static_cast<size_t>(D), rows, D, i_end,
            false);
    // This block's share of dK and dV for every key j < i_end: transposed reads of dS and
    // of the dropped probabilities, summed over the block's queries.
    Product(ScalarOperand<T>{d_rows, 1, static_cast<size_t>(S)}, qkv + view.q(i0),
            view.qkv_stride(), d_k.data(), static_cast<size_t>(D), i_end, D, rows, true);
    Product(ScalarOperand<T>{weight_rows, 1, static_cast<size_t>(S)}, d_out + view.out(i0),
            view.out_stride(), d_v.data(), static_cast<size_t>(D), i_end, D, rows, true);
  }

  for (int position = 0; position < S; ++position) {
    const size_t local = static_cast<size_t>(position) * D;
    T* d_q_out = d_qkv + view.q(position);
    T* d_k_out = d_qkv + view.k(position);
    T* d_v_out = d_qkv + view.v(position);
    for (int d = 0; d < D; ++d) {
      d_q_out[d] += d_q[local + d];
      d_k_out[d] += d_k[local + d];
      d_v_out[d] += d_v[local + d];
    }
  }
}

template <typename T>
T DropScale(const AttentionDropout& dropout) {
  return T(1) / (T(1) - static_cast<T>(dropout.p));
}

// Below this many score multiply-adds (pairs * S * S * D) waking the OpenMP threads costs
// more than the work they would share.
constexpr double kParallelWork = 65536;

// Read only by OpenMP pragmas, which a build without OpenMP ignores (see BUILD).
[[maybe_unused]] bool Parallel(const AttentionShape& shape) {
  const double pairs = static_cast<double>(shape.batch) * shape.heads;
  return pairs > 1 && pairs * shape.seq * shape.seq * shape.head_dim >= kParallelWork;
}

}  // namespace

// Each (batch, head) pair is independent and owned by one thread, which writes only its own
// slices of out/att/d_qkv/scratch: results do not depend on the thread count.
template <typename T>
void AttentionForward(const T* qkv, T* out, T* att, const AttentionShape& shape,
                      const AttentionDropout& dropout) {
  const int pairs = shape.batch * shape.heads;
  const T drop_scale = DropScale<T>(dropout);
#pragma omp parallel for schedule(static) if (Parallel(shape))
  for (int pair = 0; pair < pairs; ++pair) {
    const int batch = pair / shape.heads;
    const int head = pair % shape.heads;
    HeadForward(qkv, out, att, HeadView{shape, batch, head},
                ProbabilityDropout(dropout, shape, batch, head), drop_scale);
  }
}

template <typename T>
void AttentionBackward(const T* d_out, const T* qkv, const T* att, T* d_qkv, T* scratch,
                       const AttentionShape& shape, const AttentionDropout& dropout) {
  const int pairs = shape.batch * shape.heads;
  const T drop_scale = DropScale<T>(dropout);
#pragma omp parallel for schedule(static) if (Parallel(shape))
  for (int pair = 0; pair < pairs; ++pair) {
    const int batch = pair / shape.heads;
    const int head = pair % shape.heads;
    HeadBackward(d_out, qkv, att, d_qkv, scratch, HeadView{shape, batch, head},
                 ProbabilityDropout(dropout, shape, batch, head), drop_scale);
  }
}

template void AttentionForward<float>(const float*, float*, float*, const AttentionShape&,
                                      const AttentionDropout&);
template void AttentionForward<double>(const double*, double*, double*, const AttentionShape&,
                                       const AttentionDropout&);
template void AttentionBackward<float>(const float*, const float*, const float*, float*, float*,
                                       const AttentionShape&, const AttentionDropout&);
template void AttentionBackward<double>(const double*, const double*, const double*, double*,
                                        double*, const AttentionShape&, const AttentionDropout&);

}  // namespace mtrain::cpu
