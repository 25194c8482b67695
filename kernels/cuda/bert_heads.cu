#include <string>

#include "kernels/cuda/bert_heads.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/device_math.cuh"

namespace mtrain::cuda {
namespace {

constexpr int kThreads = 256;

// One block a row, its threads over the columns.
template <typename T>
__global__ void GatherRowsKernel(const T* in, const int32_t* rows, int C, T* out) {
  const T* from = in + size_t(rows[blockIdx.x]) * C;
  T* to = out + size_t(blockIdx.x) * C;
  for (int c = threadIdx.x; c < C; c += blockDim.x) to[c] = from[c];
}

template <typename T>
__global__ void ScatterAddRowsKernel(const T* d_rows, const int32_t* rows, int C, T* d_full) {
  const T* from = d_rows + size_t(blockIdx.x) * C;
  T* to = d_full + size_t(rows[blockIdx.x]) * C;
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    to[c] = FromFloat<T>(ToFloat(to[c]) + ToFloat(from[c]));
  }
}

template <typename T>
__global__ void TanhForwardKernel(const T* x, T* y, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    y[i] = FromFloat<T>(tanhf(ToFloat(x[i])));
  }
}

template <typename T>
__global__ void TanhBackwardKernel(const T* d_y, const T* y, T* d_x, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    const float v = ToFloat(y[i]);
    d_x[i] = FromFloat<T>(ToFloat(d_y[i]) * (1.0f - v * v));
  }
}

absl::Status CheckRows(int count, int C, const char* what) {
  if (count < 0 || C <= 0) {
    return absl::InvalidArgumentError(std::string(what) + ": need count >= 0 and C > 0");
  }
  return absl::OkStatus();
}

}  // namespace

template <typename T>
absl::Status GatherRows(const T* in, const int32_t* rows, int count, int C, T* out,
                        cudaStream_t stream) {
  if (absl::Status s = CheckRows(count, C, "GatherRows"); !s.ok()) return s;
  if (count == 0) return absl::OkStatus();
  GatherRowsKernel<T><<<count, kThreads, 0, stream>>>(in, rows, C, out);
  return LastLaunchStatus("GatherRows");
}

template <typename T>
absl::Status ScatterAddRows(const T* d_rows, const int32_t* rows, int count, int C, T* d_full,
                            cudaStream_t stream) {
  if (absl::Status s = CheckRows(count, C, "ScatterAddRows"); !s.ok()) return s;
  if (count == 0) return absl::OkStatus();
  ScatterAddRowsKernel<T><<<count, kThreads, 0, stream>>>(d_rows, rows, C, d_full);
  return LastLaunchStatus("ScatterAddRows");
}

template <typename T>
absl::Status TanhForward(const T* x, T* y, size_t n, cudaStream_t stream) {
  if (n == 0) return absl::OkStatus();
  TanhForwardKernel<T><<<GridFor(n, kThreads), kThreads, 0, stream>>>(x, y, n);
  return LastLaunchStatus("TanhForward");
}

template <typename T>
absl::Status TanhBackward(const T* d_y, const T* y, T* d_x, size_t n, cudaStream_t stream) {
  if (n == 0) return absl::OkStatus();
  TanhBackwardKernel<T><<<GridFor(n, kThreads), kThreads, 0, stream>>>(d_y, y, d_x, n);
  return LastLaunchStatus("TanhBackward");
}

#define MTRAIN_INSTANTIATE_BERT_HEADS(T)                                                         \
  template absl::Status GatherRows<T>(const T*, const int32_t*, int, int, T*, cudaStream_t);     \
  template absl::Status ScatterAddRows<T>(const T*, const int32_t*, int, int, T*, cudaStream_t); \
  template absl::Status TanhForward<T>(const T*, T*, size_t, cudaStream_t);                      \
  template absl::Status TanhBackward<T>(const T*, const T*, T*, size_t, cudaStream_t);
MTRAIN_INSTANTIATE_BERT_HEADS(float)
MTRAIN_INSTANTIATE_BERT_HEADS(__nv_bfloat16)
MTRAIN_INSTANTIATE_BERT_HEADS(__half)
#undef MTRAIN_INSTANTIATE_BERT_HEADS

}  // namespace mtrain::cuda
