#include "kernels/adamw.h"

#include <cmath>
#include <cstddef>

namespace mtrain::cpu {
namespace {

// Below this many parameters the OpenMP fork/join costs more than the update it spreads.
constexpr size_t kParallelThreshold = size_t{1} << 16;

}  // namespace

template <typename T>
void AdamWUpdate(T* param, const T* grad, T* m, T* v, size_t n, const AdamWHyperparameters& h) {
  // Step-dependent factors once, in double: beta^step underflows gracefully and stays exact
  // for the small step counts where bias correction matters most.
  const double step = static_cast<double>(h.step);
  const T bias_correction1 = static_cast<T>(1.0 - std::pow(static_cast<double>(h.beta1), step));
  const T bias_correction2 = static_cast<T>(1.0 - std::pow(static_cast<double>(h.beta2), step));
  const T beta1 = h.beta1;
  const T beta2 = h.beta2;
  const T lr = h.lr;
  const T eps = h.eps;
  const T weight_decay = h.weight_decay;
  const T grad_scale = h.grad_scale;
#pragma omp parallel for schedule(static) if (n >= kParallelThreshold)
  for (size_t i = 0; i < n; ++i) {
    const T g = grad[i] * grad_scale;
    m[i] = beta1 * m[i] + (T(1) - beta1) * g;
    v[i] = beta2 * v[i] + (T(1) - beta2) * g * g;
    const T m_hat = m[i] / bias_correction1;
    const T v_hat = v[i] / bias_correction2;
    param[i] -= lr * (m_hat / (std::sqrt(v_hat) + eps) + weight_decay * param[i]);
  }
}

template void AdamWUpdate<float>(float*, const float*, float*, float*, size_t,
                                 const AdamWHyperparameters&);
template void AdamWUpdate<double>(double*, const double*, double*, double*, size_t,
                                  const AdamWHyperparameters&);

}  // namespace mtrain::cpu
