// Softmax cross-entropy over a vocabulary that may be split across tensor-parallel ranks
// and padded. Only per-token scalars ever cross ranks (max, sum of exponentials, target
// logit), never the logits, as in Megatron's vocab-parallel cross-entropy:
//
//   1. CrossEntropyLocalMax          -> all-reduce MAX over the tensor group
//   2. CrossEntropyLocalSums         -> all-reduce SUM (sum_exp and target_logit)
//   3. CrossEntropyLosses            (per-token losses; the caller averages)
//   4. CrossEntropyBackward          (needs the reduced max and sum_exp)
//
// logits[N, V_local] holds columns [col_start, col_start + V_local) of the padded
// vocabulary; only the first `valid_cols` columns of this shard are real tokens, the rest
// are padding: excluded from the softmax and given zero gradient.
// Conventions: see matmul.h.
#ifndef MTRAIN_KERNELS_CROSS_ENTROPY_H_
#define MTRAIN_KERNELS_CROSS_ENTROPY_H_

#include <cstdint>

namespace mtrain::cpu {

struct VocabShard {
  int rows = 0;        // N tokens
  int cols = 0;        // V_local, the row stride of logits
  int valid_cols = 0;  // real vocabulary columns in this shard (<= cols; may be 0)
  int col_start = 0;   // global column of this shard's column 0
};

// max_out[N] = max over valid columns (-infinity when the shard has none).
template <typename T>
void CrossEntropyLocalMax(const T* logits, const VocabShard& shard, T* max_out);

// With the global max: sum_exp_out[N] = sum over valid columns of exp(logit - max);
// target_logit_out[N] = logit of the target if this shard holds it, else 0.
template <typename T>
void CrossEntropyLocalSums(const T* logits, const int32_t* targets, const T* max,
                           const VocabShard& shard, T* sum_exp_out, T* target_logit_out);

// losses[N] = log(sum_exp) + max - target_logit.
template <typename T>
void CrossEntropyLosses(const T* max, const T* sum_exp, const T* target_logit, int rows, T* losses);

// d_logits[N, V_local] += d_loss[i] * (softmax - onehot(target)) on valid columns, where
// d_loss is the gradient of the final loss with respect to each token's loss (1/N for a
// mean over N tokens): one value `d_loss_per_token` for every token.
template <typename T>
void CrossEntropyBackward(const T* logits, const int32_t* targets, const T* max, const T* sum_exp,
                          const VocabShard& shard, T d_loss_per_token, T* d_logits);

}  // namespace mtrain::cpu

#endif  // MTRAIN_KERNELS_CROSS_ENTROPY_H_
