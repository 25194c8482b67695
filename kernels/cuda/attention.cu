// FlashAttentionForward and FlashAttentionBackward (kernels/cuda/attention.h): the shape
// check, then the implementation: the tensor-core kernels for bf16 and fp16 multi-head
// attention at head dims 64 and 128, the scalar kernels otherwise (attention_common.cuh lists
// the files).
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>
#include <type_traits>

#include "kernels/cuda/attention.h"
#include "kernels/cuda/attention_common.cuh"
#include "kernels/cuda/cudnn_attention.h"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/dropout_mask.cuh"

namespace mtrain::cuda {
namespace {

using attention_internal::DeviceDropout;

using attention_internal::CheckShape;
using attention_internal::MakeDropout;

// bf16 and fp16 multi-head attention at head dims 64 and 128 runs on the tensor-core kernels;
// grouped-query heads on the scalar ones (their dK/dV sum over a group is not in the
// tensor-core kernels).
bool TensorCoresRun(const AttentionShape& s) {
  return (s.head_dim == 64 || s.head_dim == 128) && s.kv_head_count() == s.heads;
}

AttentionImplementation DefaultImplementation() {
  const char* value = std::getenv("MTRAIN_ATTENTION");
  return value != nullptr && std::strcmp(value, "handwritten") == 0
             ? AttentionImplementation::kHandWritten
             : AttentionImplementation::kAuto;
}

std::atomic<AttentionImplementation>& Implementation() {
  static std::atomic<AttentionImplementation> implementation{DefaultImplementation()};
  return implementation;
}

template <typename T>
constexpr CudnnAttentionType CudnnTypeOf() {
  return std::is_same_v<T, __half> ? CudnnAttentionType::kFp16 : CudnnAttentionType::kBf16;
}

// Why cuDNN does not run this attention, or OK if it does. Forward and backward ask the same
// question of the same shape, so a microbatch never mixes the two paths' lse.
template <typename T>
absl::Status CudnnRefusal(const AttentionShape& shape, float dropout) {
  if constexpr (std::is_same_v<T, float>) {
    return absl::FailedPreconditionError("fp32 (cuDNN's fused attention is bf16/fp16)");
  } else {
    if (Implementation().load() == AttentionImplementation::kHandWritten) {
      return absl::FailedPreconditionError("MTRAIN_ATTENTION=handwritten");
    }
    if (dropout > 0) {
      return absl::FailedPreconditionError(
          "attention dropout > 0: its masks must equal the CPU engine's");
    }
    return CudnnAttentionSupports(shape, CudnnTypeOf<T>());
  }
}

template <typename T>
__global__ void AccumulateKernel(const T* from, T* into, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    into[i] = FromFloat<T>(ToFloat(into[i]) + ToFloat(from[i]));
  }
}

// cuDNN overwrites its gradients: accumulating goes through stream-ordered scratch.
template <typename T>
absl::Status CudnnBackward(const T* d_out, const T* qkv, const T* out, const float* lse, T* d_qkv,
                           const AttentionShape& shape, cudaStream_t stream, bool accumulate) {
  if (!accumulate) {
    return CudnnAttentionBackward(d_out, qkv, out, lse, d_qkv, shape, CudnnTypeOf<T>(), stream);
  }
  const size_t n =
      size_t(shape.batch) * shape.seq * (shape.heads + 2 * shape.kv_head_count()) * shape.head_dim;
  T* scratch = nullptr;
  if (absl::Status s =
          CudaStatus(cudaMallocAsync(reinterpret_cast<void**>(&scratch), n * sizeof(T), stream),
                     "FlashAttentionBackward scratch");
      !s.ok()) {
    return s;
  }
  absl::Status status =
      CudnnAttentionBackward(d_out, qkv, out, lse, scratch, shape, CudnnTypeOf<T>(), stream);
  if (status.ok()) {
    constexpr int kThreads = 256;
    AccumulateKernel<T><<<GridFor(n, kThreads), kThreads, 0, stream>>>(scratch, d_qkv, n);
    status.Update(LastLaunchStatus("FlashAttentionBackward (accumulate)"));
  }
  absl::Status freed = CudaStatus(cudaFreeAsync(scratch, stream), "FlashAttentionBackward scratch");
  return status.ok() ? freed : status;
}

}  // namespace

void SetAttentionImplementation(AttentionImplementation implementation) {
  Implementation().store(implementation);
}

template <typename T>
std::string AttentionPathFor(const AttentionShape& shape, float dropout) {
  if (absl::Status s = CheckShape(shape); !s.ok()) return std::string(s.message());
  const absl::Status refusal = CudnnRefusal<T>(shape, dropout);
  if (refusal.ok()) return "cuDNN " + CudnnVersionText() + " fused attention";
  const char* kernels = !std::is_same_v<T, float> && TensorCoresRun(shape)
                            ? "hand-written tensor-core flash kernels"
                            : "hand-written scalar flash kernels";
  return std::string(kernels) + " (" + std::string(refusal.message()) + ")";
}

template <typename T>
absl::Status FlashAttentionForward(const T* qkv, T* out, float* lse, const AttentionShape& shape,
                                   const AttentionDropout& dropout, cudaStream_t stream) {
  if (absl::Status s = CheckShape(shape); !s.ok()) return s;
  if (shape.batch == 0 || shape.seq == 0) return absl::OkStatus();
  if (CudnnRefusal<T>(shape, dropout.p).ok()) {
    return CudnnAttentionForward(qkv, out, lse, shape, CudnnTypeOf<T>(), stream);
  }
  const DeviceDropout drop = MakeDropout(dropout, shape);
  if constexpr (!std::is_same_v<T, float>) {  // bf16 and fp16: tensor cores
    if (TensorCoresRun(shape)) {
      return attention_internal::TensorCoreAttentionForward<T>(qkv, out, lse, shape, drop, stream);
    }
  }
  return attention_internal::ScalarAttentionForward<T>(qkv, out, lse, shape, drop, stream);
}

template <typename T>
absl::Status FlashAttentionBackward(const T* d_out, const T* qkv, const T* out, const float* lse,
                                    T* d_qkv, const AttentionShape& shape,
                                    const AttentionDropout& dropout, cudaStream_t stream,
                                    bool accumulate) {
  if (absl::Status s = CheckShape(shape); !s.ok()) return s;
  if (shape.batch == 0 || shape.seq == 0) return absl::OkStatus();
  if (CudnnRefusal<T>(shape, dropout.p).ok()) {
    return CudnnBackward<T>(d_out, qkv, out, lse, d_qkv, shape, stream, accumulate);
  }
  if (!accumulate) {
    const size_t bytes = size_t(shape.batch) * shape.seq *
                         (shape.heads + 2 * shape.kv_head_count()) * shape.head_dim * sizeof(T);
    if (absl::Status s = CudaStatus(cudaMemsetAsync(d_qkv, 0, bytes, stream),
                                    "FlashAttentionBackward (zeroing d_qkv)");
        !s.ok()) {
      return s;
    }
  }
  const DeviceDropout drop = MakeDropout(dropout, shape);
  if constexpr (!std::is_same_v<T, float>) {  // bf16 and fp16: tensor cores
    if (TensorCoresRun(shape)) {
      return attention_internal::TensorCoreAttentionBackward<T>(d_out, qkv, out, lse, d_qkv, shape,
                                                                drop, stream);
    }
  }
  return attention_internal::ScalarAttentionBackward<T>(d_out, qkv, out, lse, d_qkv, shape, drop,
                                                        stream);
}

template absl::Status FlashAttentionForward<float>(const float*, float*, float*,
                                                   const AttentionShape&, const AttentionDropout&,
                                                   cudaStream_t);
template absl::Status FlashAttentionForward<__nv_bfloat16>(const __nv_bfloat16*, __nv_bfloat16*,
                                                           float*, const AttentionShape&,
                                                           const AttentionDropout&, cudaStream_t);
template absl::Status FlashAttentionBackward<float>(const float*, const float*, const float*,
                                                    const float*, float*, const AttentionShape&,
                                                    const AttentionDropout&, cudaStream_t, bool);
template absl::Status FlashAttentionBackward<__nv_bfloat16>(
    const __nv_bfloat16*, const __nv_bfloat16*, const __nv_bfloat16*, const float*, __nv_bfloat16*,
    const AttentionShape&, const AttentionDropout&, cudaStream_t, bool);
template absl::Status FlashAttentionForward<__half>(const __half*, __half*, float*,
                                                    const AttentionShape&, const AttentionDropout&,
                                                    cudaStream_t);
template absl::Status FlashAttentionBackward<__half>(const __half*, const __half*, const __half*,
                                                     const float*, __half*, const AttentionShape&,
                                                     const AttentionDropout&, cudaStream_t, bool);

template std::string AttentionPathFor<float>(const AttentionShape&, float);
template std::string AttentionPathFor<__nv_bfloat16>(const AttentionShape&, float);
template std::string AttentionPathFor<__half>(const AttentionShape&, float);

}  // namespace mtrain::cuda
