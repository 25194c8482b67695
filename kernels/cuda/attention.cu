// FlashAttentionForward and FlashAttentionBackward (kernels/cuda/attention.h): the shape
// check, then the implementation: the tensor-core kernels for bf16 and fp16 multi-head
// attention at head dims 64 and 128, the scalar kernels otherwise (attention_common.cuh lists
// the files).
#include <string>
#include <type_traits>

#include "kernels/cuda/attention.h"
#include "kernels/cuda/attention_common.cuh"
#include "kernels/cuda/dropout_mask.cuh"

namespace mtrain::cuda {
namespace {

using attention_internal::DeviceDropout;

absl::Status CheckShape(const AttentionShape& s) {
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

// bf16 and fp16 multi-head attention at head dims 64 and 128 runs on the tensor-core kernels;
// grouped-query heads on the scalar ones (their dK/dV sum over a group is not in the
// tensor-core kernels).
bool TensorCoresRun(const AttentionShape& s) {
  return (s.head_dim == 64 || s.head_dim == 128) && s.kv_head_count() == s.heads;
}

DeviceDropout MakeDropout(const AttentionDropout& d, const AttentionShape& shape) {
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

}  // namespace

template <typename T>
absl::Status FlashAttentionForward(const T* qkv, T* out, float* lse, const AttentionShape& shape,
                                   const AttentionDropout& dropout, cudaStream_t stream) {
  if (absl::Status s = CheckShape(shape); !s.ok()) return s;
  if (shape.batch == 0 || shape.seq == 0) return absl::OkStatus();
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
                                    const AttentionDropout& dropout, cudaStream_t stream) {
  if (absl::Status s = CheckShape(shape); !s.ok()) return s;
  if (shape.batch == 0 || shape.seq == 0) return absl::OkStatus();
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
                                                    const AttentionDropout&, cudaStream_t);
template absl::Status FlashAttentionBackward<__nv_bfloat16>(const __nv_bfloat16*,
                                                            const __nv_bfloat16*,
                                                            const __nv_bfloat16*, const float*,
                                                            __nv_bfloat16*, const AttentionShape&,
                                                            const AttentionDropout&, cudaStream_t);
template absl::Status FlashAttentionForward<__half>(const __half*, __half*, float*,
                                                    const AttentionShape&, const AttentionDropout&,
                                                    cudaStream_t);
template absl::Status FlashAttentionBackward<__half>(const __half*, const __half*, const __half*,
                                                     const float*, __half*, const AttentionShape&,
                                                     const AttentionDropout&, cudaStream_t);

}  // namespace mtrain::cuda
