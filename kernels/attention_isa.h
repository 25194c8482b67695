// The attention core's builds per instruction set (attention_core.inc) and the run-time
// choice between them. Both give bit-identical results (see attention_core.inc); the AVX2
// build runs its register-tiled products on 256-bit vectors, twice the SSE width that the
// project's -march=x86-64-v2 allows everywhere else.
#ifndef MTRAIN_KERNELS_ATTENTION_ISA_H_
#define MTRAIN_KERNELS_ATTENTION_ISA_H_

#include "kernels/attention.h"

namespace mtrain::cpu {

#define MTRAIN_DECLARE_ATTENTION_CORE(isa)                                                         \
  namespace isa {                                                                                  \
  template <typename T>                                                                            \
  void Forward(const T* qkv, T* out, T* att, const AttentionShape& shape,                          \
               const AttentionDropout& dropout);                                                   \
  template <typename T>                                                                            \
  void Backward(const T* d_out, const T* qkv, const T* att, T* d_qkv, const AttentionShape& shape, \
                const AttentionDropout& dropout);                                                  \
  }
MTRAIN_DECLARE_ATTENTION_CORE(generic)
MTRAIN_DECLARE_ATTENTION_CORE(avx2)
#undef MTRAIN_DECLARE_ATTENTION_CORE

// Whether this CPU runs the AVX2 build (checked once). MTRAIN_ATTENTION_ISA=generic in the
// environment forces the SSE build (for comparing the two).
bool AttentionUsesAvx2();

}  // namespace mtrain::cpu

#endif  // MTRAIN_KERNELS_ATTENTION_ISA_H_
