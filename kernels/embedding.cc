#include "kernels/embedding.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>

namespace mtrain::cpu {
namespace {

// Row of the local slice holding `id`, or -1 when another rank's slice holds it. Computed in
// 64 bits so that no id/row_start combination overflows.
inline int64_t LocalRow(int32_t id, int row_start, int num_rows) {
  const int64_t local = static_cast<int64_t>(id) - row_start;
  return (local >= 0 && local < num_rows) ? local : -1;
}

}  // namespace

template <typename T>
void EmbeddingForward(const int32_t* ids, const T* table, T* out, int n, int C, int row_start,
                      int num_rows, bool accumulate) {
  for (int i = 0; i < n; ++i) {
    T* out_row = out + static_cast<size_t>(i) * C;
    const int64_t local = LocalRow(ids[i], row_start, num_rows);
    if (local < 0) {
      if (!accumulate) std::fill(out_row, out_row + C, T(0));
      continue;
    }
    const T* table_row = table + static_cast<size_t>(local) * C;
    if (accumulate) {
      for (int c = 0; c < C; ++c) out_row[c] += table_row[c];
    } else {
      std::copy(table_row, table_row + C, out_row);
    }
  }
}

// Sequential on purpose: repeated ids add into the same table row, and adding them in token
// order keeps the result deterministic.
template <typename T>
void EmbeddingBackward(const int32_t* ids, const T* d_out, T* d_table, int n, int C, int row_start,
                       int num_rows) {
  for (int i = 0; i < n; ++i) {
    const int64_t local = LocalRow(ids[i], row_start, num_rows);
    if (local < 0) continue;
    const T* d_out_row = d_out + static_cast<size_t>(i) * C;
    T* d_table_row = d_table + static_cast<size_t>(local) * C;
    for (int c = 0; c < C; ++c) d_table_row[c] += d_out_row[c];
  }
}

template void EmbeddingForward<float>(const int32_t*, const float*, float*, int, int, int, int,
                                      bool);
template void EmbeddingForward<double>(const int32_t*, const double*, double*, int, int, int, int,
                                       bool);
template void EmbeddingBackward<float>(const int32_t*, const float*, float*, int, int, int, int);
template void EmbeddingBackward<double>(const int32_t*, const double*, double*, int, int, int, int);

}  // namespace mtrain::cpu
