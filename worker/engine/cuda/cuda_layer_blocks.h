// The parts of a CUDA transformer layer where the model families differ (model/'s
// TransformerConfig), for CudaGptModel's full, sequence-parallel and decoding paths, as
// worker/engine/cpu/layer_blocks.h on the CPU: the normalisation (LayerNorm or RMSNorm),
// rotary positions on q and k, and the MLP's input projection with its activation (the
// GEMM's bias+GeLU epilogue, or a plain GEMM into [gate | up] then SwiGLU). The projections'
// weights come from parameter_layout.h's QkvWeight / MlpInWeight. Everything else in a
// layer is the same GEMMs, attention, dropouts and residual adds whatever the family.
#ifndef MTRAIN_WORKER_ENGINE_CUDA_CUDA_LAYER_BLOCKS_H_
#define MTRAIN_WORKER_ENGINE_CUDA_CUDA_LAYER_BLOCKS_H_

#include <cuda_runtime_api.h>

#include "absl/status/status.h"
#include "kernels/cuda/matmul.h"
#include "kernels/cuda/rotary.h"
#include "worker/engine/model_shape.h"

namespace mtrain::cuda::layer_blocks {

// y = Norm(x) for `rows` rows of the residual stream. `beta` and `mean` are unused (and may
// be null) under RMSNorm.
template <typename T>
absl::Status NormForward(const ModelShape& shape, const T* x, const T* gamma, const T* beta, T* y,
                         float* mean, float* rstd, int rows, cudaStream_t stream);

// d_x = (d_residual, or d_x itself when null) + the norm's input gradient from d_y; d_gamma
// (and d_beta under LayerNorm) accumulate. LayerNorm adds the residual gradient in the same
// pass; RMSNorm copies it first.
template <typename T>
absl::Status NormBackward(const ModelShape& shape, const T* d_y, const T* x, const T* gamma,
                          const float* mean, const float* rstd, const T* d_residual, T* d_x,
                          float* d_gamma, float* d_beta, int rows, cudaStream_t stream);

// The MLP's input: GeLU families run one GEMM whose epilogue adds the bias and applies GeLU
// (fc [rows, Fl] keeps the pre-activation, act [rows, Fl] the activation); SwiGLU runs the
// GEMM into fc [rows, 2 Fl] ([gate | up]) and act = SwiGLU(fc).
template <typename T>
absl::Status MlpInForward(CublasLt& blas, const ModelShape& shape, const T* in, const T* weight,
                          const T* bias, T* fc, T* act, int rows, int Fl, cudaStream_t stream);

// d_fc ([rows, Fl], or [rows, 2 Fl] under SwiGLU) overwritten from d_act [rows, Fl].
template <typename T>
absl::Status MlpActivationBackward(const ModelShape& shape, const T* d_act, const T* fc, T* d_fc,
                                   int rows, int Fl, cudaStream_t stream);

// The MLP's output projection and activation backward, given d_out [rows, C] of
// out = act @ weight^T + bias: d_fc as MlpActivationBackward makes it, and the projection's
// weight and bias gradients accumulated (neither with a null d_weight: a zero-bubble
// BackwardInput leaves them for later). With GeLU in 16 bits the derivative runs in the
// input gradient's GEMM epilogue where cuBLASLt offers it (no d_act round trip through
// memory); otherwise d_act_scratch [rows, Fl] holds the input gradient between the two.
template <typename T>
absl::Status MlpOutBackward(CublasLt& blas, const ModelShape& shape, const T* d_out, const T* act,
                            const T* fc, const T* weight, T* d_act_scratch, T* d_fc,
                            float* d_weight, float* d_bias, int rows, int Fl, cudaStream_t stream);

// Rotates (inverse: back, the backward pass) the query and key heads of qkv [rows, Ql + 2
// KVl] for positions first_position + row % seq_length. No-op with learned positions.
template <typename T>
absl::Status RotateQueriesAndKeys(const ModelShape& shape, const ModelPlacement& placement,
                                  const RotaryDeviceTable& table, T* qkv, int rows, int seq_length,
                                  int first_position, bool inverse, cudaStream_t stream);

}  // namespace mtrain::cuda::layer_blocks

#endif  // MTRAIN_WORKER_ENGINE_CUDA_CUDA_LAYER_BLOCKS_H_
