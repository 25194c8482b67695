// How many bytes one rank of a job needs: its weights, their gradients, AdamW's moments,
// the activations of the microbatches it holds in flight and the logits workspace of the
// last pipeline stage. The coordinator refuses specs whose estimate is absurd
// (job_spec_validation) or larger than every worker that could run them (JobManager).
//
// The model, per pipeline stage s of a (t, p, d) grid, with C = hidden_size, Cl = C / t,
// S = seq_length, B = micro_batch_size, N = B * S tokens per microbatch, Vl = padded
// vocabulary / t (worker/engine/parameter_layout.cc and activations.h hold the same
// tensors):
//   parameters   per layer 12 C Cl + 7 Cl + 6 C, times num_layers / p; the first stage adds
//                the word embedding Vl C and positions S C; the last adds the final
//                LayerNorm 2 C and, when it is not also the first, its copy of the tied
//                word embedding Vl C.
//   weights      4 bytes per parameter (fp32 master weights), + 2 for the half-precision
//                working copy under bf16/fp16.
//   gradients    4 bytes per parameter (one fp32 buffer, all-reduced in buckets).
//   optimizer    AdamW's two fp32 moments, 8 bytes per parameter, divided by data under
//                ZeRO-1 (rounded up).
//   activations  every layer-microbatch in flight keeps its input N C and, without
//                train.recompute, its saved set 3 N C + 12 N Cl + 4 N + B (heads / t) S
//                (LayerNorm inputs and statistics, qkv, attention output, residual, MLP
//                before and after GeLU, the attention log-sum-exp). Layer-microbatches in
//                flight on stage s: GPipe m L/p; 1F1B min(p - s, m) L/p; interleaved
//                (pipeline_schedule.cc's warm-up plus one) min(2 (p - s - 1) + (v - 1) p + 1,
//                m v) L/(p v), all m v chunks when m == p. fp32 (this project's engines keep
//                activations in fp32 for every precision). With
//                RankMemoryOptions::activations = kMegatronLm the saved set is Megatron-LM's
//                (Korthikanti et al. 2022, megatron_activation_memory.h) in the spec's
//                precision.
//   logits       the last stage keeps N Vl logits (+ LayerNorm output N C and 5 N
//                statistics) per microbatch in flight on it (GPipe m, 1F1B 1, interleaved
//                at most min(m, p)). fp32.
//   workspace    what the engine allocates besides: per chunk-microbatch in flight its
//                token ids and the pipeline's input, output and output gradient (3 N +
//                3 N C); each chunk's backward scratch (2 N C + 12 N Cl; a recomputed
//                layer's saved set); the head's N Vl + 3 N C + N on the last stage; every
//                microbatch's tokens and targets (2 N m). worker/engine/
//                rank_allocation_estimate.cc counts the same from a rank's own schedule
//                (its test holds the two together).
// The rank reported is the stage that needs the most (the first or the last). The
// estimate is of the engine's own allocations (what the CPU engine reports as
// host_memory_peak_bytes); the process's code, communicator buffers and data set come on
// top.
//
// All arithmetic is 64-bit and saturating: a value that does not fit int64 is reported as
// kSaturatedBytes, never wraps. It is the planner's memory model (layout_search.h rejects
// layouts with it); each term is a separate, named function of the spec.
//
//   const RankMemoryEstimate memory = EstimateRankMemory(spec);
//   if (memory.total_bytes > worker.memory_bytes()) ...
#ifndef MTRAIN_PLAN_RANK_MEMORY_ESTIMATE_H_
#define MTRAIN_PLAN_RANK_MEMORY_ESTIMATE_H_

#include <cstdint>
#include <limits>
#include <string>

#include "proto/job_spec.pb.h"

namespace mtrain {

// What a term is set to when it does not fit 64 bits.
inline constexpr int64_t kSaturatedBytes = std::numeric_limits<int64_t>::max();

struct RankMemoryEstimate {
  int pipeline_stage = 0;        // the stage whose ranks need the most
  int64_t parameters = 0;        // parameter count held by one rank of that stage
  int64_t weight_bytes = 0;      // fp32 master weights (+ half copy for bf16/fp16)
  int64_t gradient_bytes = 0;    // fp32 gradients
  int64_t optimizer_bytes = 0;   // AdamW moments (ZeRO-1: divided by data)
  int64_t activation_bytes = 0;  // transformer layers' saved activations in flight
  int64_t logits_bytes = 0;      // last stage: logits in flight
  int64_t workspace_bytes = 0;   // pipeline buffers, backward scratch, token buffers
  int64_t total_bytes = 0;       // sum, saturating

  // "18.2 MiB (pipeline stage 0, 842496 parameters: weights 3.2 MiB, gradients ...)".
  std::string ToString() const;
};

enum class ActivationModel {
  kThisProjectsEngines,  // flash attention, fp32 activations (activations.h)
  kMegatronLm,           // Megatron-LM's saved tensors, S^2 scores included, in the precision
};

struct RankMemoryOptions {
  ActivationModel activations = ActivationModel::kThisProjectsEngines;
};

// The estimate for the rank that needs the most. `spec` must have its defaults applied;
// sizes that are not positive are taken as 1 (validation reports them), so any spec gives
// a defined answer.
RankMemoryEstimate EstimateRankMemory(const JobSpec& spec, const RankMemoryOptions& options = {});

// The estimate for a rank of pipeline stage `stage` (clamped to the stages there are).
RankMemoryEstimate EstimateStageMemory(const JobSpec& spec, int stage,
                                       const RankMemoryOptions& options = {});

// "1.5 GiB", "512 B", "more than 8 EiB" (kSaturatedBytes).
std::string FormatMemoryBytes(int64_t bytes);

}  // namespace mtrain

#endif  // MTRAIN_PLAN_RANK_MEMORY_ESTIMATE_H_
