#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/layernorm.h"

namespace mtrain::cuda {
namespace {

constexpr int kThreads = 256;
// Blocks of the backward pass: each owns a row of partial parameter gradients, so this
// bounds the scratch memory (kMaxBackwardBlocks x 2C floats).
constexpr int kMaxBackwardBlocks = 256;

// One block per row; two passes over the row (mean, then variance about the mean: more
// accurate than E[x^2] - E[x]^2, as the CPU code does).
template <typename T>
__global__ void LayerNormForwardKernel(const T* x, const T* gamma, const T* beta, T* y,
                                       float* mean_out, float* rstd_out, int C, float eps) {
  __shared__ float scratch[32];
  const size_t row = blockIdx.x;
  const T* xr = x + row * C;
  float sum = 0;
  for (int c = threadIdx.x; c < C; c += blockDim.x) sum += ToFloat(xr[c]);
  const float mean = BlockSum(sum, scratch) / C;
  float sq = 0;
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    const float d = ToFloat(xr[c]) - mean;
    sq += d * d;
  }
  const float rstd = rsqrtf(BlockSum(sq, scratch) / C + eps);
  T* yr = y + row * C;
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    const float xhat = (ToFloat(xr[c]) - mean) * rstd;
    yr[c] = FromFloat<T>(xhat * ToFloat(gamma[c]) + ToFloat(beta[c]));
  }
  if (threadIdx.x == 0) {
    mean_out[row] = mean;
    rstd_out[row] = rstd;
  }
}

// Block b handles rows b, b + gridDim.x, ...: d_x of each row, and adds the row's terms of
// d_gamma / d_beta to its own partial row (no other block touches it: no atomics).
template <typename T>
__global__ void LayerNormBackwardKernel(const T* d_y, const T* x, const T* gamma, const float* mean,
                                        const float* rstd, T* d_x, float* partial_gamma,
                                        float* partial_beta, int rows, int C) {
  __shared__ float scratch[32];
  float* my_gamma = partial_gamma + size_t(blockIdx.x) * C;
  float* my_beta = partial_beta + size_t(blockIdx.x) * C;
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    my_gamma[c] = 0;
    my_beta[c] = 0;
  }
  for (int row = blockIdx.x; row < rows; row += gridDim.x) {
    const T* xr = x + size_t(row) * C;
    const T* dyr = d_y + size_t(row) * C;
    const float mu = mean[row], rs = rstd[row];
    // d_xhat = d_y * gamma; d_x = rstd * (d_xhat - mean(d_xhat) - xhat * mean(d_xhat * xhat))
    float sum_dxhat = 0, sum_dxhat_xhat = 0;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
      const float xhat = (ToFloat(xr[c]) - mu) * rs;
      const float dy = ToFloat(dyr[c]);
      const float dxhat = dy * ToFloat(gamma[c]);
      sum_dxhat += dxhat;
      sum_dxhat_xhat += dxhat * xhat;
      my_gamma[c] += dy * xhat;
      my_beta[c] += dy;
    }
    const float mean_dxhat = BlockSum(sum_dxhat, scratch) / C;
    const float mean_dxhat_xhat = BlockSum(sum_dxhat_xhat, scratch) / C;
    T* dxr = d_x + size_t(row) * C;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
      const float xhat = (ToFloat(xr[c]) - mu) * rs;
      const float dxhat = ToFloat(dyr[c]) * ToFloat(gamma[c]);
      const float dx = rs * (dxhat - mean_dxhat - xhat * mean_dxhat_xhat);
      dxr[c] = FromFloat<T>(ToFloat(dxr[c]) + dx);
    }
  }
}

// d_gamma[c] += sum over blocks of partial[b][c], in block order.
__global__ void SumPartialsKernel(const float* partial_gamma, const float* partial_beta, int blocks,
                                  int C, float* d_gamma, float* d_beta) {
  for (int c = blockIdx.x * blockDim.x + threadIdx.x; c < C; c += gridDim.x * blockDim.x) {
    float g = 0, b = 0;
    for (int k = 0; k < blocks; ++k) {
      g += partial_gamma[size_t(k) * C + c];
      b += partial_beta[size_t(k) * C + c];
    }
    d_gamma[c] += g;
    d_beta[c] += b;
  }
}

absl::Status CheckShape(int rows, int C) {
  if (rows < 0 || C <= 0) {
    return absl::InvalidArgumentError("LayerNorm: rows must be >= 0 and C > 0");
  }
  return absl::OkStatus();
}

}  // namespace

template <typename T>
absl::Status LayerNormForward(const T* x, const T* gamma, const T* beta, T* y, float* mean,
                              float* rstd, int rows, int C, float eps, cudaStream_t stream) {
  if (absl::Status s = CheckShape(rows, C); !s.ok() || rows == 0) return s;
  LayerNormForwardKernel<T><<<rows, kThreads, 0, stream>>>(x, gamma, beta, y, mean, rstd, C, eps);
  return LastLaunchStatus("LayerNormForward");
}

template <typename T>
absl::Status LayerNormBackward(const T* d_y, const T* x, const T* gamma, const float* mean,
                               const float* rstd, T* d_x, float* d_gamma, float* d_beta, int rows,
                               int C, cudaStream_t stream) {
  if (absl::Status s = CheckShape(rows, C); !s.ok() || rows == 0) return s;
  const int blocks = rows < kMaxBackwardBlocks ? rows : kMaxBackwardBlocks;
  float* partial = nullptr;
  const size_t bytes = size_t(2) * blocks * C * sizeof(float);
  if (absl::Status s =
          CudaStatus(cudaMallocAsync(reinterpret_cast<void**>(&partial), bytes, stream),
                     "LayerNormBackward scratch");
      !s.ok()) {
    return s;
  }
  float* partial_beta = partial + size_t(blocks) * C;
  LayerNormBackwardKernel<T><<<blocks, kThreads, 0, stream>>>(d_y, x, gamma, mean, rstd, d_x,
                                                              partial, partial_beta, rows, C);
  absl::Status launched = LastLaunchStatus("LayerNormBackward");
  if (launched.ok()) {
    SumPartialsKernel<<<GridFor(C, kThreads), kThreads, 0, stream>>>(partial, partial_beta, blocks,
                                                                     C, d_gamma, d_beta);
    launched.Update(LastLaunchStatus("LayerNormBackward (parameter sums)"));
  }
  absl::Status freed = CudaStatus(cudaFreeAsync(partial, stream), "LayerNormBackward scratch");
  return launched.ok() ? freed : launched;
}

template absl::Status LayerNormForward<float>(const float*, const float*, const float*, float*,
                                              float*, float*, int, int, float, cudaStream_t);
template absl::Status LayerNormForward<__nv_bfloat16>(const __nv_bfloat16*, const __nv_bfloat16*,
                                                      const __nv_bfloat16*, __nv_bfloat16*, float*,
                                                      float*, int, int, float, cudaStream_t);
template absl::Status LayerNormForward<__half>(const __half*, const __half*, const __half*, __half*,
                                               float*, float*, int, int, float, cudaStream_t);
template absl::Status LayerNormBackward<float>(const float*, const float*, const float*,
                                               const float*, const float*, float*, float*, float*,
                                               int, int, cudaStream_t);
template absl::Status LayerNormBackward<__nv_bfloat16>(const __nv_bfloat16*, const __nv_bfloat16*,
                                                       const __nv_bfloat16*, const float*,
                                                       const float*, __nv_bfloat16*, float*, float*,
                                                       int, int, cudaStream_t);
template absl::Status LayerNormBackward<__half>(const __half*, const __half*, const __half*,
                                                const float*, const float*, __half*, float*, float*,
                                                int, int, cudaStream_t);

}  // namespace mtrain::cuda
