// How a rank's model chunks run, whatever the engine (CPU: worker/engine/cpu/model_chunk.h;
// CUDA: worker/engine/cuda/cuda_gpt_model.h): dropout, Megatron-Core's recomputation
// granularities and sequence parallelism. Set from the spec by recompute_options.h.
#ifndef MTRAIN_WORKER_ENGINE_MODEL_OPTIONS_H_
#define MTRAIN_WORKER_ENGINE_MODEL_OPTIONS_H_

#include <cstdint>

namespace mtrain {

struct ModelOptions {
  float dropout = 0.0f;
  bool recompute = false;            // full recomputation
  int recompute_group = 1;           // full, uniform: layers recomputed together from one input
  int recompute_block = -1;          // full, block (>= 0): only the chunk's first this many layers
  bool selective_recompute = false;  // the attention core only
  // Sequence parallelism (needs a tensor group of t > 1 and B * S % t == 0): the residual
  // stream, and a chunk's hidden input and output, hold this tensor rank's R = B * S / t rows.
  bool sequence_parallel = false;
  uint64_t seed = 0;
};

}  // namespace mtrain

#endif  // MTRAIN_WORKER_ENGINE_MODEL_OPTIONS_H_
