#include "kernels/attention.h"

#include "kernels/attention_isa.h"
#include "kernels/cpu_isa.h"

namespace mtrain::cpu {

template <typename T>
void AttentionForward(const T* qkv, T* out, T* lse, const AttentionShape& shape,
                      const AttentionDropout& dropout) {
  switch (CpuKernelIsa()) {
    case KernelIsa::kAvx512:
      return avx512::Forward(qkv, /*lengths=*/nullptr, out, lse, shape, dropout);
    case KernelIsa::kAvx2:
      return avx2::Forward(qkv, /*lengths=*/nullptr, out, lse, shape, dropout);
    case KernelIsa::kGeneric:
      return generic::Forward(qkv, /*lengths=*/nullptr, out, lse, shape, dropout);
  }
}

template <typename T>
void AttentionBackward(const T* d_out, const T* qkv, const T* out, const T* lse, T* d_qkv,
                       const AttentionShape& shape, const AttentionDropout& dropout) {
  switch (CpuKernelIsa()) {
    case KernelIsa::kAvx512:
      return avx512::Backward(d_out, qkv, out, lse, /*lengths=*/nullptr, d_qkv, shape, dropout);
    case KernelIsa::kAvx2:
      return avx2::Backward(d_out, qkv, out, lse, /*lengths=*/nullptr, d_qkv, shape, dropout);
    case KernelIsa::kGeneric:
      return generic::Backward(d_out, qkv, out, lse, /*lengths=*/nullptr, d_qkv, shape, dropout);
  }
}

template void AttentionForward<float>(const float*, float*, float*, const AttentionShape&,
                                      const AttentionDropout&);
template void AttentionForward<double>(const double*, double*, double*, const AttentionShape&,
                                       const AttentionDropout&);
template void AttentionBackward<float>(const float*, const float*, const float*, const float*,
                                       float*, const AttentionShape&, const AttentionDropout&);
template void AttentionBackward<double>(const double*, const double*, const double*, const double*,
                                        double*, const AttentionShape&, const AttentionDropout&);

}  // namespace mtrain::cpu
