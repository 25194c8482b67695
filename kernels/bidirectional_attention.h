// Bidirectional attention with a key-padding mask: BERT's self-attention (issue 35). Query
// i of sequence b attends to every real position j < lengths[b], before and after it; the
// positions from lengths[b] on are padding: as keys they get no weight, as queries they
// give zero outputs and pass no gradient. Layout and dropout as kernels/attention.h's:
// qkv[B, S, H + 2 Hkv, D] (query head h reads key-value head h / (H / Hkv)), out[B, S, H*D],
// lse[B, H, S] (0 on padded queries), the probabilities' dropout mask at global index
// ((b * total_heads + head_offset + h) * S + i) * S + j.
//
// Runs the causal core's blocked form (attention_core.inc, one build per instruction set,
// bit-identical to each other): blocks of 64 queries against the sequence's real keys as
// GEMMs, only each query's log-sum-exp kept between the passes. Parallel over (batch, head)
// in the forward and over (batch, key-value head) in the backward, so no two threads add
// into the same d_k or d_v: bit-identical for any thread count. The first, scalar form
// (each query's scores one at a time, no GEMMs) is the reference its tests compare with
// (bidirectional_attention_test.cc).
#ifndef MTRAIN_KERNELS_BIDIRECTIONAL_ATTENTION_H_
#define MTRAIN_KERNELS_BIDIRECTIONAL_ATTENTION_H_

#include <cstdint>

#include "kernels/attention.h"

namespace mtrain::cpu {

// `lengths[b]` in [1, S]: sequence b's real positions.
template <typename T>
void BidirectionalAttentionForward(const T* qkv, const int32_t* lengths, T* out, T* lse,
                                   const AttentionShape& shape, const AttentionDropout& dropout);

// Accumulates d_qkv[B, S, (H + 2 Hkv) * D] from d_out, given the forward's out and lse.
template <typename T>
void BidirectionalAttentionBackward(const T* d_out, const T* qkv, const T* out, const T* lse,
                                    const int32_t* lengths, T* d_qkv, const AttentionShape& shape,
                                    const AttentionDropout& dropout);

}  // namespace mtrain::cpu

#endif  // MTRAIN_KERNELS_BIDIRECTIONAL_ATTENTION_H_
