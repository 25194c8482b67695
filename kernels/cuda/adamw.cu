#include <cmath>

#include "kernels/cuda/adamw.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/device_math.cuh"

namespace mtrain::cuda {
namespace {

constexpr int kThreads = 256;

template <typename G, typename P>
__global__ void AdamWKernel(float* master, const G* grad, float* m, float* v, P* model_copy,
                            size_t n, float lr, float beta1, float beta2, float eps,
                            float weight_decay, float grad_scale, float bias1, float bias2) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    const float g = ToFloat(grad[i]) * grad_scale;
    const float mi = beta1 * m[i] + (1.0f - beta1) * g;
    const float vi = beta2 * v[i] + (1.0f - beta2) * g * g;
    m[i] = mi;
    v[i] = vi;
    const float m_hat = mi / bias1;
    const float v_hat = vi / bias2;
    float p = master[i];
    p -= lr * (m_hat / (sqrtf(v_hat) + eps) + weight_decay * p);
    master[i] = p;
    if (model_copy != nullptr) model_copy[i] = FromFloat<P>(p);
  }
}

}  // namespace

template <typename G, typename P>
absl::Status AdamWUpdate(float* master, const G* grad, float* m, float* v, P* model_copy, size_t n,
                         const cpu::AdamWHyperparameters& h, cudaStream_t stream) {
  if (h.step < 1) return absl::InvalidArgumentError("AdamWUpdate: step must be >= 1");
  if (n == 0) return absl::OkStatus();
  // Bias corrections on the host in double, as the CPU code computes them.
  const float bias1 = static_cast<float>(1.0 - std::pow(double(h.beta1), double(h.step)));
  const float bias2 = static_cast<float>(1.0 - std::pow(double(h.beta2), double(h.step)));
  AdamWKernel<G, P><<<GridFor(n, kThreads), kThreads, 0, stream>>>(
      master, grad, m, v, model_copy, n, h.lr, h.beta1, h.beta2, h.eps, h.weight_decay,
      h.grad_scale, bias1, bias2);
  return LastLaunchStatus("AdamWUpdate");
}

template absl::Status AdamWUpdate<float, float>(float*, const float*, float*, float*, float*,
                                                size_t, const cpu::AdamWHyperparameters&,
                                                cudaStream_t);
template absl::Status AdamWUpdate<float, __nv_bfloat16>(float*, const float*, float*, float*,
                                                        __nv_bfloat16*, size_t,
                                                        const cpu::AdamWHyperparameters&,
                                                        cudaStream_t);
template absl::Status AdamWUpdate<__nv_bfloat16, __nv_bfloat16>(float*, const __nv_bfloat16*,
                                                                float*, float*, __nv_bfloat16*,
                                                                size_t,
                                                                const cpu::AdamWHyperparameters&,
                                                                cudaStream_t);
template absl::Status AdamWUpdate<float, __half>(float*, const float*, float*, float*, __half*,
                                                 size_t, const cpu::AdamWHyperparameters&,
                                                 cudaStream_t);
template absl::Status AdamWUpdate<__half, __half>(float*, const __half*, float*, float*, __half*,
                                                  size_t, const cpu::AdamWHyperparameters&,
                                                  cudaStream_t);

}  // namespace mtrain::cuda
