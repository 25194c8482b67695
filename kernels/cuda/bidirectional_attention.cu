// BidirectionalAttentionForward and BidirectionalAttentionBackward
// (kernels/cuda/bidirectional_attention.h): the shape check, then the scalar kernels'
// bidirectional instantiations (attention_scalar.cu).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "kernels/cuda/attention_common.cuh"
#include "kernels/cuda/bidirectional_attention.h"

namespace mtrain::cuda {

template <typename T>
absl::Status BidirectionalAttentionForward(const T* qkv, const int32_t* lengths, T* out, float* lse,
                                           const AttentionShape& shape,
                                           const AttentionDropout& dropout, cudaStream_t stream) {
  if (absl::Status s = attention_internal::CheckShape(shape); !s.ok()) return s;
  if (shape.batch == 0 || shape.seq == 0) return absl::OkStatus();
  return attention_internal::ScalarBidirectionalForward<T>(
      qkv, lengths, out, lse, shape, attention_internal::MakeDropout(dropout, shape), stream);
}

template <typename T>
absl::Status BidirectionalAttentionBackward(const T* d_out, const T* qkv, const T* out,
                                            const float* lse, const int32_t* lengths, T* d_qkv,
                                            const AttentionShape& shape,
                                            const AttentionDropout& dropout, cudaStream_t stream,
                                            bool accumulate) {
  if (absl::Status s = attention_internal::CheckShape(shape); !s.ok()) return s;
  if (shape.batch == 0 || shape.seq == 0) return absl::OkStatus();
  if (!accumulate) {
    // The kernels add into d_qkv and leave padded rows alone: start from zeros.
    const size_t bytes = size_t(shape.batch) * shape.seq *
                         (shape.heads + 2 * shape.kv_head_count()) * shape.head_dim * sizeof(T);
    if (absl::Status s = CudaStatus(cudaMemsetAsync(d_qkv, 0, bytes, stream),
                                    "BidirectionalAttentionBackward (zeroing d_qkv)");
        !s.ok()) {
      return s;
    }
  }
  return attention_internal::ScalarBidirectionalBackward<T>(
      d_out, qkv, lengths, out, lse, d_qkv, shape, attention_internal::MakeDropout(dropout, shape),
      stream);
}

#define MTRAIN_INSTANTIATE_BIDIRECTIONAL_ATTENTION(T)                                            \
  template absl::Status BidirectionalAttentionForward<T>(const T*, const int32_t*, T*, float*,   \
                                                         const AttentionShape&,                  \
                                                         const AttentionDropout&, cudaStream_t); \
  template absl::Status BidirectionalAttentionBackward<T>(                                       \
      const T*, const T*, const T*, const float*, const int32_t*, T*, const AttentionShape&,     \
      const AttentionDropout&, cudaStream_t, bool);
MTRAIN_INSTANTIATE_BIDIRECTIONAL_ATTENTION(float)
MTRAIN_INSTANTIATE_BIDIRECTIONAL_ATTENTION(__nv_bfloat16)
MTRAIN_INSTANTIATE_BIDIRECTIONAL_ATTENTION(__half)
#undef MTRAIN_INSTANTIATE_BIDIRECTIONAL_ATTENTION

}  // namespace mtrain::cuda
