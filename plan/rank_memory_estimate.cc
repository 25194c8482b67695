#include "plan/rank_memory_estimate.h"

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "model/parameter_table.h"
#include "model/transformer_config.h"
#include "plan/megatron_activation_memory.h"
#include "plan/pipeline_placement.h"
#include "plan/pipeline_schedule.h"
#include "spec/job_spec_arithmetic.h"

namespace mtrain {
namespace {

// Non-negative 64-bit arithmetic that sticks at kSaturatedBytes instead of wrapping: an
// absurd spec must read as "too big", never as a small or negative number.
int64_t Add(int64_t a, int64_t b) {
  int64_t sum;
  if (__builtin_add_overflow(a, b, &sum)) return kSaturatedBytes;
  return sum;
}

int64_t Mul(int64_t a, int64_t b) {
  int64_t product;
  if (__builtin_mul_overflow(a, b, &product)) return kSaturatedBytes;
  return product;
}

int64_t Sum(std::initializer_list<int64_t> terms) {
  int64_t total = 0;
  for (int64_t term : terms) total = Add(total, term);
  return total;
}

int64_t Positive(int64_t value) { return std::max<int64_t>(value, 1); }

constexpr int64_t kFp32Bytes = 4;
constexpr int64_t kHalfBytes = 2;
constexpr int64_t kAdamMoments = 2;

// The sizes every term uses, positive and 64-bit.
struct Shape {
  int64_t layers, heads, hidden, seq, vocab_local;
  int64_t tensor, pipeline, data, virtual_stages, micro_batch, microbatches;
  bool recompute, half_precision, zero1, dropout;
  // Full recomputation's groups (uniform) or recomputed layers per chunk (block, >= 0);
  // selective recomputation; sequence parallelism (Megatron's model only).
  int64_t recompute_group = 1, recompute_block = -1;
  bool selective = false, sequence_parallel = false;
  Schedule schedule;
  // The layer's MLP width on one tensor rank; parameters per tensor rank (model/).
  int64_t ffn_local = 0;
  int64_t qkv_local = 0;     // the fused query, key and value projections' width on one tensor rank
  int64_t query_local = 0;   // the attention output's width (query heads x head size) / t
  int64_t mlp_in_local = 0;  // the MLP input projection's width / t: F, or 2 F gated ([gate|up])
  int64_t norm_statistics =
      2;  // per row and normalisation: LayerNorm's mean and rstd, RMSNorm's rstd
  RankParameterCounts parameters;
  int64_t local_hidden() const { return hidden / tensor; }
  int64_t tokens() const { return Mul(micro_batch, seq); }  // N
};

Shape ShapeOf(const JobSpec& spec) {
  const ModelSpec& m = spec.model();
  const ParallelSpec& p = spec.parallel();
  Shape s;
  s.layers = Positive(m.num_layers());
  s.heads = Positive(m.num_heads());
  s.hidden = Positive(m.hidden_size());
  s.seq = Positive(m.seq_length());
  s.tensor = Positive(p.tensor());
  s.pipeline = Positive(p.pipeline());
  s.data = Positive(p.data());
  s.virtual_stages = Positive(p.virtual_stages());
  s.micro_batch = Positive(p.micro_batch_size());
  // The spec's own arithmetic, on sizes that are not positive taken as 1 (as above).
  ParallelSpec positive = p;
  positive.set_micro_batch_size(static_cast<int>(s.micro_batch));
  positive.set_global_batch_size(static_cast<int>(Positive(p.global_batch_size())));
  s.vocab_local =
      PaddedVocabSize(static_cast<int>(Positive(m.vocab_size())), static_cast<int>(s.tensor)) /
      s.tensor;
  // The model's own terms, on sizes that are not positive taken as 1 (as above).
  JobSpec positive_spec;
  ModelSpec& pm = *positive_spec.mutable_model();
  pm = m;
  pm.set_num_layers(static_cast<int>(s.layers));
  pm.set_num_heads(static_cast<int>(s.heads));
  pm.set_hidden_size(static_cast<int>(s.hidden));
  pm.set_seq_length(static_cast<int>(s.seq));
  pm.set_vocab_size(static_cast<int>(Positive(m.vocab_size())));
  positive_spec.mutable_parallel()->set_tensor(static_cast<int>(s.tensor));
  const TransformerConfig config = TransformerConfigOf(positive_spec);
  s.ffn_local = config.ffn_hidden / s.tensor;
  s.qkv_local = (config.query_width() + 2 * config.kv_width()) / s.tensor;  // 64 bits
  s.query_local = config.query_width() / s.tensor;
  s.mlp_in_local = (config.gated_mlp ? 2 : 1) * s.ffn_local;
  s.norm_statistics = config.normalization == NormKind::kRmsNorm ? 1 : 2;
  s.parameters = ParameterCountsPerTensorRank(config, static_cast<int>(s.tensor));
  s.microbatches = Positive(MicrobatchesPerReplica(positive, static_cast<int>(s.data)));
  const RecomputeChoice recompute = RecomputeChoiceOf(spec.train());
  s.recompute = recompute.full;
  s.selective = recompute.selective;
  s.recompute_group = recompute.group;
  s.recompute_block = recompute.block >= 0 ? std::min<int64_t>(recompute.block, s.layers) : -1;
  s.sequence_parallel = p.sequence_parallel();
  s.dropout = spec.train().dropout() > 0;
  // The CPU engine's bf16 is its GEMMs' operands only: what it keeps stays fp32.
  s.half_precision = (spec.precision() == PRECISION_BF16 || spec.precision() == PRECISION_FP16) &&
                     spec.device() != DEVICE_CPU;
  s.zero1 = p.zero_stage() == 1;
  s.schedule = p.schedule();
  return s;
}

// A count the model library gives in floating point, saturated like every product here.
int64_t SaturatedCount(double count) {
  if (!(count < 9.0e18)) return kSaturatedBytes;
  return count > 0 ? static_cast<int64_t>(count) : 0;
}

// The stage with the head (the loss and the logits): the last, or stage 0 in ZB-V's V
// (plan/pipeline_placement.h).
int64_t HeadStage(const Shape& s) {
  return LossStage(static_cast<int>(s.pipeline), s.schedule == SCHEDULE_ZB_V);
}

int64_t StageParameters(const Shape& s, int64_t stage) {
  const bool first = stage == 0;
  const bool last = stage == HeadStage(s);
  // Exact: validated sizes keep every count far below 2^53 (job_spec_limits.h).
  int64_t count = Mul(SaturatedCount(s.parameters.per_layer), s.layers / s.pipeline);
  // The tied word embedding: once on a stage that embeds, predicts, or both.
  if (first || last) count = Add(count, SaturatedCount(s.parameters.first_and_last_stage));
  if (first) count = Add(count, SaturatedCount(s.parameters.first_stage));
  if (last) count = Add(count, SaturatedCount(s.parameters.last_stage));
  return count;
}

// Chunk-microbatches in flight at once on stage `stage` (forwards whose backward has not
// run yet, summed over the stage's v chunks), from the schedule's closed form.
int64_t ChunksInFlightAtOnce(const Shape& s, int64_t stage) {
  const int64_t p = s.pipeline;
  const int64_t m = s.microbatches;
  switch (s.schedule) {
    case SCHEDULE_GPIPE:
      return m;
    case SCHEDULE_INTERLEAVED_1F1B: {
      const int64_t v = s.virtual_stages;
      const int64_t all = Mul(m, v);
      const int64_t warmup_plus_one = Sum({Mul(2, p - stage - 1), Mul(v - 1, p), 1});
      return m == p ? all : std::min(warmup_plus_one, all);
    }
    case SCHEDULE_ZB_H1:
      // Every stage keeps up to p: p - s forwarded ahead and s weight halves owed
      // (plan/zero_bubble_schedule.h).
      return std::min(p, m);
    case SCHEDULE_ZB_V:
      // Up to 2p chunk sets (half a stage's layers each) whose W has not run.
      return std::min(Mul(2, p), Mul(2, m));
    default:  // SCHEDULE_1F1B
      return std::min(p - stage, m);
  }
}

// Largest schedule walked action by action (beyond it the closed form is used).
constexpr int64_t kMaxWalkedChunkMicrobatches = 1 << 16;

// Chunk-microbatch activation sets the stage holds at its peak, and how many of them are
// the last chunk's (whose head, on the last stage, keeps its logits with them). This
// project's engines keep each chunk's sets in a pool that never shrinks
// (rank_model_stages.h), so under interleaving they hold the sum of each chunk's own peak,
// which the schedule's action list gives (a little more than the closed form's
// simultaneous peak). Megatron-LM frees them: the simultaneous peak.
struct InFlight {
  int64_t chunks = 0;      // chunk-microbatches, all chunks
  int64_t last_chunk = 0;  // of the last chunk
  // Split backward: the most chunk-microbatches at once whose input half ran and whose
  // weight half has not, each keeping its linear layers' output gradients.
  int64_t owed = 0;
};

InFlight ChunksInFlight(const Shape& s, int64_t stage, const RankMemoryOptions& options) {
  InFlight closed_form;
  closed_form.chunks = ChunksInFlightAtOnce(s, stage);
  closed_form.last_chunk = s.schedule == SCHEDULE_GPIPE ? s.microbatches
                           : s.schedule == SCHEDULE_INTERLEAVED_1F1B ||
                                   s.schedule == SCHEDULE_ZB_H1 || s.schedule == SCHEDULE_ZB_V
                               ? std::min(s.microbatches, s.pipeline)
                               : 1;
  // ZB-H1's stage s owes up to s weight halves; ZB-V's stages up to all their sets.
  if (s.schedule == SCHEDULE_ZB_H1) closed_form.owed = std::min(stage, s.microbatches);
  if (s.schedule == SCHEDULE_ZB_V) closed_form.owed = closed_form.chunks;
  // Walked: the schedules whose peak the closed form only bounds (the split backward
  // keeps each set until its weight half).
  const bool walk = s.schedule == SCHEDULE_INTERLEAVED_1F1B || s.schedule == SCHEDULE_ZB_H1 ||
                    s.schedule == SCHEDULE_ZB_V;
  if (!walk || options.activations == ActivationModel::kMegatronLm ||
      Mul(s.microbatches, s.virtual_stages) > kMaxWalkedChunkMicrobatches) {
    return closed_form;
  }
  ScheduleConfig config;
  config.schedule = s.schedule;
  config.pipeline = static_cast<int>(s.pipeline);
  config.virtual_stages = static_cast<int>(s.virtual_stages);
  config.microbatches = static_cast<int>(s.microbatches);
  absl::StatusOr<PipelineSchedule> schedule =
      BuildPipelineSchedule(config, static_cast<int>(stage), std::vector<int>(s.pipeline, 0));
  if (!schedule.ok()) return closed_form;  // validation reports the spec
  std::vector<int64_t> now(s.virtual_stages, 0), peak(s.virtual_stages, 0);
  int64_t owed = 0, owed_peak = 0;
  for (const PipelineAction& action : schedule->actions()) {
    const int c = action.chunk();
    if (c < 0 || c >= s.virtual_stages) continue;
    if (action.kind() == PipelineAction::FORWARD) peak[c] = std::max(peak[c], ++now[c]);
    if (action.kind() == PipelineAction::BACKWARD_INPUT) owed_peak = std::max(owed_peak, ++owed);
    if (action.kind() == PipelineAction::BACKWARD ||
        action.kind() == PipelineAction::BACKWARD_WEIGHT) {
      --now[c];
    }
    if (action.kind() == PipelineAction::BACKWARD_WEIGHT) --owed;
  }
  InFlight walked;
  walked.owed = owed_peak;
  for (int64_t p : peak) walked.chunks += p;
  walked.last_chunk = peak.back();
  return walked;
}

// Elements one layer saves for its backward per microbatch besides its input
// (worker/engine/cpu/activations.h): ln1, h1, ln2 [N, C]; [q|k|v] [N, qkv / t]; attention
// output [N, Q / t]; the MLP's input projection [N, F / t] (GPT-2's fc; a gated MLP's
// [gate | up], 2 F / t) and its activation [N, F / t]; the attention's log-sum-exp; the
// two normalisations' statistics.
int64_t LayerSavedElements(const Shape& s) {
  const int64_t n = s.tokens();
  // Sequence parallelism keeps ln1, h1, ln2 and the statistics for this rank's rows only.
  const int64_t rows = s.sequence_parallel ? n / s.tensor : n;
  const int64_t attention = Mul(Mul(s.micro_batch, s.heads / s.tensor), s.seq);
  return Sum({Mul(3, Mul(rows, s.hidden)), Mul(Mul(2, s.norm_statistics), rows),
              Mul(n, Sum({s.qkv_local, s.query_local, s.mlp_in_local, s.ffn_local})), attention});
}

// The attention core's output and log-sum-exp: what selective recomputation does not keep.
int64_t AttentionCoreElements(const Shape& s) {
  return Add(Mul(s.tokens(), s.query_local), Mul(Mul(s.micro_batch, s.heads / s.tensor), s.seq));
}

// Bytes of one layer's saved activations (besides its input) for one microbatch.
int64_t LayerSavedBytes(const Shape& s, const RankMemoryOptions& options) {
  if (options.activations == ActivationModel::kMegatronLm) {
    MegatronActivationOptions megatron;
    megatron.element_bytes = s.half_precision ? kHalfBytes : kFp32Bytes;
    megatron.dropout = s.dropout;
    megatron.recompute = s.selective ? ActivationRecompute::kSelective : ActivationRecompute::kNone;
    megatron.sequence_parallel = s.sequence_parallel;
    const double bytes = MegatronLayerActivationBytes(
        {static_cast<double>(s.seq), static_cast<double>(s.micro_batch),
         static_cast<double>(s.hidden), static_cast<double>(s.heads),
         static_cast<double>(s.tensor)},
        megatron);
    // Less its input, which the caller counts with every layer's.
    const double input = static_cast<double>(s.tokens()) * s.hidden * megatron.element_bytes /
                         (s.sequence_parallel ? s.tensor : 1);
    const double saved = bytes - input;
    return saved >= 9e18 ? kSaturatedBytes : static_cast<int64_t>(saved);
  }
  int64_t elements = LayerSavedElements(s);
  if (s.selective) elements -= AttentionCoreElements(s);
  return Mul(kFp32Bytes, elements);
}

int64_t InputBytes(const Shape& s, const RankMemoryOptions& options) {
  const int64_t bytes = options.activations == ActivationModel::kMegatronLm && s.half_precision
                            ? kHalfBytes
                            : kFp32Bytes;
  // Sequence parallelism: each rank keeps its rows of the residual stream.
  const int64_t rows = s.sequence_parallel ? s.tokens() / s.tensor : s.tokens();
  return Mul(bytes, Mul(rows, s.hidden));
}

// Every layer in flight keeps its input (full recomputation in groups of g: the first of
// each group only) and, unless recomputed, its saved set (full block b: all but the
// chunk's first b layers).
int64_t ActivationBytes(const Shape& s, const InFlight& in_flight,
                        const RankMemoryOptions& options) {
  const int64_t per_chunk = s.layers / s.pipeline / s.virtual_stages;
  int64_t inputs = per_chunk, saved = s.recompute ? 0 : per_chunk;
  if (s.recompute && s.recompute_block >= 0) {
    saved = per_chunk - std::min(per_chunk, s.recompute_block);
  } else if (s.recompute) {
    inputs = (per_chunk + s.recompute_group - 1) / s.recompute_group;
  }
  const int64_t per_microbatch =
      Add(Mul(inputs, InputBytes(s, options)), Mul(saved, LayerSavedBytes(s, options)));
  return Mul(in_flight.chunks, per_microbatch);
}

// What a chunk-microbatch whose weight half is owed keeps besides its set (the CPU
// engine's DeferredWeightGradient): each linear layer's output gradient, [N, qkv / t],
// [N, C], [N, mlp_in / t], [N, C], and the inputs its set does not hold: a recomputed
// layer's ln1, attention output, ln2 and activation (selective: the attention output);
// under sequence parallelism the gathered inputs of the two column-parallel layers.
int64_t OwedWeightGradientBytes(const Shape& s, const RankMemoryOptions& options) {
  const int64_t n = s.tokens();
  const int64_t per_chunk = s.layers / s.pipeline / s.virtual_stages;
  int64_t per_layer = Mul(n, Sum({s.qkv_local, s.hidden, s.mlp_in_local, s.hidden}));
  if (s.recompute) {
    per_layer = Add(per_layer, Mul(n, Sum({s.hidden, s.query_local, s.hidden, s.ffn_local})));
  } else if (s.selective) {
    per_layer = Add(per_layer, Mul(n, s.query_local));
  }
  if (s.sequence_parallel && !s.recompute) per_layer = Add(per_layer, Mul(2, Mul(n, s.hidden)));
  const int64_t bytes = options.activations == ActivationModel::kMegatronLm && s.half_precision
                            ? kHalfBytes
                            : kFp32Bytes;
  return Mul(bytes, Mul(per_chunk, per_layer));
}

// The head on the last stage: LayerNorm output [N, C], its statistics and the logits
// [N, Vl] with the cross-entropy's three statistics, per microbatch in flight on it.
int64_t LogitsBytes(const Shape& s, int64_t stage, const InFlight& in_flight) {
  if (stage != HeadStage(s)) return 0;
  const int64_t held = in_flight.last_chunk;
  const int64_t n = s.tokens();
  const int64_t per_microbatch = Sum({Mul(n, s.vocab_local), Mul(n, s.hidden), Mul(5, n)});
  return Mul(kFp32Bytes, Mul(held, per_microbatch));
}

// What the engine allocates besides saved activations (worker/engine/
// rank_allocation_estimate.cc counts the same): per chunk-microbatch in flight its tokens,
// targets and positions, the chunk's output, and the pipeline's received input and output
// gradient (3 N + 3 N C); each chunk's backward scratch (2 N C + 2 N Fl + 4 N Cl, one
// recomputed layer's saved set under recompute), and on the last stage the logits'
// gradient and the head's residual gradients (N Vl + 3 N C + N); every microbatch's tokens and
// targets (2 N each), loaded at the start of a step. fp32 and int32: 4 bytes.
int64_t WorkspaceBytes(const Shape& s, int64_t stage, const InFlight& in_flight,
                       const RankMemoryOptions& options) {
  const int64_t n = s.tokens();
  if (options.activations == ActivationModel::kMegatronLm) {
    // Megatron-LM frees a stage's output once sent and keeps no separate pipeline
    // buffers: one recomputed layer's set and the head's fp32 logits gradient remain.
    int64_t bytes = s.recompute ? LayerSavedBytes(s, options) : 0;
    if (stage == HeadStage(s)) bytes = Add(bytes, Mul(kFp32Bytes, Mul(n, s.vocab_local)));
    return bytes;
  }
  const int64_t nc = Mul(n, s.hidden);
  const int64_t fl = s.ffn_local;
  const int64_t per_chunk = Sum({Mul(3, n), Mul(3, nc)});
  int64_t elements = Mul(in_flight.chunks, per_chunk);
  // Each of the v chunks has its own backward scratch: full recomputation adds a group's
  // saved sets, its inputs and output and the forward's two alternating inputs; selective
  // the attention core of the layer at hand.
  // d_ln, d_branch [N, C]; d_fc [N, mlp_in / t] and d_act [N, F / t]; d_qkv and d_attn_y.
  int64_t scratch =
      Sum({Mul(2, nc), Mul(n, Add(s.mlp_in_local, fl)), Mul(n, Add(s.qkv_local, s.query_local))});
  if (s.recompute) {
    const int64_t group = std::min(s.recompute_group,  // 1 under block

                                   s.layers / s.pipeline / s.virtual_stages);
    scratch = Sum({scratch, Mul(group, LayerSavedElements(s)), Mul(group + 3, nc)});
  }
  if (s.selective) scratch = Add(scratch, AttentionCoreElements(s));
  elements = Add(elements, Mul(s.virtual_stages, scratch));
  if (stage == HeadStage(s)) {
    elements = Sum({elements, Mul(n, s.vocab_local), Mul(3, nc), n});
  }
  elements = Add(elements, Mul(s.microbatches, Mul(2, n)));
  return Mul(kFp32Bytes, elements);
}

RankMemoryEstimate EstimateStage(const Shape& s, int64_t stage, const RankMemoryOptions& options) {
  RankMemoryEstimate e;
  e.pipeline_stage = static_cast<int>(stage);
  e.parameters = StageParameters(s, stage);
  e.weight_bytes = Mul(e.parameters, s.half_precision ? kFp32Bytes + kHalfBytes : kFp32Bytes);
  e.gradient_bytes = Mul(e.parameters, kFp32Bytes);
  const int64_t moments = Mul(e.parameters, kAdamMoments * kFp32Bytes);
  // ZeRO-1: each data-parallel rank keeps its shard (rounded up).
  e.optimizer_bytes = s.zero1 && moments != kSaturatedBytes
                          ? moments / s.data + (moments % s.data != 0 ? 1 : 0)
                          : moments;
  // The schedule is walked once a stage (interleaving: its whole action list).
  const InFlight in_flight = ChunksInFlight(s, stage, options);
  e.activation_bytes = Add(ActivationBytes(s, in_flight, options),
                           Mul(in_flight.owed, OwedWeightGradientBytes(s, options)));
  e.logits_bytes = LogitsBytes(s, stage, in_flight);
  e.workspace_bytes = WorkspaceBytes(s, stage, in_flight, options);
  e.total_bytes = Sum({e.weight_bytes, e.gradient_bytes, e.optimizer_bytes, e.activation_bytes,
                       e.logits_bytes, e.workspace_bytes});
  return e;
}

}  // namespace

RankMemoryEstimate EstimateRankMemory(const JobSpec& spec, const RankMemoryOptions& options) {
  const Shape shape = ShapeOf(spec);
  // The first stage holds the most activations (1F1B, interleaved) and the embedding; the
  // last holds the logits. Middle stages hold no more than the first.
  const RankMemoryEstimate first = EstimateStage(shape, 0, options);
  if (shape.pipeline == 1) return first;
  const RankMemoryEstimate last = EstimateStage(shape, shape.pipeline - 1, options);
  return last.total_bytes > first.total_bytes ? last : first;
}

RankMemoryEstimate EstimateStageMemory(const JobSpec& spec, int stage,
                                       const RankMemoryOptions& options) {
  const Shape shape = ShapeOf(spec);
  return EstimateStage(shape, std::clamp<int64_t>(stage, 0, shape.pipeline - 1), options);
}

std::string FormatMemoryBytes(int64_t bytes) {
  if (bytes == kSaturatedBytes) return "more than 8 EiB";
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024 && unit < 6) {
    value /= 1024;
    ++unit;
  }
  if (unit == 0) return absl::StrCat(bytes, " B");
  return absl::StrFormat("%.1f %s", value, kUnits[unit]);
}

std::string RankMemoryEstimate::ToString() const {
  return absl::StrCat(
      FormatMemoryBytes(total_bytes), " (pipeline stage ", pipeline_stage, ", ", parameters,
      " parameters: weights ", FormatMemoryBytes(weight_bytes), ", gradients ",
      FormatMemoryBytes(gradient_bytes), ", optimizer ", FormatMemoryBytes(optimizer_bytes),
      ", activations ", FormatMemoryBytes(activation_bytes), ", logits ",
      FormatMemoryBytes(logits_bytes), ", workspace ", FormatMemoryBytes(workspace_bytes), ")");
}

}  // namespace mtrain
