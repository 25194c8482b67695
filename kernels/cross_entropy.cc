#include "kernels/cross_entropy.h"

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>

namespace mtrain::cpu {
namespace {

// Below this many logits the OpenMP fork/join costs more than the exponentials it spreads.
constexpr size_t kParallelThreshold = size_t{1} << 15;

// Read only by OpenMP pragmas, which a build without OpenMP ignores (see BUILD).
[[maybe_unused]] bool Parallel(const VocabShard& shard) {
  return static_cast<size_t>(shard.rows) * shard.valid_cols >= kParallelThreshold;
}

// Column of `target` inside this shard, or -1 when another shard (or padding) holds it.
inline int64_t LocalColumn(int32_t target, const VocabShard& shard) {
  const int64_t local = static_cast<int64_t>(target) - shard.col_start;
  return (local >= 0 && local < shard.valid_cols) ? local : -1;
}

}  // namespace

template <typename T>
void CrossEntropyLocalMax(const T* logits, const VocabShard& shard, T* max_out) {
#pragma omp parallel for schedule(static) if (Parallel(shard))
  for (int row = 0; row < shard.rows; ++row) {
    const T* logits_row = logits + static_cast<size_t>(row) * shard.cols;
    T row_max = -std::numeric_limits<T>::infinity();
    for (int col = 0; col < shard.valid_cols; ++col) {
      row_max = logits_row[col] > row_max ? logits_row[col] : row_max;
    }
    max_out[row] = row_max;
  }
}

template <typename T>
void CrossEntropyLocalSums(const T* logits, const int32_t* targets, const T* max,
                           const VocabShard& shard, T* sum_exp_out, T* target_logit_out) {
#pragma omp parallel for schedule(static) if (Parallel(shard))
  for (int row = 0; row < shard.rows; ++row) {
    const T* logits_row = logits + static_cast<size_t>(row) * shard.cols;
    const T row_max = max[row];
    T sum = 0;
    for (int col = 0; col < shard.valid_cols; ++col) sum += std::exp(logits_row[col] - row_max);
    sum_exp_out[row] = sum;
    const int64_t target = LocalColumn(targets[row], shard);
    target_logit_out[row] = target >= 0 ? logits_row[target] : T(0);
  }
}

template <typename T>
void CrossEntropyLosses(const T* max, const T* sum_exp, const T* target_logit, int rows,
                        T* losses) {
  for (int row = 0; row < rows; ++row) {
    losses[row] = std::log(sum_exp[row]) + max[row] - target_logit[row];
  }
}

template <typename T>
void CrossEntropyBackward(const T* logits, const int32_t* targets, const T* max, const T* sum_exp,
                          const VocabShard& shard, T d_loss_per_token, T* d_logits) {
#pragma omp parallel for schedule(static) if (Parallel(shard))
  for (int row = 0; row < shard.rows; ++row) {
    const size_t offset = static_cast<size_t>(row) * shard.cols;
    const T* logits_row = logits + offset;
    T* d_row = d_logits + offset;
    const T row_max = max[row];
    const T inverse_sum = T(1) / sum_exp[row];
    const int64_t target = LocalColumn(targets[row], shard);
    for (int col = 0; col < shard.valid_cols; ++col) {
      const T softmax = std::exp(logits_row[col] - row_max) * inverse_sum;
      const T onehot = col == target ? T(1) : T(0);
      d_row[col] += d_loss_per_token * (softmax - onehot);
    }
  }
}

template void CrossEntropyLocalMax<float>(const float*, const VocabShard&, float*);
template void CrossEntropyLocalMax<double>(const double*, const VocabShard&, double*);
template void CrossEntropyLocalSums<float>(const float*, const int32_t*, const float*,
                                           const VocabShard&, float*, float*);
template void CrossEntropyLocalSums<double>(const double*, const int32_t*, const double*,
                                            const VocabShard&, double*, double*);
template void CrossEntropyLosses<float>(const float*, const float*, const float*, int, float*);
template void CrossEntropyLosses<double>(const double*, const double*, const double*, int, double*);
template void CrossEntropyBackward<float>(const float*, const int32_t*, const float*, const float*,
                                          const VocabShard&, float, float*);
template void CrossEntropyBackward<double>(const double*, const int32_t*, const double*,
                                           const double*, const VocabShard&, double, double*);

}  // namespace mtrain::cpu
