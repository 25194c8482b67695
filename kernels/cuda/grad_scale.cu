#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/grad_scale.h"

namespace mtrain::cuda {
namespace {

constexpr int kThreads = 256;
// A fixed number of partial sums whatever the device: the result does not depend on
// how many SMs the GPU has.
constexpr int kPartials = 1024;

template <typename T>
__global__ void PartialSumsKernel(const T* x, size_t n, double* partial, int* found_nonfinite) {
  __shared__ double scratch[32];
  double sum = 0;
  bool nonfinite = false;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    const float v = ToFloat(x[i]);
    nonfinite |= !isfinite(v);
    sum += double(v) * double(v);
  }
  if (nonfinite) *found_nonfinite = 1;  // benign race: every writer writes 1
  sum = BlockSum(sum, scratch);
  if (threadIdx.x == 0) partial[blockIdx.x] = sum;
}

__global__ void FinalSumKernel(const double* partial, int count, double* out) {
  __shared__ double scratch[32];
  double sum = 0;
  for (int i = threadIdx.x; i < count; i += blockDim.x) sum += partial[i];
  sum = BlockSum(sum, scratch);
  if (threadIdx.x == 0) *out = sum;
}

template <typename T>
__global__ void ScaleKernel(T* x, size_t n, float factor, int* found_nonfinite) {
  bool nonfinite = false;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    // The stored value is checked, not the float product: a product finite in float
    // overflows fp16 (and, at the very top of float's range, bf16) when rounded to T.
    const T stored = FromFloat<T>(ToFloat(x[i]) * factor);
    nonfinite |= !isfinite(ToFloat(stored));
    x[i] = stored;
  }
  if (nonfinite) *found_nonfinite = 1;
}

}  // namespace

template <typename T>
absl::Status SumOfSquaresAndNonFinite(const T* x, size_t n, double* sum_of_squares,
                                      int* found_nonfinite, cudaStream_t stream) {
  double* partial = nullptr;
  if (absl::Status s = CudaStatus(
          cudaMallocAsync(reinterpret_cast<void**>(&partial), kPartials * sizeof(double), stream),
          "SumOfSquares scratch");
      !s.ok()) {
    return s;
  }
  PartialSumsKernel<T><<<kPartials, kThreads, 0, stream>>>(x, n, partial, found_nonfinite);
  absl::Status launched = LastLaunchStatus("SumOfSquares");
  if (launched.ok()) {
    FinalSumKernel<<<1, 1024, 0, stream>>>(partial, kPartials, sum_of_squares);
    launched.Update(LastLaunchStatus("SumOfSquares (final)"));
  }
  absl::Status freed = CudaStatus(cudaFreeAsync(partial, stream), "SumOfSquares scratch");
  return launched.ok() ? freed : launched;
}

template <typename T>
absl::Status ScaleAndCheckFinite(T* x, size_t n, float factor, int* found_nonfinite,
                                 cudaStream_t stream) {
  if (n == 0) return absl::OkStatus();
  ScaleKernel<T><<<GridFor(n, kThreads), kThreads, 0, stream>>>(x, n, factor, found_nonfinite);
  return LastLaunchStatus("ScaleAndCheckFinite");
}

template absl::Status SumOfSquaresAndNonFinite<float>(const float*, size_t, double*, int*,
                                                      cudaStream_t);
template absl::Status SumOfSquaresAndNonFinite<__nv_bfloat16>(const __nv_bfloat16*, size_t, double*,
                                                              int*, cudaStream_t);
template absl::Status SumOfSquaresAndNonFinite<__half>(const __half*, size_t, double*, int*,
                                                       cudaStream_t);
template absl::Status ScaleAndCheckFinite<float>(float*, size_t, float, int*, cudaStream_t);
template absl::Status ScaleAndCheckFinite<__nv_bfloat16>(__nv_bfloat16*, size_t, float, int*,
                                                         cudaStream_t);
template absl::Status ScaleAndCheckFinite<__half>(__half*, size_t, float, int*, cudaStream_t);

}  // namespace mtrain::cuda
