// The attention core on 512-bit AVX-512 vectors; compiled with -mavx512{f,bw,dq,vl}
// -ffp-contract=off (kernels/BUILD: GCC's AVX-512 implies FMA, which contraction would use)
// and run only where the CPU has them (attention.cc).
#define MTRAIN_ATTENTION_NAMESPACE avx512
#define MTRAIN_ATTENTION_VECTOR_BYTES 64
#include "kernels/attention_core.inc"
