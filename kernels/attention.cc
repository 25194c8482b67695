#include "kernels/attention.h"

#include "kernels/attention_isa.h"
#include "kernels/cpu_isa.h"

namespace mtrain::cpu {

template <typename T>
void AttentionForward(const T* qkv, T* out, T* lse, const AttentionShape& shape,
                      const AttentionDropout& dropout) {
  if (CpuKernelsUseAvx2()) {
    avx2::Forward(qkv, out, lse, shape, dropout);
  } else {
    generic::Forward(qkv, out, lse, shape, dropout);
  }
}

template <typename T>
void AttentionBackward(const T* d_out, const T* qkv, const T* out, const T* lse, T* d_qkv,
                       const AttentionShape& shape, const AttentionDropout& dropout) {
  if (CpuKernelsUseAvx2()) {
    avx2::Backward(d_out, qkv, out, lse, d_qkv, shape, dropout);
  } else {
    generic::Backward(d_out, qkv, out, lse, d_qkv, shape, dropout);
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
