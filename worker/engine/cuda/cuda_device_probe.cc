#include "worker/engine/cuda/cuda_device_probe.h"

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <functional>
#include <memory>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/matmul.h"
#include "worker/engine/cuda/device_buffer.h"

namespace mtrain::cuda {
namespace {

// cudaEvent pair around `run` on `stream`, repeated until `budget` seconds have passed;
// the fastest repetition in seconds.
absl::StatusOr<double> FastestSeconds(const std::function<absl::Status()>& run, cudaStream_t stream,
                                      double budget) {
  cudaEvent_t start = nullptr, stop = nullptr;
  RETURN_IF_ERROR(CudaStatus(cudaEventCreate(&start), "creating a timing event"));
  RETURN_IF_ERROR(CudaStatus(cudaEventCreate(&stop), "creating a timing event"));
  struct Events {
    cudaEvent_t a, b;
    ~Events() {
      cudaEventDestroy(a);
      cudaEventDestroy(b);
    }
  } events{start, stop};
  RETURN_IF_ERROR(run());  // warm-up: cuBLASLt picks its algorithm, clocks rise
  RETURN_IF_ERROR(CudaStatus(cudaStreamSynchronize(stream), "the warm-up"));
  double fastest = 0, spent = 0;
  for (int i = 0; i < 1000 && (i < 3 || spent < budget); ++i) {
    RETURN_IF_ERROR(CudaStatus(cudaEventRecord(start, stream), "recording an event"));
    RETURN_IF_ERROR(run());
    RETURN_IF_ERROR(CudaStatus(cudaEventRecord(stop, stream), "recording an event"));
    RETURN_IF_ERROR(CudaStatus(cudaEventSynchronize(stop), "waiting for the measurement"));
    float ms = 0;
    RETURN_IF_ERROR(CudaStatus(cudaEventElapsedTime(&ms, start, stop), "reading an event"));
    const double seconds = ms * 1e-3;
    spent += seconds;
    if (fastest == 0 || seconds < fastest) fastest = seconds;
  }
  return fastest;
}

// FLOP/s of out[n, n] = a[n, n] @ b[n, n]^T in T.
template <typename T>
absl::StatusOr<double> GemmRate(CublasLt& blas, int n, cudaStream_t stream, double budget) {
  const size_t elements = static_cast<size_t>(n) * n;
  ASSIGN_OR_RETURN(DeviceBuffer<T> a, DeviceBuffer<T>::Create(elements, "the probe's GEMM"));
  ASSIGN_OR_RETURN(DeviceBuffer<T> b, DeviceBuffer<T>::Create(elements, "the probe's GEMM"));
  ASSIGN_OR_RETURN(DeviceBuffer<T> c, DeviceBuffer<T>::Create(elements, "the probe's GEMM"));
  // Zeros: the rate does not depend on the values, and NaN-free inputs keep it honest.
  RETURN_IF_ERROR(CudaStatus(cudaMemsetAsync(a.get(), 0, a.bytes(), stream), "clearing"));
  RETURN_IF_ERROR(CudaStatus(cudaMemsetAsync(b.get(), 0, b.bytes(), stream), "clearing"));
  ASSIGN_OR_RETURN(const double seconds, FastestSeconds(
                                             [&] {
                                               return MatmulForward<T>(blas, a.get(), b.get(),
                                                                       nullptr, c.get(), n, n, n,
                                                                       stream);
                                             },
                                             stream, budget));
  return 2.0 * n * n * n / seconds;
}

}  // namespace

absl::StatusOr<CudaDeviceMeasurement> MeasureCudaDevice(int device,
                                                        const CudaProbeOptions& options) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || device < 0 || device >= count) {
    cudaGetLastError();  // clear it
    return absl::FailedPreconditionError(
        absl::StrCat("no CUDA device ", device, " (", count, " visible)"));
  }
  RETURN_IF_ERROR(CudaStatus(cudaSetDevice(device), absl::StrCat("selecting device ", device)));
  cudaDeviceProp properties;
  RETURN_IF_ERROR(
      CudaStatus(cudaGetDeviceProperties(&properties, device), "reading the device's properties"));
  CudaDeviceMeasurement m;
  m.name = properties.name;
  size_t free_bytes = 0, total_bytes = 0;
  RETURN_IF_ERROR(CudaStatus(cudaMemGetInfo(&free_bytes, &total_bytes), "reading free memory"));
  m.total_memory_bytes = static_cast<int64_t>(total_bytes);
  m.free_memory_bytes = static_cast<int64_t>(free_bytes);

  cudaStream_t stream = nullptr;
  RETURN_IF_ERROR(CudaStatus(cudaStreamCreate(&stream), "creating the probe's stream"));
  struct Stream {
    cudaStream_t s;
    ~Stream() { cudaStreamDestroy(s); }
  } owned{stream};
  ASSIGN_OR_RETURN(std::unique_ptr<CublasLt> blas, CublasLt::Create());
  const double budget = options.seconds_per_measurement;
  ASSIGN_OR_RETURN(m.fp32_flops, GemmRate<float>(*blas, options.large, stream, budget));
  ASSIGN_OR_RETURN(m.bf16_flops, GemmRate<__nv_bfloat16>(*blas, options.large, stream, budget));
  ASSIGN_OR_RETURN(m.bf16_small_flops,
                   GemmRate<__nv_bfloat16>(*blas, options.small, stream, budget));

  // 256 MiB copied device to device: read once, written once.
  const size_t copy_bytes = size_t{256} << 20;
  ASSIGN_OR_RETURN(DeviceBuffer<char> from, DeviceBuffer<char>::Create(copy_bytes, "the copy"));
  ASSIGN_OR_RETURN(DeviceBuffer<char> to, DeviceBuffer<char>::Create(copy_bytes, "the copy"));
  ASSIGN_OR_RETURN(const double copy_seconds,
                   FastestSeconds(
                       [&] {
                         return CudaStatus(cudaMemcpyAsync(to.get(), from.get(), copy_bytes,
                                                           cudaMemcpyDeviceToDevice, stream),
                                           "copying");
                       },
                       stream, budget));
  m.copy_bytes_per_second = 2.0 * copy_bytes / copy_seconds;
  return m;
}

}  // namespace mtrain::cuda
