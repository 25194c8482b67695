// The planner's cost model: the predicted time of one training step of a job spec under its
// layout (t, p, d, v, micro batch, recompute, ZeRO) on a described cluster, term by term, and
// the FLOP counts that turn it into tokens/s, TFLOP/s per device and MFU. Pure arithmetic:
// no I/O, no clock, so the coordinator, `trainctl plan` and tests get the same answer.
//
// One step of the slowest pipeline stage, per device (n = B s tokens per microbatch,
// e = bytes per activation element: 2 in bf16/fp16, 4 in fp32):
//   matmuls      every GEMM of a layer (QKV, projection, MLP in and out; forward once,
//                backward twice, a second forward under recompute) at
//                rate * matmul_efficiency * prod over its dimensions x of x / (x + half_size)
//                (the efficiency curve for small matrices); the head's logits GEMM on the
//                last stage.
//   attention    fused (flash attention, this project's CPU and CUDA engines): the causal
//                half of the S^2 products, the backward recomputing the scores, no S^2
//                memory traffic; unfused (Megatron-LM 2021): all S^2 products, each no faster
//                than its S^2 output moves through memory, plus the softmax and dropout
//                passes over the scores (4e + 1 bytes an element forward, 5e + 1 backward).
//   elementwise  LayerNorms, bias + dropout + residual, bias + GeLU: bytes moved / sustained
//                memory bandwidth (replicated across the tensor group except GeLU's; on
//                n/t rows under sequence parallelism).
//   tensor comm  ring all-reduces of n h e bytes: 2 per layer forward, 2 backward, 2 more
//                under recompute, 2 (t - 1)/t bytes / bandwidth + 2 (t - 1) latencies
//                (sequence parallelism: all-gathers and reduce-scatters of the same bytes,
//                plus the backward's 2 all-gathers of the LayerNorm outputs); the
//                vocabulary-parallel head adds one (the tied layer's input gradient), the
//                embedding one on a single stage, the cross-entropy three of n values.
//   pipeline     per microbatch and model chunk one activation forward and one gradient
//                back, n h e bytes, not overlapped (with scatter/gather: n h e / t bytes
//                between stages, then an all-gather of the slices in the tensor group;
//                sequence parallelism: the rank's n h e / t rows, nothing gathered).
//   bubble       (p - 1) microbatch-times for GPipe and 1F1B, (p - 1)/v interleaved;
//                the zero-bubble schedules' (ZB-H1, ZB-V) from plan/schedule_checker's
//                timed simulation of their own action lists at the split backward's
//                measured costs (StepCostOptions), its overhead priced as elementwise
//                time; divided by the ranks time-sharing a device (their idle time is
//                not lost).
//   data comm    ring all-reduce (or reduce-scatter + all-gather under ZeRO-1: the same
//                bytes) of the rank's gradients, minus the overlapped fraction.
//   optimizer    AdamW over the rank's parameter slice (ZeRO-1: 1/d), bytes / bandwidth.
//   accumulate   where the implementation adds each microbatch's gradients into the
//                reduction buffer in a pass of its own: its bytes / memory bandwidth.
// Links: a tensor group is on one node when t <= devices_per_node; a data group when
// t d <= devices_per_node; pipeline neighbours when t d p <= devices_per_node (the rank
// grid puts tensor innermost, then data, then pipeline: plan/rank_grid.h). A group
// spanning nodes with k members on each uses min(k, inter_node_adapters) adapters.
//
// FLOPs: model/model_flops.h, the one count the trainer's metrics use too (Megatron-LM,
// Narayanan et al. 2021; for GPT-2 72 B s l h^2 (1 + s/(6h) + V/(12 l h)) with V padded);
// hardware FLOPs add what recomputation runs again (full: 96 B s l h^2 (1 + s/(6h) +
// V/(16 l h))). MFU = model FLOPs / (step time * devices * peak).
//
//   const StepCost cost = PredictStepCost(spec, cluster);
//   std::cout << cost.step_seconds << " s, " << cost.mfu * 100 << "% MFU\n";
#ifndef MTRAIN_PLAN_STEP_COST_MODEL_H_
#define MTRAIN_PLAN_STEP_COST_MODEL_H_

#include "plan/schedule_checker.h"
#include "proto/cluster.pb.h"
#include "proto/job_spec.pb.h"

namespace mtrain {

enum class AttentionKernel {
  kFused,    // flash attention (this project's engines)
  kUnfused,  // S^2 scores in memory, separate softmax and dropout kernels (Megatron-LM 2021)
};

// How the implementation being priced behaves, beyond what the spec says.
// The CPU engine's split backward, measured (see StepCostOptions): stage 0's compute under
// ZB-H1 against 1F1B at p = 2, m = 4 and 8 (hidden 256, two ranks on two cores) was 0.99
// and 0.98 of it, no overhead within the noise, so the halves are priced at the paper's
// equal split.
inline constexpr double kMeasuredBackwardInputShare = 0.5;
inline constexpr double kMeasuredBackwardWeightShare = 0.5;

struct StepCostOptions {
  AttentionKernel attention = AttentionKernel::kFused;
  // Bytes per gradient element in the data-parallel reduction: 4 for this project's fp32
  // gradient buffers; 2 where half-precision gradients are reduced.
  int gradient_bytes = 4;
  // Fraction of the data-parallel reduction hidden behind the backward pass (this
  // project's engines start each bucket's all-reduce as soon as it is full).
  double data_parallel_overlap = 0.0;
  // Pipeline messages split across the tensor group and all-gathered on the receiver.
  bool scatter_gather = false;
  // Bytes per parameter that a separate pass moves each microbatch to add the backward's
  // gradients into the data-parallel reduction buffer (0: the weight-gradient GEMMs
  // accumulate into it themselves, as this project's engines' do).
  int gradient_accumulation_bytes = 0;
  // Dropout masks priced in the elementwise passes (the spec's train.dropout > 0 or not).
  bool dropout = true;
  // Ranks time-sharing one device (CPU ranks of one host, each given 1/this of it by
  // ShareDevices): a rank idle in the pipeline bubble leaves its share to the others, so
  // the bubble costs 1/this of what it costs ranks on devices of their own.
  int ranks_per_device = 1;
  // The zero-bubble schedules' split backward: its input half and its weight half, each
  // as a fraction of the combined backward's time. A sum above 1 is the split's overhead
  // (the CPU engine's weight half copies each linear layer's output gradient and input
  // when the input half runs, and its GEMMs run apart from the input half's). Defaults:
  // this project's CPU engine as tests/bench/pipeline_bubble.py measured it
  // (docs/PERFORMANCE.md).
  double backward_input_share = kMeasuredBackwardInputShare;
  double backward_weight_share = kMeasuredBackwardWeightShare;
};

struct StepCost {
  // Per step, on the slowest pipeline stage's ranks, in seconds.
  double matmul_seconds = 0;
  double attention_seconds = 0;    // the attention core outside the linear layers
  double elementwise_seconds = 0;  // LayerNorm, GeLU, dropout, residual, cross-entropy
  double tensor_comm_seconds = 0;
  double pipeline_comm_seconds = 0;
  double bubble_seconds = 0;
  double data_comm_seconds = 0;  // the part not hidden behind the backward
  double optimizer_seconds = 0;
  double step_seconds = 0;  // the sum

  double bubble_fraction = 0;  // bubble / (step - bubble): (p - 1)/m, (p - 1)/(v m)
  int microbatches = 0;        // m per step on each pipeline
  int devices = 0;             // t p d

  double model_flops = 0;     // per step, whole job (model/model_flops.h)
  double hardware_flops = 0;  // per step, whole job, counting recompute (96 formula)
  double tokens_per_second = 0;
  double model_flops_per_device = 0;     // model FLOP/s of one device
  double hardware_flops_per_device = 0;  // hardware FLOP/s of one device
  double mfu = 0;                        // model FLOP/s / peak of the spec's precision
};

// The bubble fraction (idle over one stage's compute) of SCHEDULE_ZB_H1 or SCHEDULE_ZB_V at
// p stages and m microbatches with `costs`, from the checker's simulation of their
// schedules (cached; the paper's closed forms beyond a million actions).
double ZeroBubbleFraction(Schedule schedule, int p, int m, const ComputeCosts& costs);

// How this project's engines run `spec`: flash attention, fp32 gradients whose data-parallel
// buckets are reduced during the backward (about half of that time hidden), dropout as the
// spec sets it, pipeline messages sliced over the tensor group unless
// parallel.scatter_gather is false, recomputation as train.recompute_granularity says.
// What `trainctl plan`, `parallel.auto` and predict_step price.
StepCostOptions ProjectEngineOptions(const JobSpec& spec);

// Megatron-LM's FLOPs of one step of `spec` (resolved: defaults applied), by
// model/model_flops.h: model FLOPs, and hardware FLOPs counting recomputation.
double ModelFlopsPerStep(const JobSpec& spec);
double HardwareFlopsPerStep(const JobSpec& spec);

// The peak FLOP/s of one device at the spec's precision (16-bit uses half_flops when the
// device has it).
double PeakFlops(const JobSpec& spec, const DeviceProfile& device);

// The prediction for `spec` (resolved and valid: its layout divides the model) on
// `cluster`. Device counts beyond the cluster's are not checked here (layout_search does).
StepCost PredictStepCost(const JobSpec& spec, const ClusterDescription& cluster,
                         const StepCostOptions& options = {});

}  // namespace mtrain

#endif  // MTRAIN_PLAN_STEP_COST_MODEL_H_
