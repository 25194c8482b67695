// The compute order of the zero-bubble schedules (Qi et al., "Zero Bubble Pipeline
// Parallelism", ICLR 2024): each backward is split into B (the gradient of the chunk's
// input, which the previous virtual stage waits for) and W (the weights' gradients, which
// only this rank needs, before the optimizer step), and W fills what would be bubble.
// Costs as the checker counts them (plan/schedule_checker.h): F = B = W = 1, a combined
// backward 2; messages free.
//
// ZB-H1 (one chunk a stage), written out: stage s forwards min(p - s, m) microbatches, then
// for each microbatch b in order: B(b); W(oldest owed) when more than s are owed; the next
// F if any; finally the W's still owed. Stage s thus keeps at most p microbatches' activations
// (p - s forwarded ahead, s W's owed): 1F1B's peak (its first stage's) on every stage. With
// m >= p every stage idles p - 1 units against 3m busy: bubble (p - 1) / (3m), a third of
// 1F1B's (p - 1) / m. Its last s W's fill the end, while stage s waits for stage 0's last B.
//
// ZB-V (two chunks a stage in a V, plan/pipeline_placement.h), by list scheduling: time runs
// in units, and at each unit every idle stage starts the first of these that is ready:
//   1. a B whose output gradient has arrived (the critical path), oldest microbatch first
//      (then the later virtual stage: nearer the loss);
//   2. an F whose input has arrived, while the stage keeps fewer than 2p forwards whose W has
//      not run, oldest microbatch first (then the later virtual stage);
//   3. a W, oldest first.
// 2p chunk activations of half a stage's layers each are what 1F1B's first stage keeps
// (p microbatches of the whole stage). Measured by the checker for p <= 16, m <= 64, m >= p:
// a bubble between (p - 1) / (6m) (p - 1 idle units against 6m busy; p = 4: every m) and
// 1.8 times that, so never above ZB-H1's (p - 1) / (3m) and always below interleaved
// 1F1B's (p - 1) / (2m) at v = 2, which keeps more; the paper's hand-built ZB-V reaches
// about 0 at F = B = W (zero_bubble_schedule_test sweeps it).
//
// Both are deadlock-free by construction (a B or a W never waits on memory) and
// plan/schedule_checker proves each list built from them.
#ifndef MTRAIN_PLAN_ZERO_BUBBLE_SCHEDULE_H_
#define MTRAIN_PLAN_ZERO_BUBBLE_SCHEDULE_H_

#include <vector>

namespace mtrain {

struct ZeroBubbleCompute {
  enum Kind { kForward, kBackwardInput, kBackwardWeight };
  Kind kind;
  int microbatch;
  int chunk;
};

// Every stage's compute order for m microbatches over p stages: ZB-H1 (`v_shape` false) or
// ZB-V (`v_shape` true). p >= 1, m >= 1.
std::vector<std::vector<ZeroBubbleCompute>> ZeroBubbleOrders(int pipeline, int microbatches,
                                                             bool v_shape);

}  // namespace mtrain

#endif  // MTRAIN_PLAN_ZERO_BUBBLE_SCHEDULE_H_
