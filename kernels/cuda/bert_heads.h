// The element-wise pieces of BERT's heads on the GPU (issue 35; the CPU's are loops in
// worker/engine/cpu/transformer_model_bert.cc): taking the masked rows (the masked-LM head)
// and each sequence's first row (the pooler) out of the hidden states, adding their
// gradients back, and the pooler's tanh. On device memory, enqueued on `stream`; T is
// float, __nv_bfloat16 or __half; arithmetic in float.
#ifndef MTRAIN_KERNELS_CUDA_BERT_HEADS_H_
#define MTRAIN_KERNELS_CUDA_BERT_HEADS_H_

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"

namespace mtrain::cuda {

// out[m, :] = in[rows[m], :] for m < count (rows: device int32 [count]; in and out [*, C]).
// INVALID_ARGUMENT for count < 0 or C <= 0.
template <typename T>
absl::Status GatherRows(const T* in, const int32_t* rows, int count, int C, T* out,
                        cudaStream_t stream);

// d_full[rows[m], :] += d_rows[m, :] for m < count. The rows must be distinct (each output
// row is written by one thread: no atomics, deterministic).
template <typename T>
absl::Status ScatterAddRows(const T* d_rows, const int32_t* rows, int count, int C, T* d_full,
                            cudaStream_t stream);

// y[i] = tanh(x[i]); y may equal x.
template <typename T>
absl::Status TanhForward(const T* x, T* y, size_t n, cudaStream_t stream);

// d_x[i] = d_y[i] * (1 - y[i]^2) from the forward's output y (overwritten; d_x may equal
// d_y).
template <typename T>
absl::Status TanhBackward(const T* d_y, const T* y, T* d_x, size_t n, cudaStream_t stream);

}  // namespace mtrain::cuda

#endif  // MTRAIN_KERNELS_CUDA_BERT_HEADS_H_
