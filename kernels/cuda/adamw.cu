#include <algorithm>
#include <cmath>

#include "kernels/cuda/adamw.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/device_math.cuh"

namespace mtrain::cuda {
namespace {

constexpr int kThreads = 256;

// The update of one element: parameter i, moments k.
template <typename G, typename P>
__device__ __forceinline__ void AdamWElement(float* master, const G* grad, float* m, float* v,
                                             P* model_copy, size_t i, size_t k, float lr,
                                             float beta1, float beta2, float eps,
                                             float weight_decay, float grad_scale, float bias1,
                                             float bias2) {
  const float g = ToFloat(grad[i]) * grad_scale;
  const float mi = beta1 * m[k] + (1.0f - beta1) * g;
  const float vi = beta2 * v[k] + (1.0f - beta2) * g * g;
  m[k] = mi;
  v[k] = vi;
  const float m_hat = mi / bias1;
  const float v_hat = vi / bias2;
  float p = master[i];
  p -= lr * (m_hat / (sqrtf(v_hat) + eps) + weight_decay * p);
  master[i] = p;
  if (model_copy != nullptr) model_copy[i] = FromFloat<P>(p);
}

template <typename G, typename P>
__global__ void AdamWKernel(float* master, const G* grad, float* m, float* v, P* model_copy,
                            size_t n, float lr, float beta1, float beta2, float eps,
                            float weight_decay, float grad_scale, float bias1, float bias2) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    AdamWElement(master, grad, m, v, model_copy, i, i, lr, beta1, beta2, eps, weight_decay,
                 grad_scale, bias1, bias2);
  }
}

// One block per chunk.
template <typename G, typename P>
__global__ void AdamWChunksKernel(float* master, const G* grad, float* m, float* v, P* model_copy,
                                  size_t moment_offset, const AdamWChunk* chunks, float lr,
                                  float beta1, float beta2, float eps, float grad_scale,
                                  float bias1, float bias2) {
  const AdamWChunk chunk = chunks[blockIdx.x];
  for (uint32_t j = threadIdx.x; j < chunk.count; j += blockDim.x) {
    const size_t i = chunk.begin + j;
    AdamWElement(master, grad, m, v, model_copy, i, i - moment_offset, lr, beta1, beta2, eps,
                 chunk.weight_decay, grad_scale, bias1, bias2);
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

std::vector<AdamWChunk> MakeAdamWChunks(const std::vector<AdamWRange>& ranges) {
  std::vector<AdamWChunk> chunks;
  for (const AdamWRange& r : ranges) {
    for (size_t begin = r.begin; begin < r.end; begin += kAdamWChunkElements) {
      const size_t count = std::min<size_t>(kAdamWChunkElements, r.end - begin);
      chunks.push_back(AdamWChunk{begin, static_cast<uint32_t>(count), r.weight_decay});
    }
  }
  return chunks;
}

template <typename G, typename P>
absl::Status AdamWUpdateChunks(float* master, const G* grad, float* m, float* v, P* model_copy,
                               size_t moment_offset, const AdamWChunk* chunks, int num_chunks,
                               const cpu::AdamWHyperparameters& h, cudaStream_t stream) {
  if (h.step < 1) return absl::InvalidArgumentError("AdamWUpdateChunks: step must be >= 1");
  if (num_chunks <= 0) return absl::OkStatus();
  const float bias1 = static_cast<float>(1.0 - std::pow(double(h.beta1), double(h.step)));
  const float bias2 = static_cast<float>(1.0 - std::pow(double(h.beta2), double(h.step)));
  AdamWChunksKernel<G, P><<<num_chunks, kThreads, 0, stream>>>(
      master, grad, m, v, model_copy, moment_offset, chunks, h.lr, h.beta1, h.beta2, h.eps,
      h.grad_scale, bias1, bias2);
  return LastLaunchStatus("AdamWUpdateChunks");
}

#define MTRAIN_INSTANTIATE_ADAMW_CHUNKS(G, P)                                                 \
  template absl::Status AdamWUpdateChunks<G, P>(float*, const G*, float*, float*, P*, size_t, \
                                                const AdamWChunk*, int,                       \
                                                const cpu::AdamWHyperparameters&, cudaStream_t);
MTRAIN_INSTANTIATE_ADAMW_CHUNKS(float, float)
MTRAIN_INSTANTIATE_ADAMW_CHUNKS(float, __nv_bfloat16)
MTRAIN_INSTANTIATE_ADAMW_CHUNKS(float, __half)
#undef MTRAIN_INSTANTIATE_ADAMW_CHUNKS

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
