#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/rms_norm.h"

namespace mtrain::cuda {
namespace {

constexpr int kThreads = 256;
// Blocks of the backward pass: each owns a row of partial d_gamma, so this bounds the
// scratch memory (kMaxBackwardBlocks x C floats).
constexpr int kMaxBackwardBlocks = 256;

// One block per row.
template <typename T>
__global__ void RmsNormForwardKernel(const T* x, const T* gamma, T* y, float* rstd_out, int C,
                                     float eps) {
  __shared__ float scratch[32];
  const size_t row = blockIdx.x;
  const T* xr = x + row * C;
  float sq = 0;
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    const float v = ToFloat(xr[c]);
    sq += v * v;
  }
  const float rstd = rsqrtf(BlockSum(sq, scratch) / C + eps);
  T* yr = y + row * C;
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    yr[c] = FromFloat<T>(ToFloat(xr[c]) * rstd * ToFloat(gamma[c]));
  }
  if (threadIdx.x == 0) rstd_out[row] = rstd;
}

// Block b handles rows b, b + gridDim.x, ...: d_x of each row, and the row's terms of
// d_gamma into its own partial row (no other block touches it: no atomics).
//   xhat = x * rstd,  d_xhat = d_y * gamma,
//   d_x  = rstd * (d_xhat - xhat * mean(d_xhat * xhat)),  d_gamma += d_y * xhat.
template <typename T>
__global__ void RmsNormBackwardKernel(const T* d_y, const T* x, const T* gamma, const float* rstd,
                                      T* d_x, float* partial_gamma, int rows, int C) {
  __shared__ float scratch[32];
  float* my_gamma = partial_gamma + size_t(blockIdx.x) * C;
  for (int c = threadIdx.x; c < C; c += blockDim.x) my_gamma[c] = 0;
  for (int row = blockIdx.x; row < rows; row += gridDim.x) {
    const T* xr = x + size_t(row) * C;
    const T* dyr = d_y + size_t(row) * C;
    const float rs = rstd[row];
    float sum_dxhat_xhat = 0;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
      const float xhat = ToFloat(xr[c]) * rs;
      const float dy = ToFloat(dyr[c]);
      sum_dxhat_xhat += dy * ToFloat(gamma[c]) * xhat;
      my_gamma[c] += dy * xhat;
    }
    const float mean_dxhat_xhat = BlockSum(sum_dxhat_xhat, scratch) / C;
    T* dxr = d_x + size_t(row) * C;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
      const float xhat = ToFloat(xr[c]) * rs;
      const float dxhat = ToFloat(dyr[c]) * ToFloat(gamma[c]);
      dxr[c] = FromFloat<T>(ToFloat(dxr[c]) + rs * (dxhat - xhat * mean_dxhat_xhat));
    }
  }
}

// d_gamma[c] += sum over blocks of partial[b][c], in block order.
__global__ void SumPartialsKernel(const float* partial_gamma, int blocks, int C, float* d_gamma) {
  for (int c = blockIdx.x * blockDim.x + threadIdx.x; c < C; c += gridDim.x * blockDim.x) {
    float g = 0;
    for (int k = 0; k < blocks; ++k) g += partial_gamma[size_t(k) * C + c];
    d_gamma[c] += g;
  }
}

absl::Status CheckShape(int rows, int C) {
  if (rows < 0 || C <= 0) return absl::InvalidArgumentError("RmsNorm: rows must be >= 0 and C > 0");
  return absl::OkStatus();
}

}  // namespace

template <typename T>
absl::Status RmsNormForward(const T* x, const T* gamma, T* y, float* rstd, int rows, int C,
                            float eps, cudaStream_t stream) {
  if (absl::Status s = CheckShape(rows, C); !s.ok() || rows == 0) return s;
  RmsNormForwardKernel<T><<<rows, kThreads, 0, stream>>>(x, gamma, y, rstd, C, eps);
  return LastLaunchStatus("RmsNormForward");
}

template <typename T>
absl::Status RmsNormBackward(const T* d_y, const T* x, const T* gamma, const float* rstd, T* d_x,
                             float* d_gamma, int rows, int C, cudaStream_t stream) {
  if (absl::Status s = CheckShape(rows, C); !s.ok() || rows == 0) return s;
  const int blocks = rows < kMaxBackwardBlocks ? rows : kMaxBackwardBlocks;
  float* partial = nullptr;
  const size_t bytes = size_t(blocks) * C * sizeof(float);
  if (absl::Status s =
          CudaStatus(cudaMallocAsync(reinterpret_cast<void**>(&partial), bytes, stream),
                     "RmsNormBackward scratch");
      !s.ok()) {
    return s;
  }
  RmsNormBackwardKernel<T>
      <<<blocks, kThreads, 0, stream>>>(d_y, x, gamma, rstd, d_x, partial, rows, C);
  absl::Status launched = LastLaunchStatus("RmsNormBackward");
  if (launched.ok()) {
    SumPartialsKernel<<<GridFor(C, kThreads), kThreads, 0, stream>>>(partial, blocks, C, d_gamma);
    launched.Update(LastLaunchStatus("RmsNormBackward (d_gamma sums)"));
  }
  absl::Status freed = CudaStatus(cudaFreeAsync(partial, stream), "RmsNormBackward scratch");
  return launched.ok() ? freed : launched;
}

#define MTRAIN_INSTANTIATE_RMS_NORM(T)                                                             \
  template absl::Status RmsNormForward<T>(const T*, const T*, T*, float*, int, int, float,         \
                                          cudaStream_t);                                           \
  template absl::Status RmsNormBackward<T>(const T*, const T*, const T*, const float*, T*, float*, \
                                           int, int, cudaStream_t);
MTRAIN_INSTANTIATE_RMS_NORM(float)
MTRAIN_INSTANTIATE_RMS_NORM(__nv_bfloat16)
MTRAIN_INSTANTIATE_RMS_NORM(__half)

}  // namespace mtrain::cuda
