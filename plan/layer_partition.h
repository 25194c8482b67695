// Which transformer layers each pipeline stage holds.
//
// With v model chunks per stage (interleaved schedule), the model is cut into p * v
// "virtual stages" of L / (p v) consecutive layers; virtual stage k = chunk * p + stage
// lives on `stage` as model chunk `chunk`. Without interleaving (v = 1) stage s holds
// layers [s L/p, (s+1) L/p). The first virtual stage also holds the embeddings, the last
// the final LayerNorm and the (tied) output layer.
//
//   p = 2, v = 2, L = 8:  stage 0: chunk 0 = layers 0-1, chunk 1 = layers 4-5
//                         stage 1: chunk 0 = layers 2-3, chunk 1 = layers 6-7
//
// ZB-V's V placement (`v_shape`, v = 2, pipeline_placement.h) puts virtual stage 2p - 1 - s
// in chunk 1 of stage s: the model runs down the stages and back up, and stage 0 holds the
// first and the last layers, with the embedding and the head:
//
//   p = 2, V, L = 8:      stage 0: chunk 0 = layers 0-1, chunk 1 = layers 6-7
//                         stage 1: chunk 0 = layers 2-3, chunk 1 = layers 4-5
#ifndef MTRAIN_PLAN_LAYER_PARTITION_H_
#define MTRAIN_PLAN_LAYER_PARTITION_H_

#include <vector>

#include "absl/status/statusor.h"
#include "proto/assignment.pb.h"

namespace mtrain {

// The chunks of `stage`, in chunk order. INVALID_ARGUMENT unless num_layers is a positive
// multiple of pipeline * virtual_stages, 0 <= stage < pipeline, and virtual_stages == 2
// under the V placement.
absl::StatusOr<std::vector<LayerRange>> PartitionLayers(int num_layers, int pipeline,
                                                        int virtual_stages, int stage,
                                                        bool v_shape = false);

}  // namespace mtrain

#endif  // MTRAIN_PLAN_LAYER_PARTITION_H_
