// AdamW (Loshchilov & Hutter): Adam with weight decay decoupled from the gradient.
// Conventions: see matmul.h.
#ifndef MTRAIN_KERNELS_ADAMW_H_
#define MTRAIN_KERNELS_ADAMW_H_

#include <cstddef>

namespace mtrain::cpu {

struct AdamWHyperparameters {
  float lr = 0;
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-8f;
  // 0 for biases and LayerNorm parameters: the caller updates those regions separately.
  float weight_decay = 0;
  // Number of this update, starting at 1 (bias correction).
  long long step = 1;
  // Multiplies every gradient first: the global-norm clipping coefficient (and, later,
  // loss-scale unscaling).
  float grad_scale = 1.0f;
};

// For each i in [0, n), with g = grad[i] * grad_scale:
//   m = beta1 m + (1 - beta1) g;  v = beta2 v + (1 - beta2) g^2
//   m_hat = m / (1 - beta1^step);  v_hat = v / (1 - beta2^step)
//   param -= lr * (m_hat / (sqrt(v_hat) + eps) + weight_decay * param)
// (matches torch.optim.AdamW).
template <typename T>
void AdamWUpdate(T* param, const T* grad, T* m, T* v, size_t n, const AdamWHyperparameters& h);

}  // namespace mtrain::cpu

#endif  // MTRAIN_KERNELS_ADAMW_H_
