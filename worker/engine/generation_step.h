// One generation step of a rank's model chunks, whatever the engine (CPU or CUDA): the new
// positions' hidden states go through the chunks in the model's order, the virtual stages
// of plan/pipeline_placement.h (in the loop: chunk 0 of stages 0..p-1, then chunk 1 of
// each stage, and so on; in ZB-V's V: chunk 0 down the stages, chunk 1 back up), over the
// pipeline group; the last chunk's logits are gathered over the tensor group and broadcast
// to every stage, so every rank samples the same token.
//
//   ASSIGN_OR_RETURN(std::vector<float> logits,
//                    RunGenerationStep(groups, chunks, count, hidden, vocab, position,
//                                      [&](int c, const float* in, float* out) {...}));
#ifndef MTRAIN_WORKER_ENGINE_GENERATION_STEP_H_
#define MTRAIN_WORKER_ENGINE_GENERATION_STEP_H_

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/parallel/rank_groups.h"

namespace mtrain {

// What the step needs to know of one of the rank's chunks.
struct GenerationChunk {
  bool has_embedding = false;
  bool has_head = false;
  int local_vocab = 0;  // this tensor rank's padded vocabulary shard (with the head)
};

// Runs chunk `chunk` on the new positions: `hidden_in` (host float [count, hidden]; null
// on the chunk with the embeddings, which takes the tokens the caller bound); writes `out`:
// [count, hidden] without the head, else the last position's logits over the shard
// [local_vocab].
using DecodeChunkFn = std::function<absl::Status(int chunk, const float* hidden_in, float* out)>;

// `v_shape`: the chunks sit in ZB-V's V. `count` new positions, the first of them at
// `first_position` of the sequence (it keeps the pipeline messages' tags apart). Returns the logits
// over the real vocabulary [vocab], the same on every rank of the tensor and pipeline groups.
// Collective.
absl::StatusOr<std::vector<float>> RunGenerationStep(const RankGroups& groups,
                                                     const std::vector<GenerationChunk>& chunks,
                                                     bool v_shape, int count, int hidden, int vocab,
                                                     int64_t first_position,
                                                     const DecodeChunkFn& decode);

}  // namespace mtrain

#endif  // MTRAIN_WORKER_ENGINE_GENERATION_STEP_H_
