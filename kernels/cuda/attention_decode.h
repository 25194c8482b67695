// Causal attention of a few new positions of one sequence over a key-value cache, for
// generation (worker/engine/cuda's StartGeneration/GenerateStep): the GPU twin of the loop
// in worker/engine/cpu/transformer_model_decode.cc. Position first + i attends to cached
// positions 0..first + i (its own key and value already appended). Scores and softmax in float.
//
//   q:      [count, q_stride], head h's query at columns h*D..h*D+D (the QKV rows)
//   keys:   [>= first + count, kv_heads*D], the cache's keys (same for values); query head
//           h reads key-value head h / (heads / kv_heads) (grouped-query attention)
//   y:      [count, heads*D]
//   scores: float scratch of count * heads * (first + count)
#ifndef MTRAIN_KERNELS_CUDA_ATTENTION_DECODE_H_
#define MTRAIN_KERNELS_CUDA_ATTENTION_DECODE_H_

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include "absl/status/status.h"

namespace mtrain::cuda {

struct DecodeShape {
  int first = 0;     // positions already cached before the new ones
  int count = 0;     // new positions
  int heads = 0;     // this rank's heads
  int head_dim = 0;  // D
  int q_stride = 0;  // elements between consecutive queries' rows
  int kv_heads = 0;  // this rank's key-value heads (0: heads); divides heads
};

template <typename T>
absl::Status DecodeAttention(const T* q, const T* keys, const T* values, const DecodeShape& shape,
                             float* scores, T* y, cudaStream_t stream);

}  // namespace mtrain::cuda

#endif  // MTRAIN_KERNELS_CUDA_ATTENTION_DECODE_H_
