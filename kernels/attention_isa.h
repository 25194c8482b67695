// The attention core's builds per instruction set (attention_core.inc); attention.cc picks
// one with CpuKernelIsa (cpu_isa.h). All give bit-identical results (the AVX2 and AVX-512
// builds run the softmax and its gradient on 256- and 512-bit vectors), except the AVX-512
// build in fp32 at head_dim 32, 64 and 128, which runs its own register tiles and agrees
// with the others to float rounding (attention_core.inc).
#ifndef MTRAIN_KERNELS_ATTENTION_ISA_H_
#define MTRAIN_KERNELS_ATTENTION_ISA_H_

#include <cstdint>

#include "kernels/attention.h"

namespace mtrain::cpu {

// `lengths` null: causal attention; else bidirectional over each sequence's real positions
// (kernels/bidirectional_attention.h).
#define MTRAIN_DECLARE_ATTENTION_CORE(isa)                                                        \
  namespace isa {                                                                                 \
  template <typename T>                                                                           \
  void Forward(const T* qkv, const int32_t* lengths, T* out, T* lse, const AttentionShape& shape, \
               const AttentionDropout& dropout);                                                  \
  template <typename T>                                                                           \
  void Backward(const T* d_out, const T* qkv, const T* out, const T* lse, const int32_t* lengths, \
                T* d_qkv, const AttentionShape& shape, const AttentionDropout& dropout);          \
  }
MTRAIN_DECLARE_ATTENTION_CORE(generic)
MTRAIN_DECLARE_ATTENTION_CORE(avx2)
MTRAIN_DECLARE_ATTENTION_CORE(avx512)
#undef MTRAIN_DECLARE_ATTENTION_CORE

}  // namespace mtrain::cpu

#endif  // MTRAIN_KERNELS_ATTENTION_ISA_H_
