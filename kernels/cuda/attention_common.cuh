// What the two implementations of kernels/cuda/attention.h share, and their entry points:
//   attention_scalar.cu       scalar float kernels, a thread per query (or key) row: every T
//                             at head dims 32, 64 and 128 (fp32 always takes them);
//   attention_tensor_core.cu  FlashAttention-2-style mma.sync kernels: bf16 and fp16 at head
//                             dims 64 and 128;
//   attention.cu              the public functions: check the shape, then choose one;
//   bidirectional_attention.cu  BERT's bidirectional attention over each sequence's real
//                             positions (the scalar kernels' bidirectional instantiations).
// Both drop the probabilities through DeviceDropout at the same global index as the CPU
// (kernels/attention.cc), so whichever runs, the same elements are dropped.
// Internal to //kernels/cuda:attention; nothing outside it includes this header.
#ifndef MTRAIN_KERNELS_CUDA_ATTENTION_COMMON_CUH_
#define MTRAIN_KERNELS_CUDA_ATTENTION_COMMON_CUH_

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/dropout_mask.cuh"

namespace mtrain::cuda::attention_internal {

// kernels/dropout.cc's mask (dropout_mask.cuh) over the probabilities, at their global
// index in [B, total_heads, S, S].
struct DeviceDropout {
  uint64_t key = 0;
  uint32_t threshold = 0;  // 0: no dropout
  float scale = 1.0f;      // 1 / (1 - p)
  int head_offset = 0;
  int total_heads = 0;

  // The factor element (b, h, i, j) of the probabilities is multiplied by: 0 or 1/(1-p).
  __device__ __forceinline__ float Factor(int b, int h, int i, int j, int S) const {
    if (threshold == 0) return 1.0f;
    const uint64_t index =
        ((uint64_t(b) * total_heads + head_offset + h) * uint64_t(S) + i) * uint64_t(S) + j;
    return DropoutKeep(key, index, threshold) ? scale : 0.0f;
  }
};

// The shape rules every entry point checks first (INVALID_ARGUMENT naming the rule).
inline absl::Status CheckShape(const AttentionShape& s) {
  if (s.batch < 0 || s.seq < 0 || s.heads <= 0) {
    return absl::InvalidArgumentError("FlashAttention: need batch, seq >= 0 and heads > 0");
  }
  if (s.kv_head_count() <= 0 || s.heads % s.kv_head_count() != 0) {
    return absl::InvalidArgumentError("FlashAttention: kv_heads " + std::to_string(s.kv_heads) +
                                      " must divide heads " + std::to_string(s.heads));
  }
  if (s.head_dim != 32 && s.head_dim != 64 && s.head_dim != 128) {
    return absl::InvalidArgumentError("FlashAttention: head_dim " + std::to_string(s.head_dim) +
                                      " is not supported [rule: 32, 64 or 128]");
  }
  return absl::OkStatus();
}

// The caller's AttentionDropout as the kernels take it.
inline DeviceDropout MakeDropout(const AttentionDropout& d, const AttentionShape& shape) {
  DeviceDropout out;
  if (d.p > 0) {
    out.key = d.key;
    out.threshold = DropoutThreshold(d.p);
    out.scale = 1.0f / (1.0f - d.p);
  }
  out.head_offset = d.head_offset;
  out.total_heads = d.total_heads > 0 ? d.total_heads : shape.heads;
  return out;
}

// Element offsets into qkv[B, S, H + 2 Hkv, D] (the H query heads, then the Hkv key heads,
// then the Hkv value heads; [B, S, 3, H, D] when Hkv = H) and out[B, S, H, D]. `h` is a
// query head for part 0 and a key-value head for parts 1 and 2.
__device__ __forceinline__ size_t QkvRow(int b, int i, int part, int h, int S, int H, int Hkv,
                                         int D) {
  const int head = part == 0 ? h : (part == 1 ? H + h : H + Hkv + h);
  return (size_t(b) * S + i) * size_t(H + 2 * Hkv) * D + size_t(head) * D;
}
// Multi-head attention (Hkv = H): what the tensor-core kernels index.
__device__ __forceinline__ size_t QkvRow(int b, int i, int part, int h, int S, int H, int D) {
  return QkvRow(b, i, part, h, S, H, H, D);
}
__device__ __forceinline__ size_t OutRow(int b, int i, int h, int S, int H, int D) {
  return (size_t(b) * S + i) * size_t(H) * D + size_t(h) * D;
}

// Launches `kernel` (raising its dynamic shared-memory limit when it needs more than the
// default 48 KiB) and returns the launch's status.
template <typename... Params, typename... Args>
absl::Status Launch(void (*kernel)(Params...), dim3 grid, int threads, size_t smem,
                    cudaStream_t stream, const char* what, Args... args) {
  if (smem > 48 * 1024) {
    if (absl::Status s =
            CudaStatus(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            static_cast<int>(smem)),
                       what);
        !s.ok()) {
      return s;
    }
  }
  kernel<<<grid, threads, smem, stream>>>(args...);
  return LastLaunchStatus(what);
}

// The implementations' entry points. The caller has checked the shape (attention.cu's
// CheckShape) and handles empty batches; `drop` is the caller's AttentionDropout on the
// device. Semantics are FlashAttentionForward's and FlashAttentionBackward's.

// Any T; head_dim 32, 64 or 128; any key-value heads dividing the heads.
template <typename T>
absl::Status ScalarAttentionForward(const T* qkv, T* out, float* lse, const AttentionShape& shape,
                                    const DeviceDropout& drop, cudaStream_t stream);
template <typename T>
absl::Status ScalarAttentionBackward(const T* d_out, const T* qkv, const T* out, const float* lse,
                                     T* d_qkv, const AttentionShape& shape,
                                     const DeviceDropout& drop, cudaStream_t stream);

// Bidirectional attention with each sequence's real length (`lengths`: device int32 [B],
// each in [1, S]), kernels/cuda/bidirectional_attention.h's semantics: the scalar kernels'
// bidirectional instantiations, any T, head_dim 32, 64 or 128, grouped-query heads.
template <typename T>
absl::Status ScalarBidirectionalForward(const T* qkv, const int32_t* lengths, T* out, float* lse,
                                        const AttentionShape& shape, const DeviceDropout& drop,
                                        cudaStream_t stream);
template <typename T>
absl::Status ScalarBidirectionalBackward(const T* d_out, const T* qkv, const int32_t* lengths,
                                         const T* out, const float* lse, T* d_qkv,
                                         const AttentionShape& shape, const DeviceDropout& drop,
                                         cudaStream_t stream);

// T = __nv_bfloat16 or __half; head_dim 64 or 128; multi-head only (kv heads = heads).
template <typename T>
absl::Status TensorCoreAttentionForward(const T* qkv, T* out, float* lse,
                                        const AttentionShape& shape, const DeviceDropout& drop,
                                        cudaStream_t stream);
template <typename T>
absl::Status TensorCoreAttentionBackward(const T* d_out, const T* qkv, const T* out,
                                         const float* lse, T* d_qkv, const AttentionShape& shape,
                                         const DeviceDropout& drop, cudaStream_t stream);

}  // namespace mtrain::cuda::attention_internal

#endif  // MTRAIN_KERNELS_CUDA_ATTENTION_COMMON_CUH_
