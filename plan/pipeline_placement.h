// Which pipeline stage and model chunk hold each virtual stage (the model cut into p * v
// consecutive pieces, layer_partition.h). Two placements:
//   loop  (GPipe, 1F1B, interleaved, ZB-H1): virtual stage k = chunk * p + stage, so the
//         pieces go round the stages v times and each hand-over goes to the next stage
//         (from the last to the first between chunks);
//   V     (SCHEDULE_ZB_V, two chunks): chunk 0 of stage s is virtual stage s and chunk 1 is
//         2p - 1 - s: the model goes down the stages and back up, so stage p - 1 hands its
//         chunk 0's output to its own chunk 1, and stage 0 holds the first and the last
//         virtual stage (the embedding and the head on one rank).
//
//   const int k = VirtualStageOf(stage, chunk, p, /*v_shape=*/true);
//   const StageChunk at = StageChunkOf(k + 1, p, true);  // who receives stage's output
#ifndef MTRAIN_PLAN_PIPELINE_PLACEMENT_H_
#define MTRAIN_PLAN_PIPELINE_PLACEMENT_H_

namespace mtrain {

struct StageChunk {
  int stage = 0;
  int chunk = 0;
};

inline int VirtualStageOf(int stage, int chunk, int pipeline, bool v_shape) {
  if (v_shape && chunk == 1) return 2 * pipeline - 1 - stage;
  return chunk * pipeline + stage;
}

// `virtual_stage` in [0, p * v); v = 2 under the V placement.
inline StageChunk StageChunkOf(int virtual_stage, int pipeline, bool v_shape) {
  if (v_shape && virtual_stage >= pipeline) return {2 * pipeline - 1 - virtual_stage, 1};
  return {virtual_stage % pipeline, virtual_stage / pipeline};
}

// The stage whose last virtual stage computes the loss: the last stage in the loop, stage 0
// in the V.
inline int LossStage(int pipeline, bool v_shape) { return v_shape ? 0 : pipeline - 1; }

}  // namespace mtrain

#endif  // MTRAIN_PLAN_PIPELINE_PLACEMENT_H_
