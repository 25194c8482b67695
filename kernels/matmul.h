// Fully connected layer: out = in @ weight^T + bias, with weight stored [out_features,
// in_features] as torch.nn.Linear stores it (so checkpoints map one to one).
//
// Conventions shared by every kernel in this directory:
//  - Row-major, contiguous; shapes in the comments as [rows, cols].
//  - Templates instantiated for float (training) and double (finite-difference tests).
//  - Backward outputs are ACCUMULATED (+=) into the gradient buffers, never overwritten;
//    callers zero gradients once per step. This makes residual branches and gradient
//    accumulation across microbatches free.
//  - CPU implementations live in the .cc beside the header, in namespace mtrain::cpu; a
//    CUDA implementation with the same signature goes in namespace mtrain::cuda.
#ifndef MTRAIN_KERNELS_MATMUL_H_
#define MTRAIN_KERNELS_MATMUL_H_

namespace mtrain::cpu {

// out[M, N] = in[M, K] @ weight[N, K]^T + bias[N]. `bias` may be null. `out` is
// overwritten.
template <typename T>
void MatmulForward(const T* in, const T* weight, const T* bias, T* out, int M, int K, int N);

// Whether a backward adds the input's gradient to d_in (the convention above) or
// overwrites it: a caller that would zero d_in just to accumulate into it saves a pass.
enum class InputGradient { kAccumulate, kOverwrite };

// Given d_out[M, N]:
//   d_in[M, K]     += d_out @ weight        (skipped when d_in is null; `=` with kOverwrite)
//   d_weight[N, K] += d_out^T @ in          (skipped when d_weight is null)
//   d_bias[N]      += column sums of d_out  (skipped when d_bias is null)
// Each part is the same computation whether or not the others run, so a backward split in
// two calls (the input's gradient now, the weights' later: zero-bubble schedules) gives
// the combined call's sums bit for bit.
template <typename T>
void MatmulBackward(const T* d_out, const T* in, const T* weight, T* d_in, T* d_weight, T* d_bias,
                    int M, int K, int N, InputGradient input_gradient = InputGradient::kAccumulate);

}  // namespace mtrain::cpu

#endif  // MTRAIN_KERNELS_MATMUL_H_
