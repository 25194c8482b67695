// SwiGLU (Shazeer 2020), the gated MLP of Llama-style decoders:
//   y = silu(gate) * up,   silu(g) = g * sigmoid(g)
// on the two halves of one fused projection's output: each row holds F gate columns, then
// F up columns (a tensor-parallel rank holds its slice of both, so the pair stays local).
// Conventions: see matmul.h.
#ifndef MTRAIN_KERNELS_SWIGLU_H_
#define MTRAIN_KERNELS_SWIGLU_H_

namespace mtrain::cpu {

// gate_up [rows, 2F] -> y [rows, F]; y overwritten.
template <typename T>
void SwiGluForward(const T* gate_up, T* y, int rows, int F);

// d_gate_up [rows, 2F] += the gradients of both halves from d_y [rows, F].
template <typename T>
void SwiGluBackward(const T* d_y, const T* gate_up, T* d_gate_up, int rows, int F);

}  // namespace mtrain::cpu

#endif  // MTRAIN_KERNELS_SWIGLU_H_
