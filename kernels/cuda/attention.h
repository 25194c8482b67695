// Causal multi-head attention on the GPU in the flash-attention manner: the S x S score
// matrix never exists in memory. Each query row keeps a running max and sum (online
// softmax) while key/value tiles stream through shared memory; the forward saves only the
// per-row log-sum-exp, and the backward recomputes the probabilities from it.
// Semantics are kernels/attention.h's (qkv[B, S, H + 2 Hkv, D] in: grouped-query heads, query
// head h reading key-value head h / (H / Hkv); out[B, S, H, D]), dropout included: the same
// counter-based masks (kernels/dropout.h) at the same global indices, so the GPU drops exactly what
// the CPU and every parallel layout drop. T is float, __nv_bfloat16 or __half. Head dims 32, 64 and
// 128.
//   fp32, and bf16/fp16 at head dim 32: scalar float kernels, a thread per row; they follow
//     the CPU closely (the fp32 tests hold them to 1e-5).
//   bf16 and fp16 at head dims 64 and 128, multi-head (Hkv = H): FlashAttention-2-style
//     tensor-core kernels
//     (mma.sync m16n8k16, 16-bit operands, fp32 accumulation and softmax; the probabilities
//     and dS are rounded to T as mma operands, so they match the CPU to T's precision).
// Every output element is written by one thread (or one warp tile) with a fixed summation
// order, and no atomics: results are deterministic run to run.
#ifndef MTRAIN_KERNELS_CUDA_ATTENTION_H_
#define MTRAIN_KERNELS_CUDA_ATTENTION_H_

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <string>

#include "absl/status/status.h"
#include "kernels/attention.h"

namespace mtrain::cuda {

using cpu::AttentionDropout;
using cpu::AttentionShape;

// Which implementation runs bf16/fp16 attention. kAuto: cuDNN's fused flash attention
// (kernels/cuda/cudnn_attention.h) where it can (no attention dropout, a shape its graphs
// build for), the kernels above otherwise; kHandWritten: always the kernels above (their
// dropout masks equal the CPU's, which cuDNN's cannot). Process-wide; the default comes from
// MTRAIN_ATTENTION=auto|handwritten (auto).
enum class AttentionImplementation { kAuto, kHandWritten };
void SetAttentionImplementation(AttentionImplementation implementation);

// The path a job's attention takes and why, for the engine's start line: "cuDNN 9.19.0
// fused attention", or "hand-written flash kernels (attention dropout 0.1: ...)".
template <typename T>
std::string AttentionPathFor(const AttentionShape& shape, float dropout);

// out[B, S, H*D] (overwritten) and lse[B, H, S] (log-sum-exp of each row's scaled scores,
// for the backward). INVALID_ARGUMENT for an unsupported head dim.
template <typename T>
absl::Status FlashAttentionForward(const T* qkv, T* out, float* lse, const AttentionShape& shape,
                                   const AttentionDropout& dropout, cudaStream_t stream);

// Accumulates d_qkv[B, S, (H + 2 Hkv) * D] (+=) from d_out, with the forward's out and lse, or
// overwrites it when `accumulate` is false (no zeroing needed beforehand). Uses
// stream-ordered scratch for the per-row sums of d_out * out. The tensor-core path
// computes dK/dV per key block and dQ per query block in separate kernels (dQ recomputes
// the probabilities rather than summing partial dQ across blocks with atomics).
template <typename T>
absl::Status FlashAttentionBackward(const T* d_out, const T* qkv, const T* out, const float* lse,
                                    T* d_qkv, const AttentionShape& shape,
                                    const AttentionDropout& dropout, cudaStream_t stream,
                                    bool accumulate = true);

}  // namespace mtrain::cuda

#endif  // MTRAIN_KERNELS_CUDA_ATTENTION_H_
