// The attention core for every x86-64-v2 CPU (SSE vectors).
#define MTRAIN_ATTENTION_NAMESPACE generic
#define MTRAIN_ATTENTION_VECTOR_BYTES 16
#include "kernels/attention_core.inc"
