// Global gradient-norm clipping: the norm is sqrt of the sum of squares over every
// gradient of the model (across ranks: each rank sums its own shard, an all-reduce adds
// them), and every gradient is scaled by min(1, max_norm / (norm + 1e-6)).
// Conventions: see matmul.h.
#ifndef MTRAIN_KERNELS_GRAD_NORM_H_
#define MTRAIN_KERNELS_GRAD_NORM_H_

#include <cstddef>

namespace mtrain::cpu {

// Sum of x[i]^2, accumulated in double in a fixed order (deterministic).
template <typename T>
double SumOfSquares(const T* x, size_t n);

// The factor gradients are multiplied by: min(1, max_norm / (total_norm + 1e-6)); 1 when
// max_norm <= 0 (clipping disabled). Matches torch.nn.utils.clip_grad_norm_.
double ClipCoefficient(double total_norm, double max_norm);

}  // namespace mtrain::cpu

#endif  // MTRAIN_KERNELS_GRAD_NORM_H_
