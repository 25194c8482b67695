// The attention core on 256-bit AVX2 vectors; compiled with -mavx2 -ffp-contract=off
// (kernels/BUILD) and run only where the CPU has AVX2 (attention.cc).
#define MTRAIN_ATTENTION_NAMESPACE avx2
#define MTRAIN_ATTENTION_VECTOR_BYTES 32
#include "kernels/attention_core.inc"
