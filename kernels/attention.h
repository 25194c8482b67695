// Causal multi-head self-attention core (the part between the QKV projection and the
// output projection), for the heads this rank holds.
//
// Layout: qkv[B, S, H + 2 Hkv, D] is exactly the output of the fused QKV matmul
// ([B*S, (H + 2 Hkv) * D]: the Q block of H heads, then the K block and the V block of Hkv
// key-value heads each, heads contiguous inside each block); out[B, S, H, D] = [B*S, H*D]
// feeds the output projection. With Hkv < H (grouped-query attention; Hkv = 1: multi-query)
// query head h reads key-value head h / (H / Hkv), as in Llama 2/3 and HuggingFace's
// repeat_kv; Hkv = H is multi-head attention ([B, S, 3, H, D]).
//   P[b, h, i, j] = softmax_j<=i( q_i . k_j / sqrt(D) )     (j > i masked out)
//   out[b, i, h]  = sum_j dropout(P)[b, h, i, j] v_j
// Conventions: see matmul.h.
#ifndef MTRAIN_KERNELS_ATTENTION_H_
#define MTRAIN_KERNELS_ATTENTION_H_

#include <cstdint>

namespace mtrain::cpu {

struct AttentionShape {
  int batch = 0;     // B
  int seq = 0;       // S
  int heads = 0;     // H: heads on this rank
  int head_dim = 0;  // D
  int kv_heads = 0;  // Hkv: key-value heads on this rank, dividing H; 0 means H

  int kv_head_count() const { return kv_heads > 0 ? kv_heads : heads; }
};

// Dropout on the attention probabilities (see dropout.h). The mask index of element
// (b, h, i, j) is ((b * total_heads + head_offset + h) * S + i) * S + j, so a rank holding
// heads [head_offset, head_offset + H) of `total_heads` drops what a single rank would.
struct AttentionDropout {
  float p = 0.0f;  // 0 disables
  uint64_t key = 0;
  int head_offset = 0;
  int total_heads = 0;  // 0 means H
};

// Writes out[B, S, H*D] and saves, for the backward pass, lse[B, H, S]: the log-sum-exp of
// each query's scaled scores, lse[b, h, i] = log sum_{j<=i} exp(q_i . k_j / sqrt(D)), from
// which the backward recomputes the probabilities (as the CUDA flash attention does; no
// S x S matrix is kept).
template <typename T>
void AttentionForward(const T* qkv, T* out, T* lse, const AttentionShape& shape,
                      const AttentionDropout& dropout);

// Accumulates d_qkv[B, S, (H + 2 Hkv) * D] from d_out[B, S, H*D], given the forward's out and lse.
// Its workspace (two or three blocks of 64 queries' scores, 64 x S values each, and three [S, D]
// sums) is each calling thread's, kept for the next call.
template <typename T>
void AttentionBackward(const T* d_out, const T* qkv, const T* out, const T* lse, T* d_qkv,
                       const AttentionShape& shape, const AttentionDropout& dropout);

}  // namespace mtrain::cpu

#endif  // MTRAIN_KERNELS_ATTENTION_H_
