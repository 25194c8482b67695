// What the CPU and CUDA engines must agree on for their numbers and dropout masks to be the
// same bit for bit (given the same data and seed): the LayerNorm epsilon and where each
// dropout mask's random stream comes from. One definition for both engines: copies that
// drifted apart would silently make a GPU run differ from the CPU run it is checked against.
//
//   const uint64_t key = DropoutKeyOf(seed, id, global_layer, kMlpOutSite);
#ifndef MTRAIN_WORKER_ENGINE_MODEL_NUMERICS_H_
#define MTRAIN_WORKER_ENGINE_MODEL_NUMERICS_H_

#include <cstdint>

#include "kernels/dropout.h"
#include "worker/engine/model_shape.h"
#include "worker/parallel/microbatch.h"  // MicrobatchId

namespace mtrain {

// The normalisation's epsilon (model.norm_epsilon, a float in the spec; 1e-5 for GPT-2),
// in the precision the kernels have always been given it.
inline float NormEpsilon(const ModelShape& shape) { return static_cast<float>(shape.norm_epsilon); }

// Dropout sites inside a layer, and the embedding's and the pooler's (layer -1).
enum DropoutSite {
  kEmbeddingSite = 0,
  kAttentionProbSite = 1,
  kAttentionOutSite = 2,
  kMlpOutSite = 3,
  kPoolerOutSite = 4,  // BERT's multiple-choice head: the pooler's output before the score
};

// The key of one dropout mask: the job's seed, the microbatch (step and first sample, so a
// sample gets the same mask whichever replica or microbatch split trains it) and the site
// within the whole model (global layer, so pipeline stages agree).
inline uint64_t DropoutKeyOf(uint64_t seed, const MicrobatchId& id, int global_layer, int site) {
  return cpu::DropoutKey(seed, static_cast<uint64_t>(id.step),
                         static_cast<uint64_t>(id.first_sample),
                         static_cast<uint64_t>((global_layer + 1) * 4 + site));
}

}  // namespace mtrain

#endif  // MTRAIN_WORKER_ENGINE_MODEL_NUMERICS_H_
