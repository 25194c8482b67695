// The weak-scaling table of Megatron-LM's 2021 paper (Narayanan et al., "Efficient
// Large-Scale Language Model Training on GPU Clusters Using Megatron-LM", Table 1): GPT
// models from 1.7B to 1T parameters on DGX A100 nodes, vocabulary 51,200, sequence 2048,
// interleaved 1F1B with full recompute, and the TFLOP/s per GPU they measured (counted with
// recompute). The cost model predicts each row from a cluster description alone (no fitting
// per row): `bazel run //plan:megatron_weak_scaling` prints the comparison that
// docs/PERFORMANCE.md shows, and the planner's own choice for each row.
#ifndef MTRAIN_PLAN_MEGATRON_WEAK_SCALING_H_
#define MTRAIN_PLAN_MEGATRON_WEAK_SCALING_H_

#include <string>
#include <vector>

#include "plan/layout_search.h"
#include "plan/step_cost_model.h"
#include "proto/cluster.pb.h"
#include "proto/job_spec.pb.h"

namespace mtrain {

struct MegatronRow {
  std::string parameters;  // "1.7B"
  int heads, hidden, layers, tensor, pipeline, gpus, batch;
  double published_tflops_per_gpu;
};

// The ten rows of the paper's table.
const std::vector<MegatronRow>& MegatronWeakScalingRows();

// How Megatron-LM 2021 ran: unfused attention, half-precision gradients added into the
// reduction buffer by a pass of their own each microbatch and reduced without overlap,
// scatter/gather pipeline messages, dropout on.
StepCostOptions MegatronLm2021Options();

// The row's spec: the published t and p, d = gpus / (t p), micro batch 1, fp16, full
// recompute, the interleaved schedule with virtual_stages v (1: plain 1F1B).
JobSpec MegatronRowSpec(const MegatronRow& row, int virtual_stages);

struct MegatronPrediction {
  JobSpec spec;  // the published layout with the v the model finds fastest
  StepCost cost;
  RankMemoryEstimate memory;  // Megatron-LM's activations (megatron_activation_memory.h)
  double error = 0;           // predicted / published TFLOP/s per GPU - 1
  // The planner's own choice on the same GPUs (any t, p, v, micro batch; recompute as
  // the memory needs, with Megatron-LM's activations), or none when nothing fits.
  bool has_choice = false;
  PricedLayout choice;
  // The same search with the zero-bubble schedules allowed (ZB-H1, ZB-V), their split
  // backward at the paper's equal costs (its GPU implementation measures F, B and W
  // about equal): what the planner would pick if the engines ran them on these GPUs.
  bool has_zero_bubble_choice = false;
  PricedLayout zero_bubble_choice;
};

// `max_virtual_stages` bounds the interleaving tried for the published layout (0: any v
// that divides the stage's layers).
MegatronPrediction PredictMegatronRow(const MegatronRow& row, const ClusterDescription& cluster,
                                      int max_virtual_stages = 0);

}  // namespace mtrain

#endif  // MTRAIN_PLAN_MEGATRON_WEAK_SCALING_H_
