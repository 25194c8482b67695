// Megatron's tensor-parallel building blocks over one tensor-parallel group.
//
// Mappings (each forward collective paired with its backward conjugate):
//   copy-to-region   f: forward identity,             backward all-reduce (sum)
//   reduce-from-region g: forward all-reduce (sum),   backward identity
//   gather-from-region: forward all-gather along the last dimension, backward split
//   scatter-to-region:  forward split along the last dimension, backward all-gather
// Identity halves need no code; the functions below are the non-trivial halves.
//
// Layers (weights stored [out, in] as torch.nn.Linear; t ranks, this rank's slice local):
//   ColumnParallelLinear  Y_i = X A_i^T + b_i        A split on out; X copied in (f)
//   RowParallelLinear     Y = g(sum_i X_i B_i^T) + b B split on in; b replicated
//   VocabParallelEmbedding  out = g(lookup in this rank's vocabulary rows)
//   VocabParallelCrossEntropy  all-reduces only per-token scalars (max, sum of
//                           exponentials, target logit), never the logits
// A transformer layer is then column -> row twice (attention: QKV column-parallel, heads
// split, output projection row-parallel; MLP: fc column, proj row): one all-reduce
// forward and one backward per block.
//
// With a group of size 1 every collective is skipped, so the same code is the single-rank
// model. Conventions (row-major, backward accumulates) as in kernels/matmul.h.
#ifndef MTRAIN_WORKER_PARALLEL_TENSOR_PARALLEL_H_
#define MTRAIN_WORKER_PARALLEL_TENSOR_PARALLEL_H_

#include <cstddef>
#include <cstdint>
#include <functional>

#include "absl/status/status.h"
#include "kernels/cross_entropy.h"
#include "kernels/matmul.h"
#include "worker/parallel/reduce_op.h"

namespace mtrain {

// This rank's tensor-parallel group, as the engine sees it: hooks rather than a
// Communicator, so the engine also runs in double precision (finite-difference tests)
// and without any transport. Unset hooks with size > 1 are an error (FAILED_PRECONDITION).
template <typename T>
struct TensorParallelGroup {
  int size = 1;
  int rank = 0;
  std::function<absl::Status(T* data, size_t count, ReduceOp op)> all_reduce;
  // out[size * count] = every rank's in[count], in rank order.
  std::function<absl::Status(const T* in, T* out, size_t count)> all_gather;
  // out[count] = block `rank` of the sum over ranks of in[size * count] (sequence
  // parallelism's conjugate of all_gather).
  std::function<absl::Status(const T* in, T* out, size_t count)> reduce_scatter;
};

namespace tp {

// --- Mappings -----------------------------------------------------------------------

// f backward / g forward: in-place sum over the group.
template <typename T>
absl::Status AllReduceSum(const TensorParallelGroup<T>& group, T* data, size_t count);

// Gather forward: full[rows, size * cols] from every rank's local[rows, cols].
template <typename T>
absl::Status GatherLastDim(const TensorParallelGroup<T>& group, const T* local, T* full, int rows,
                           int cols);

// Scatter forward / gather backward: local[rows, cols] = this rank's column block of
// full[rows, size * cols]. With accumulate, adds instead of overwriting.
template <typename T>
void SplitLastDim(const TensorParallelGroup<T>& group, const T* full, T* local, int rows, int cols,
                  bool accumulate);

// Sequence parallelism (Korthikanti et al. 2022): rank r holds rows [r * rows, (r + 1) *
// rows) of the [size * rows, cols] activations between the tensor-parallel blocks.
// All-gather forward / reduce-scatter backward before a column-parallel block:
// full[size * rows, cols] from every rank's local[rows, cols].
template <typename T>
absl::Status GatherSequence(const TensorParallelGroup<T>& group, const T* local, T* full, int rows,
                            int cols);
// Reduce-scatter forward / all-gather backward after a row-parallel block: local[rows,
// cols] = this rank's rows of the sum over ranks of full[size * rows, cols].
template <typename T>
absl::Status ReduceScatterSequence(const TensorParallelGroup<T>& group, const T* full, T* local,
                                   int rows, int cols);

// --- Layers ---------------------------------------------------------------------------

// y[N, out_local] = x[N, in] @ weight[out_local, in]^T + bias[out_local].
template <typename T>
void ColumnParallelLinearForward(const T* x, const T* weight, const T* bias, T* y, int N, int in,
                                 int out_local);

// Accumulates d_weight, d_bias and d_x[N, in] (overwrites d_x with kOverwrite), then
// all-reduces d_x (f's conjugate): every rank ends with the full input gradient. `d_x` must
// hold only this layer's contribution when it is reduced (callers pass a zeroed buffer, or
// kOverwrite).
template <typename T>
absl::Status ColumnParallelLinearBackward(
    const TensorParallelGroup<T>& group, const T* d_y, const T* x, const T* weight, T* d_x,
    T* d_weight, T* d_bias, int N, int in, int out_local,
    cpu::InputGradient input_gradient = cpu::InputGradient::kAccumulate);

// y[N, out] = all-reduce(x_local[N, in_local] @ weight[out, in_local]^T) + bias[out].
template <typename T>
absl::Status RowParallelLinearForward(const TensorParallelGroup<T>& group, const T* x_local,
                                      const T* weight, const T* bias, T* y, int N, int in_local,
                                      int out);

// d_y is the same on every rank (g's conjugate is the identity): accumulates d_weight,
// d_bias (identical on every rank, as the replicated bias must be) and d_x_local (or
// overwrites it with kOverwrite).
template <typename T>
void RowParallelLinearBackward(const T* d_y, const T* x_local, const T* weight, T* d_x_local,
                               T* d_weight, T* d_bias, int N, int in_local, int out,
                               cpu::InputGradient input_gradient = cpu::InputGradient::kAccumulate);

// out[N, C] = the rows of `ids` in the full table, from this rank's rows
// [vocab_start, vocab_start + vocab_local) of it and an all-reduce.
template <typename T>
absl::Status VocabParallelEmbeddingForward(const TensorParallelGroup<T>& group, const int32_t* ids,
                                           const T* table_local, T* out, int N, int C,
                                           int vocab_start, int vocab_local);

// d_table_local += d_out rows of ids held here (the all-reduce's conjugate is identity).
template <typename T>
void VocabParallelEmbeddingBackward(const int32_t* ids, const T* d_out, T* d_table_local, int N,
                                    int C, int vocab_start, int vocab_local);

// Per-token scalars kept for the backward.
template <typename T>
struct CrossEntropyStats {
  T* max;           // [N] global max over real vocabulary columns
  T* sum_exp;       // [N] global sum of exp(logit - max)
  T* target_logit;  // [N] the target's logit (from the rank that holds it)
};

// Per-token losses[N] from this rank's logits[N, V_local] (columns described by `shard`).
template <typename T>
absl::Status VocabParallelCrossEntropyForward(const TensorParallelGroup<T>& group, const T* logits,
                                              const int32_t* targets, const cpu::VocabShard& shard,
                                              const CrossEntropyStats<T>& stats, T* losses);

// d_logits[N, V_local] += d_loss_per_token * (softmax - onehot) on this rank's columns:
// local, no communication.
template <typename T>
void VocabParallelCrossEntropyBackward(const T* logits, const int32_t* targets,
                                       const cpu::VocabShard& shard,
                                       const CrossEntropyStats<T>& stats, T d_loss_per_token,
                                       T* d_logits);

}  // namespace tp
}  // namespace mtrain

#endif  // MTRAIN_WORKER_PARALLEL_TENSOR_PARALLEL_H_
