// Proves a set of per-stage pipeline schedules (one pipeline group) correct before a
// worker runs them, and measures them:
//   - every (microbatch, chunk) gets exactly one FORWARD and one BACKWARD per stage, the
//     forward first; inputs and output gradients are received before they are used;
//     sends follow the computation that produced their data;
//   - every send has exactly one matching receive (same pair, same tag) and vice versa,
//     with the right peer (the rank of the adjacent virtual stage);
//   - executing all lists together under the semantics of pipeline_schedule.h (sends
//     non-blocking, receives blocking) finishes: no deadlock. On a deadlock the error
//     names each stage's blocked action;
//   - the most microbatches in flight per stage (forwarded, not yet backwarded, or not yet
//     through BACKWARD_WEIGHT; a microbatch counts once per chunk), bounding activation
//     memory;
//   - a split backward (BACKWARD_INPUT, then BACKWARD_WEIGHT) counts as the backward, and
//     its BACKWARD_WEIGHT comes after it, once; peers and tags follow the schedule's
//     placement of virtual stages (pipeline_placement.h: ZB-V's V);
//   - the bubble: a timed simulation where a chunk's forward costs 1 and its backward 2
//     (each half of a split one 1; ComputeCosts changes them), messages are free, each
//     action starts as soon as its stage and inputs allow. With busy = one stage's compute
//     (3 m v by default) and makespan T, bubble_fraction = (T - busy) / busy.
//
//   ASSIGN_OR_RETURN(ScheduleReport report, CheckPipelineSchedules(config, schedules, ranks));
#ifndef MTRAIN_PLAN_SCHEDULE_CHECKER_H_
#define MTRAIN_PLAN_SCHEDULE_CHECKER_H_

#include <vector>

#include "absl/status/statusor.h"
#include "plan/pipeline_schedule.h"
#include "proto/assignment.pb.h"

namespace mtrain {

// The timed simulation's costs of one chunk's compute, in any unit: by default a forward
// 1 and a backward 2 (two GEMMs per forward GEMM, the Megatron papers' bubble analysis),
// each half of a split backward 1 (the zero-bubble paper's equal case). The planner passes
// measured ones (step_cost_model.h).
struct ComputeCosts {
  double forward = 1;
  double backward = 2;
  double backward_input = 1;
  double backward_weight = 1;
};

struct ScheduleReport {
  std::vector<int> max_in_flight;  // per stage
  double makespan = 0;             // T, in the costs' unit (one chunk's forward by default)
  double bubble_fraction = 0;      // (T - busy) / busy; busy: one stage's compute
};

// `schedules[s]` is stage s's list; `stage_ranks` as in BuildPipelineSchedule.
// FAILED_PRECONDITION describing the first violation (stage, action index, action) or the
// deadlock.
absl::StatusOr<ScheduleReport> CheckPipelineSchedules(
    const ScheduleConfig& config, const std::vector<PipelineSchedule>& schedules,
    const std::vector<int>& stage_ranks, const ComputeCosts& costs = {});

// The bubble fraction of `config`'s own schedules (BuildPipelineSchedule for every stage),
// proven and simulated at `costs`. INVALID_ARGUMENT for a config the builder refuses.
absl::StatusOr<double> SimulatedBubbleFraction(const ScheduleConfig& config,
                                               const ComputeCosts& costs);

// Megatron's analytic bubble: (p-1)/m, or (p-1)/(v m) for the interleaved schedule; the
// zero-bubble paper's with equal F, B and W: (p-1)/(3m) for ZB-H1, 0 for ZB-V.
double IdealBubbleFraction(const ScheduleConfig& config);

}  // namespace mtrain

#endif  // MTRAIN_PLAN_SCHEDULE_CHECKER_H_
