#include "worker/parallel/tensor_parallel.h"

#include <algorithm>
#include <vector>

#include "common/status_macros.h"
#include "kernels/array_ops.h"
#include "kernels/embedding.h"
#include "kernels/matmul.h"

namespace mtrain::tp {
namespace {

template <typename T>
absl::Status Reduce(const TensorParallelGroup<T>& group, T* data, size_t count, ReduceOp op) {
  if (group.size == 1) return absl::OkStatus();
  if (!group.all_reduce) {
    return absl::FailedPreconditionError("tensor-parallel group of size > 1 without an all-reduce");
  }
  return group.all_reduce(data, count, op);
}

}  // namespace

template <typename T>
absl::Status AllReduceSum(const TensorParallelGroup<T>& group, T* data, size_t count) {
  return Reduce(group, data, count, ReduceOp::kSum);
}

template <typename T>
absl::Status GatherLastDim(const TensorParallelGroup<T>& group, const T* local, T* full, int rows,
                           int cols) {
  const size_t block = static_cast<size_t>(rows) * cols;
  if (group.size == 1) {
    std::copy(local, local + block, full);
    return absl::OkStatus();
  }
  // The gathered blocks are [rank][rows][cols]; interleave them into rows of size * cols.
  std::vector<T> blocks(block * group.size);
  RETURN_IF_ERROR(GatherSequence(group, local, blocks.data(), rows, cols));
  const size_t full_cols = static_cast<size_t>(cols) * group.size;
  for (int r = 0; r < group.size; ++r) {
    for (int row = 0; row < rows; ++row) {
      const T* src = blocks.data() + r * block + static_cast<size_t>(row) * cols;
      std::copy(src, src + cols, full + row * full_cols + static_cast<size_t>(r) * cols);
    }
  }
  return absl::OkStatus();
}

template <typename T>
absl::Status GatherSequence(const TensorParallelGroup<T>& group, const T* local, T* full, int rows,
                            int cols) {
  const size_t block = static_cast<size_t>(rows) * cols;
  if (group.size == 1) {
    std::copy(local, local + block, full);
    return absl::OkStatus();
  }
  if (!group.all_gather) {
    return absl::FailedPreconditionError("tensor-parallel group of size > 1 without an all-gather");
  }
  // Rank-ordered blocks of whole rows are the full matrix already.
  return group.all_gather(local, full, block);
}

template <typename T>
absl::Status ReduceScatterSequence(const TensorParallelGroup<T>& group, const T* full, T* local,
                                   int rows, int cols) {
  const size_t block = static_cast<size_t>(rows) * cols;
  if (group.size == 1) {
    std::copy(full, full + block, local);
    return absl::OkStatus();
  }
  if (!group.reduce_scatter) {
    return absl::FailedPreconditionError(
        "tensor-parallel group of size > 1 without a reduce-scatter");
  }
  return group.reduce_scatter(full, local, block);
}

template <typename T>
void SplitLastDim(const TensorParallelGroup<T>& group, const T* full, T* local, int rows, int cols,
                  bool accumulate) {
  const size_t full_cols = static_cast<size_t>(cols) * group.size;
  for (int row = 0; row < rows; ++row) {
    const T* src = full + row * full_cols + static_cast<size_t>(group.rank) * cols;
    T* dst = local + static_cast<size_t>(row) * cols;
    for (int c = 0; c < cols; ++c) dst[c] = accumulate ? dst[c] + src[c] : src[c];
  }
}

template <typename T>
void ColumnParallelLinearForward(const T* x, const T* weight, const T* bias, T* y, int N, int in,
                                 int out_local) {
  cpu::MatmulForward<T>(x, weight, bias, y, N, in, out_local);
}

template <typename T>
absl::Status ColumnParallelLinearBackward(const TensorParallelGroup<T>& group, const T* d_y,
                                          const T* x, const T* weight, T* d_x, T* d_weight,
                                          T* d_bias, int N, int in, int out_local,
                                          cpu::InputGradient input_gradient) {
  cpu::MatmulBackward<T>(d_y, x, weight, d_x, d_weight, d_bias, N, in, out_local, input_gradient);
  return Reduce(group, d_x, static_cast<size_t>(N) * in, ReduceOp::kSum);
}

template <typename T>
absl::Status RowParallelLinearForward(const TensorParallelGroup<T>& group, const T* x_local,
                                      const T* weight, const T* bias, T* y, int N, int in_local,
                                      int out) {
  // The bias is added once, after the reduction: adding it on every rank before would
  // count it `size` times.
  cpu::MatmulForward<T>(x_local, weight, nullptr, y, N, in_local, out);
  RETURN_IF_ERROR(Reduce(group, y, static_cast<size_t>(N) * out, ReduceOp::kSum));
  if (bias != nullptr) cpu::AddRowVector(bias, y, N, out);
  return absl::OkStatus();
}

template <typename T>
void RowParallelLinearBackward(const T* d_y, const T* x_local, const T* weight, T* d_x_local,
                               T* d_weight, T* d_bias, int N, int in_local, int out,
                               cpu::InputGradient input_gradient) {
  cpu::MatmulBackward<T>(d_y, x_local, weight, d_x_local, d_weight, d_bias, N, in_local, out,
                         input_gradient);
}

template <typename T>
absl::Status VocabParallelEmbeddingForward(const TensorParallelGroup<T>& group, const int32_t* ids,
                                           const T* table_local, T* out, int N, int C,
                                           int vocab_start, int vocab_local) {
  cpu::EmbeddingForward<T>(ids, table_local, out, N, C, vocab_start, vocab_local,
                           /*accumulate=*/false);
  return Reduce(group, out, static_cast<size_t>(N) * C, ReduceOp::kSum);
}

template <typename T>
void VocabParallelEmbeddingBackward(const int32_t* ids, const T* d_out, T* d_table_local, int N,
                                    int C, int vocab_start, int vocab_local) {
  cpu::EmbeddingBackward<T>(ids, d_out, d_table_local, N, C, vocab_start, vocab_local);
}

template <typename T>
absl::Status VocabParallelCrossEntropyForward(const TensorParallelGroup<T>& group, const T* logits,
                                              const int32_t* targets, const cpu::VocabShard& shard,
                                              const CrossEntropyStats<T>& stats, T* losses) {
  const int N = shard.rows;
  cpu::CrossEntropyLocalMax<T>(logits, shard, stats.max);
  RETURN_IF_ERROR(Reduce(group, stats.max, N, ReduceOp::kMax));
  cpu::CrossEntropyLocalSums<T>(logits, targets, stats.max, shard, stats.sum_exp,
                                stats.target_logit);
  RETURN_IF_ERROR(Reduce(group, stats.sum_exp, N, ReduceOp::kSum));
  RETURN_IF_ERROR(Reduce(group, stats.target_logit, N, ReduceOp::kSum));
  cpu::CrossEntropyLosses<T>(stats.max, stats.sum_exp, stats.target_logit, N, losses);
  return absl::OkStatus();
}

template <typename T>
void VocabParallelCrossEntropyBackward(const T* logits, const int32_t* targets,
                                       const cpu::VocabShard& shard,
                                       const CrossEntropyStats<T>& stats, T d_loss_per_token,
                                       T* d_logits) {
  cpu::CrossEntropyBackward<T>(logits, targets, stats.max, stats.sum_exp, shard, d_loss_per_token,
                               d_logits);
}

#define MTRAIN_INSTANTIATE_TP(T)                                                                   \
  template absl::Status AllReduceSum(const TensorParallelGroup<T>&, T*, size_t);                   \
  template absl::Status GatherLastDim(const TensorParallelGroup<T>&, const T*, T*, int, int);      \
  template void SplitLastDim(const TensorParallelGroup<T>&, const T*, T*, int, int, bool);         \
  template absl::Status GatherSequence(const TensorParallelGroup<T>&, const T*, T*, int, int);     \
  template absl::Status ReduceScatterSequence(const TensorParallelGroup<T>&, const T*, T*, int,    \
                                              int);                                                \
  template void ColumnParallelLinearForward(const T*, const T*, const T*, T*, int, int, int);      \
  template absl::Status ColumnParallelLinearBackward(const TensorParallelGroup<T>&, const T*,      \
                                                     const T*, const T*, T*, T*, T*, int, int,     \
                                                     int, cpu::InputGradient);                     \
  template absl::Status RowParallelLinearForward(const TensorParallelGroup<T>&, const T*,          \
                                                 const T*, const T*, T*, int, int, int);           \
  template void RowParallelLinearBackward(const T*, const T*, const T*, T*, T*, T*, int, int, int, \
                                          cpu::InputGradient);                                     \
  template absl::Status VocabParallelEmbeddingForward(                                             \
      const TensorParallelGroup<T>&, const int32_t*, const T*, T*, int, int, int, int);            \
  template void VocabParallelEmbeddingBackward(const int32_t*, const T*, T*, int, int, int, int);  \
  template absl::Status VocabParallelCrossEntropyForward(const TensorParallelGroup<T>&, const T*,  \
                                                         const int32_t*, const cpu::VocabShard&,   \
                                                         const CrossEntropyStats<T>&, T*);         \
  template void VocabParallelCrossEntropyBackward(                                                 \
      const T*, const int32_t*, const cpu::VocabShard&, const CrossEntropyStats<T>&, T, T*);

MTRAIN_INSTANTIATE_TP(float)
MTRAIN_INSTANTIATE_TP(double)

}  // namespace mtrain::tp
