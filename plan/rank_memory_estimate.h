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
//   activations  per layer and microbatch 4 N C + 4 N + 12 N Cl + B (heads / t) S
//                elements (LayerNorm inputs and statistics, qkv, attention log-sum-exp,
//                attention output, residual, MLP before and after GeLU, layer input); with
//                train.recompute only the layer input N C is kept, plus one layer's full set
//                while it is recomputed. Times the layer-microbatches in flight on stage s:
//                GPipe m L/p; 1F1B min(p - s, m) L/p; interleaved (pipeline_schedule.cc's
//                warm-up plus one) min(2 (p - s - 1) + (v - 1) p + 1, m v) L/(p v), all
//                m v chunks when m == p. Counted as fp32 (4 bytes) for every precision: an
//                upper bound for bf16/fp16.
//   logits       the last stage keeps N Vl logits (+ LayerNorm output N C and 5 N
//                statistics) per microbatch in flight on it (GPipe m, 1F1B 1, interleaved
//                at most min(m, p)), plus one N Vl workspace for their gradient. fp32.
// The rank reported is the stage that needs the most (the first or the last). The
// estimate leaves out what does not grow with the spec (code, communicator buffers,
// the data set), so compare it with a margin.
//
// All arithmetic is 64-bit and saturating: a value that does not fit int64 is reported as
// kSaturatedBytes, never wraps. Issue 18 extends this into the planner's memory model; keep
// each term a separate, named function of the spec.
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
  int64_t logits_bytes = 0;      // last stage: logits in flight + their gradient
  int64_t total_bytes = 0;       // sum, saturating

  // "18.2 MiB (pipeline stage 0, 842496 parameters: weights 3.2 MiB, gradients ...)".
  std::string ToString() const;
};

// The estimate for the rank that needs the most. `spec` must have its defaults applied;
// sizes that are not positive are taken as 1 (validation reports them), so any spec gives
// a defined answer.
RankMemoryEstimate EstimateRankMemory(const JobSpec& spec);

// "1.5 GiB", "512 B", "more than 8 EiB" (kSaturatedBytes).
std::string FormatMemoryBytes(int64_t bytes);

}  // namespace mtrain

#endif  // MTRAIN_PLAN_RANK_MEMORY_ESTIMATE_H_
