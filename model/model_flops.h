// The one FLOPs count of a training step, for MFU everywhere (the trainer's metrics lines,
// the planner's predictions, `trainctl plan`): Megatron-LM's model FLOPs (Narayanan et al.
// 2021, appendix), written per matrix multiply so that it holds for every family of
// model/transformer_config.h. Per token and layer, forward: 2 h (q + 2 kv) for the query,
// key and value projections, 2 q h for the output projection, 2 h f x (2, or 3 when gated)
// for the MLP, 4 s q for the attention scores and their product with the values (the whole
// s x s matrix, as Megatron counts it, though a causal kernel computes half); the output
// layer 2 h V. The backward is twice the forward. For GPT-2 (q = kv = h, f = 4 h) this is
//   72 B s l h^2 (1 + s / (6 h) + V / (12 l h)),
// with V the padded vocabulary (the logits the engines compute).
#ifndef MTRAIN_MODEL_MODEL_FLOPS_H_
#define MTRAIN_MODEL_MODEL_FLOPS_H_

#include "model/transformer_config.h"

namespace mtrain {

// Model FLOPs of one step of `global_batch` sequences, without recomputation.
double ModelFlopsPerStep(const TransformerConfig& config, double global_batch);

// The FLOPs recomputation adds to a step: `recomputed_share` of the layers run their
// forward again (full recomputation), and under `selective` the attention core's two
// products again (Korthikanti et al.).
double RecomputeFlopsPerStep(const TransformerConfig& config, double global_batch,
                             double recomputed_share, bool selective);

}  // namespace mtrain

#endif  // MTRAIN_MODEL_MODEL_FLOPS_H_
