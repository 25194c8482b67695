// Embedding lookup over a slice of a table: this rank holds rows [row_start,
// row_start + num_rows) of the full table (vocab-parallel embedding). Ids outside the
// slice produce zeros, so summing the outputs of all slices (an all-reduce) gives the
// full lookup. Also used for learned position embeddings (ids = positions).
// Conventions: see matmul.h.
#ifndef MTRAIN_KERNELS_EMBEDDING_H_
#define MTRAIN_KERNELS_EMBEDDING_H_

#include <cstdint>

namespace mtrain::cpu {

// out[n, C] = table[ids[i] - row_start] (or 0 outside the slice). With `accumulate` the
// rows are added to out instead of overwriting it.
template <typename T>
void EmbeddingForward(const int32_t* ids, const T* table, T* out, int n, int C, int row_start,
                      int num_rows, bool accumulate);

// d_table[ids[i] - row_start] += d_out[i] for ids inside the slice.
template <typename T>
void EmbeddingBackward(const int32_t* ids, const T* d_out, T* d_table, int n, int C, int row_start,
                       int num_rows);

}  // namespace mtrain::cpu

#endif  // MTRAIN_KERNELS_EMBEDDING_H_
