// The attention core on 512-bit AVX-512 vectors; compiled with -mavx512{f,bw,dq,vl}
// -ffp-contract=off (kernels/BUILD: GCC's AVX-512 implies FMA, which contraction would use)
// and run only where the CPU has them (attention.cc).
#define MTRAIN_ATTENTION_NAMESPACE avx512
#define MTRAIN_ATTENTION_VECTOR_BYTES 64
// GCC 12 reports its own intrinsics' placeholder operands (_mm512_undefined_ps, "__Y = __Y")
// as uninitialized once they are inlined into the register tiles (attention_tiles_avx512.inc),
// wherever the inlining lands: a known false positive, silenced for this build only.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include "kernels/attention_core.inc"
#pragma GCC diagnostic pop
