#include "kernels/adamw.h"

#include <algorithm>
#include <cmath>
#include <cstddef>

#include "kernels/cpu_isa.h"

namespace mtrain::cpu {
namespace {

// Below this many parameters the OpenMP fork/join costs more than the update it spreads.
constexpr size_t kParallelThreshold = size_t{1} << 16;

}  // namespace

namespace {

// The step's constants, in T.
template <typename T>
struct AdamWFactors {
  T beta1, beta2, lr, eps, weight_decay, grad_scale, bias_correction1, bias_correction2;
};

// Elements [begin, end); the factors in locals so that the compiler keeps them in registers.
template <typename T>
MTRAIN_ALWAYS_INLINE void UpdateRange(T* __restrict param, const T* __restrict grad,
                                      T* __restrict m, T* __restrict v, size_t begin, size_t end,
                                      AdamWFactors<T> f) {
  const T beta1 = f.beta1, beta2 = f.beta2, lr = f.lr, eps = f.eps;
  const T weight_decay = f.weight_decay, grad_scale = f.grad_scale;
  const T bias_correction1 = f.bias_correction1, bias_correction2 = f.bias_correction2;
#pragma omp simd
  for (size_t i = begin; i < end; ++i) {
    const T g = grad[i] * grad_scale;
    const T m_new = beta1 * m[i] + (T(1) - beta1) * g;
    const T v_new = beta2 * v[i] + (T(1) - beta2) * g * g;
    m[i] = m_new;
    v[i] = v_new;
    const T m_hat = m_new / bias_correction1;
    const T v_hat = v_new / bias_correction2;
    // Vectorises because kernels build with -fno-math-errno (no errno path for sqrt).
    param[i] -= lr * (m_hat / (std::sqrt(v_hat) + eps) + weight_decay * param[i]);
  }
}

// Contiguous ranges of this many elements per OpenMP iteration.
constexpr size_t kChunk = 4096;

// The loop three times: for the project's baseline, AVX2 and AVX-512 (cpu_isa.h).
#define MTRAIN_ADAMW_LOOP(Name, ATTRIBUTES)                                                       \
  template <typename T>                                                                           \
  ATTRIBUTES void Name(T* param, const T* grad, T* m, T* v, size_t n, AdamWFactors<T> f) {        \
    _Pragma(                                                                                      \
        "omp parallel for schedule(static) if (n >= kParallelThreshold)") for (size_t begin = 0;  \
                                                                               begin < n;         \
                                                                               begin += kChunk) { \
      UpdateRange(param, grad, m, v, begin, std::min(begin + kChunk, n), f);                      \
    }                                                                                             \
  }

MTRAIN_ADAMW_LOOP(UpdateLoop, )
MTRAIN_ADAMW_LOOP(UpdateLoopAvx2, MTRAIN_TARGET_AVX2)
MTRAIN_ADAMW_LOOP(UpdateLoopAvx512, MTRAIN_TARGET_AVX512)
#undef MTRAIN_ADAMW_LOOP

}  // namespace

template <typename T>
void AdamWUpdate(T* param, const T* grad, T* m, T* v, size_t n, const AdamWHyperparameters& h) {
  // Step-dependent factors once, in double: beta^step underflows gracefully and stays exact
  // for the small step counts where bias correction matters most.
  const double step = static_cast<double>(h.step);
  const AdamWFactors<T> factors{h.beta1,
                                h.beta2,
                                h.lr,
                                h.eps,
                                h.weight_decay,
                                h.grad_scale,
                                static_cast<T>(1.0 - std::pow(static_cast<double>(h.beta1), step)),
                                static_cast<T>(1.0 - std::pow(static_cast<double>(h.beta2), step))};
  switch (CpuKernelIsa()) {
    case KernelIsa::kAvx512:
      return UpdateLoopAvx512(param, grad, m, v, n, factors);
    case KernelIsa::kAvx2:
      return UpdateLoopAvx2(param, grad, m, v, n, factors);
    case KernelIsa::kGeneric:
      return UpdateLoop(param, grad, m, v, n, factors);
  }
}

template void AdamWUpdate<float>(float*, const float*, float*, float*, size_t,
                                 const AdamWHyperparameters&);
template void AdamWUpdate<double>(double*, const double*, double*, double*, size_t,
                                  const AdamWHyperparameters&);

}  // namespace mtrain::cpu
