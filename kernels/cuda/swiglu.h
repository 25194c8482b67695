// SwiGLU on the GPU (kernels/swiglu.h's semantics, Llama-style gated MLPs): on a fused
// [gate | up] row of 2F columns, y = silu(gate) * up. T is float, __nv_bfloat16 or __half;
// arithmetic is float.
#ifndef MTRAIN_KERNELS_CUDA_SWIGLU_H_
#define MTRAIN_KERNELS_CUDA_SWIGLU_H_

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include "absl/status/status.h"

namespace mtrain::cuda {

// gate_up [rows, 2F] -> y [rows, F] (overwritten).
template <typename T>
absl::Status SwiGluForward(const T* gate_up, T* y, int rows, int F, cudaStream_t stream);

// d_gate_up [rows, 2F] += both halves' gradients from d_y [rows, F]; with accumulate false
// they are written (no need to zero d_gate_up first).
template <typename T>
absl::Status SwiGluBackward(const T* d_y, const T* gate_up, T* d_gate_up, int rows, int F,
                            cudaStream_t stream, bool accumulate = true);

}  // namespace mtrain::cuda

#endif  // MTRAIN_KERNELS_CUDA_SWIGLU_H_
