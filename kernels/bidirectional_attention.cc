#include "kernels/bidirectional_attention.h"

#include "kernels/attention_isa.h"
#include "kernels/cpu_isa.h"

namespace mtrain::cpu {

template <typename T>
void BidirectionalAttentionForward(const T* qkv, const int32_t* lengths, T* out, T* lse,
                                   const AttentionShape& shape, const AttentionDropout& dropout) {
  switch (CpuKernelIsa()) {
    case KernelIsa::kAvx512:
      return avx512::Forward(qkv, lengths, out, lse, shape, dropout);
    case KernelIsa::kAvx2:
      return avx2::Forward(qkv, lengths, out, lse, shape, dropout);
    case KernelIsa::kGeneric:
      return generic::Forward(qkv, lengths, out, lse, shape, dropout);
  }
}

template <typename T>
void BidirectionalAttentionBackward(const T* d_out, const T* qkv, const T* out, const T* lse,
                                    const int32_t* lengths, T* d_qkv, const AttentionShape& shape,
                                    const AttentionDropout& dropout) {
  switch (CpuKernelIsa()) {
    case KernelIsa::kAvx512:
      return avx512::Backward(d_out, qkv, out, lse, lengths, d_qkv, shape, dropout);
    case KernelIsa::kAvx2:
      return avx2::Backward(d_out, qkv, out, lse, lengths, d_qkv, shape, dropout);
    case KernelIsa::kGeneric:
      return generic::Backward(d_out, qkv, out, lse, lengths, d_qkv, shape, dropout);
  }
}

template void BidirectionalAttentionForward<float>(const float*, const int32_t*, float*, float*,
                                                   const AttentionShape&, const AttentionDropout&);
template void BidirectionalAttentionForward<double>(const double*, const int32_t*, double*, double*,
                                                    const AttentionShape&, const AttentionDropout&);
template void BidirectionalAttentionBackward<float>(const float*, const float*, const float*,
                                                    const float*, const int32_t*, float*,
                                                    const AttentionShape&, const AttentionDropout&);
template void BidirectionalAttentionBackward<double>(const double*, const double*, const double*,
                                                     const double*, const int32_t*, double*,
                                                     const AttentionShape&,
                                                     const AttentionDropout&);

}  // namespace mtrain::cpu
