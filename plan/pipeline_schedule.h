// Pipeline schedules as explicit per-rank action lists (proto/assignment.proto's
// PipelineSchedule). The coordinator generates them; a worker executes its list in order
// and never decides anything itself.
//
// Execution semantics (what the executor does and what the checker proves safe):
//   FORWARD(mb, c)       runs chunk c's forward on microbatch mb. Its input is the token
//                        batch on the first virtual stage, else the activation an earlier
//                        RECV_FORWARD(mb, c) on this rank received.
//   BACKWARD(mb, c)      runs chunk c's backward on mb (after FORWARD(mb, c)). Its output
//                        gradient is the loss on the last virtual stage, else what an
//                        earlier RECV_BACKWARD(mb, c) received.
//   BACKWARD_INPUT(mb, c)  its first part: the gradient of the chunk's input (what
//                        SEND_BACKWARD sends), keeping what the weights' gradients need;
//   BACKWARD_WEIGHT(mb, c) its second part, later: the weights' gradients.
//   SEND_FORWARD(mb, c)  sends chunk c's output of mb (after FORWARD(mb, c)) to the rank of
//                        the next virtual stage. NON-BLOCKING: posted, completes later.
//   RECV_FORWARD(mb, c)  receives chunk c's input of mb from the previous virtual stage.
//                        BLOCKS until the matching send has been posted.
//   SEND_BACKWARD(mb, c) sends the gradient of chunk c's input of mb (after BACKWARD) to
//                        the previous virtual stage. Non-blocking.
//   RECV_BACKWARD(mb, c) receives the gradient of chunk c's output of mb from the next
//                        virtual stage. Blocks.
// A message is matched by (sender, receiver, PipelineMessageTag). Virtual stage k =
// chunk * p + stage (layer_partition.h); the next virtual stage of (stage p-1, chunk c) is
// (stage 0, chunk c+1). Under ZB-V's V placement (pipeline_placement.h) chunk 1 of stage s
// is virtual stage 2p - 1 - s, and stage p - 1 passes its chunk 0's output to its own chunk 1
// (a message to itself).
//
// Schedules (m microbatches per step, p stages, v chunks per stage):
//   GPipe                 all forwards, then all backwards; up to m microbatches in flight.
//   1F1B (PipeDream-Flush) stage s: min(p - s - 1, m) warm-up forwards, then alternate one
//                        forward, one backward, then the remaining backwards; at most p
//                        microbatches in flight. Bubble (p-1)/m as GPipe, less memory.
//   Interleaved 1F1B      Megatron's schedule over v chunks per stage; needs m % p == 0
//                        and p >= 2; bubble (p-1)/(v m).
//   ZB-H1, ZB-V           zero-bubble schedules (zero_bubble_schedule.h): BACKWARD split
//                        into BACKWARD_INPUT(mb, c), which the previous virtual stage
//                        waits for (SEND_BACKWARD follows it), and BACKWARD_WEIGHT(mb, c),
//                        the weights' gradients, any time after it on the same rank.
//                        ZB-V needs v = 2 and places the chunks in a V
//                        (pipeline_placement.h): the schedule says so (v_shape).
//
//   ASSIGN_OR_RETURN(PipelineSchedule s, BuildPipelineSchedule(config, stage, stage_ranks));
#ifndef MTRAIN_PLAN_PIPELINE_SCHEDULE_H_
#define MTRAIN_PLAN_PIPELINE_SCHEDULE_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/assignment.pb.h"
#include "proto/job_spec.pb.h"

namespace mtrain {

struct ScheduleConfig {
  Schedule schedule = SCHEDULE_1F1B;  // proto/job_spec.proto
  int pipeline = 1;                   // p
  int virtual_stages = 1;             // v; > 1 only with SCHEDULE_INTERLEAVED_1F1B
  int microbatches = 1;               // m, per step on one data-parallel replica
};

// The action list of pipeline stage `stage`. `stage_ranks[s]` is the global rank of stage
// s in this rank's pipeline group (it fills PipelineAction::peer_rank). With p == 1 the
// list is FORWARD(mb, 0), BACKWARD(mb, 0) for each mb (no messages). INVALID_ARGUMENT
// naming the rule for an inconsistent config (m < 1, v > 1 without interleaving,
// interleaving with p < 2 or m % p != 0, stage out of range, stage_ranks.size() != p).
absl::StatusOr<PipelineSchedule> BuildPipelineSchedule(const ScheduleConfig& config, int stage,
                                                       const std::vector<int>& stage_ranks);

// The tag that matches a SEND_* action to its RECV_*: unique per (direction, microbatch,
// receiving virtual stage). `stage` is the stage of the rank executing `action`.
// `v_shape`: the schedule's (PipelineSchedule.v_shape), which places the virtual stages.
uint64_t PipelineMessageTag(const PipelineAction& action, int stage, int pipeline,
                            bool v_shape = false);

}  // namespace mtrain

#endif  // MTRAIN_PLAN_PIPELINE_SCHEDULE_H_
