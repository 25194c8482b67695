#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/swiglu.h"

namespace mtrain::cuda {
namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ float Sigmoid(float g) { return 1.0f / (1.0f + __expf(-g)); }

// One thread per output element i = row * F + c (grid-stride).
template <typename T>
__global__ void SwiGluForwardKernel(const T* gate_up, T* y, size_t n, int F) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    const size_t row = i / F, c = i % F;
    const T* gate = gate_up + row * 2 * F;
    const float g = ToFloat(gate[c]);
    y[i] = FromFloat<T>(g * Sigmoid(g) * ToFloat(gate[F + c]));
  }
}

// d up = d_y silu(g); d gate = d_y up silu'(g), silu'(g) = s (1 + g (1 - s)).
template <typename T>
__global__ void SwiGluBackwardKernel(const T* d_y, const T* gate_up, T* d_gate_up, size_t n, int F,
                                     bool accumulate) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    const size_t row = i / F, c = i % F;
    const size_t gate_at = row * 2 * F + c, up_at = gate_at + F;
    const float g = ToFloat(gate_up[gate_at]);
    const float u = ToFloat(gate_up[up_at]);
    const float dy = ToFloat(d_y[i]);
    const float s = Sigmoid(g);
    const float d_up = dy * g * s;
    const float d_gate = dy * u * s * (1.0f + g * (1.0f - s));
    d_gate_up[up_at] = FromFloat<T>(accumulate ? ToFloat(d_gate_up[up_at]) + d_up : d_up);
    d_gate_up[gate_at] = FromFloat<T>(accumulate ? ToFloat(d_gate_up[gate_at]) + d_gate : d_gate);
  }
}

absl::Status CheckShape(int rows, int F) {
  if (rows < 0 || F <= 0) return absl::InvalidArgumentError("SwiGlu: rows must be >= 0 and F > 0");
  return absl::OkStatus();
}

}  // namespace

template <typename T>
absl::Status SwiGluForward(const T* gate_up, T* y, int rows, int F, cudaStream_t stream) {
  if (absl::Status s = CheckShape(rows, F); !s.ok() || rows == 0) return s;
  const size_t n = size_t(rows) * F;
  SwiGluForwardKernel<T><<<GridFor(n, kThreads), kThreads, 0, stream>>>(gate_up, y, n, F);
  return LastLaunchStatus("SwiGluForward");
}

template <typename T>
absl::Status SwiGluBackward(const T* d_y, const T* gate_up, T* d_gate_up, int rows, int F,
                            cudaStream_t stream, bool accumulate) {
  if (absl::Status s = CheckShape(rows, F); !s.ok() || rows == 0) return s;
  const size_t n = size_t(rows) * F;
  SwiGluBackwardKernel<T>
      <<<GridFor(n, kThreads), kThreads, 0, stream>>>(d_y, gate_up, d_gate_up, n, F, accumulate);
  return LastLaunchStatus("SwiGluBackward");
}

#define MTRAIN_INSTANTIATE_SWIGLU(T)                                            \
  template absl::Status SwiGluForward<T>(const T*, T*, int, int, cudaStream_t); \
  template absl::Status SwiGluBackward<T>(const T*, const T*, T*, int, int, cudaStream_t, bool);
MTRAIN_INSTANTIATE_SWIGLU(float)
MTRAIN_INSTANTIATE_SWIGLU(__nv_bfloat16)
MTRAIN_INSTANTIATE_SWIGLU(__half)

}  // namespace mtrain::cuda
