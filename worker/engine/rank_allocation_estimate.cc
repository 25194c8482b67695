#include "worker/engine/rank_allocation_estimate.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "model/parameter_table.h"
#include "model/transformer_config.h"
#include "spec/job_spec_arithmetic.h"
#include "worker/engine/memory_limits.h"
#include "worker/engine/recompute_options.h"

namespace mtrain {
namespace {

constexpr double kFloat = 4;  // bytes of a float and of an int32 token
constexpr double kInt32Max = std::numeric_limits<int32_t>::max();

// The most microbatches the schedule keeps in flight on each chunk (forwards whose
// backward has not run yet): their activations are alive together.
std::vector<double> InFlightPerChunk(const PipelineSchedule& schedule, const ParallelSpec& par,
                                     int chunks, double microbatches) {
  std::vector<double> peak(chunks, 0), now(chunks, 0);
  for (const PipelineAction& action : schedule.actions()) {
    const int c = action.chunk();
    if (c < 0 || c >= chunks) continue;  // the executor refuses it later
    if (action.kind() == PipelineAction::FORWARD) peak[c] = std::max(peak[c], ++now[c]);
    // A split backward frees the set at its weight half (RankModelStages keeps it between).
    if (action.kind() == PipelineAction::BACKWARD ||
        action.kind() == PipelineAction::BACKWARD_WEIGHT) {
      --now[c];
    }
  }
  // A schedule given without its actions: the schedule's own bound. GPipe runs every
  // forward first; 1F1B keeps at most `pipeline` microbatches in flight, interleaving
  // about twice that per chunk.
  const double bound = par.schedule() == SCHEDULE_GPIPE ? microbatches
                       : par.schedule() == SCHEDULE_INTERLEAVED_1F1B
                           ? std::min(microbatches, 2.0 * par.pipeline())
                           : std::min(microbatches, 1.0 * par.pipeline());
  for (double& p : peak) {
    if (p == 0) p = std::max(1.0, bound);
  }
  return peak;
}

// The most chunk-microbatches at once whose input half ran and whose weight half has not
// (split backward: 0 for the other schedules).
double OwedWeightHalves(const PipelineSchedule& schedule) {
  double owed = 0, peak = 0;
  for (const PipelineAction& action : schedule.actions()) {
    if (action.kind() == PipelineAction::BACKWARD_INPUT) peak = std::max(peak, ++owed);
    if (action.kind() == PipelineAction::BACKWARD_WEIGHT) --owed;
  }
  return peak;
}

}  // namespace

std::string RankAllocationEstimate::Describe() const {
  return absl::StrCat("parameters ", HumanBytes(parameters), ", gradients ", HumanBytes(gradients),
                      ", AdamW moments ", HumanBytes(optimizer), ", checkpoint staging ",
                      HumanBytes(staging), ", activations ", HumanBytes(activations));
}

absl::StatusOr<RankAllocationEstimate> EstimateRankAllocation(const Assignment& assignment,
                                                              bool host_activations) {
  const JobSpec& spec = assignment.spec();
  const ModelSpec& model = spec.model();
  const ParallelSpec& par = spec.parallel();
  const std::pair<const char*, int64_t> positive[] = {
      {"model.num_layers", model.num_layers()},
      {"model.num_heads", model.num_heads()},
      {"model.hidden_size", model.hidden_size()},
      {"model.seq_length", model.seq_length()},
      {"model.vocab_size", model.vocab_size()},
      {"parallel.tensor", par.tensor()},
      {"parallel.pipeline", par.pipeline()},
      {"parallel.data", par.data()},
      {"parallel.micro_batch_size", par.micro_batch_size()},
      {"parallel.global_batch_size", par.global_batch_size()}};
  for (const auto& [field, value] : positive) {
    if (value <= 0) {
      return absl::InvalidArgumentError(absl::StrCat(field, " is ", value, "; it must be > 0"));
    }
  }
  if (assignment.layers().empty()) {
    return absl::InvalidArgumentError("the assignment gives this rank no layers");
  }
  const double t = par.tensor(), d = par.data();
  const double B = par.micro_batch_size(), S = model.seq_length(), C = model.hidden_size();
  const double H = model.num_heads();
  const double n = B * S;  // tokens per microbatch
  // The vocabulary padded as the engine pads it (every size is positive by now).
  const double Vp = static_cast<double>(PaddedVocabSize(model.vocab_size(), par.tensor()));
  if (n > kInt32Max) {
    return absl::InvalidArgumentError(absl::StrCat(
        "parallel.micro_batch_size ", par.micro_batch_size(), " * model.seq_length ",
        model.seq_length(), " = ", static_cast<int64_t>(n),
        " tokens per microbatch exceeds 2147483647 [rule: the engine's kernels index rows with "
        "int32]"));
  }
  const TransformerConfig config = TransformerConfigOf(spec);
  const double F = config.ffn_hidden;  // the MLP width (model/), an int32 field
  // The widest row the kernels index: the fused query, key and value projections.
  const double qkv = static_cast<double>(config.query_width()) + 2.0 * config.kv_width();
  if (qkv > kInt32Max) {
    return absl::InvalidArgumentError(
        absl::StrCat("model.hidden_size ", model.hidden_size(),
                     ": the fused query/key/value width ", static_cast<int64_t>(qkv),
                     " exceeds 2147483647 [rule: the engine's kernels index columns with int32]"));
  }
  if (Vp > kInt32Max) {
    return absl::InvalidArgumentError(
        absl::StrCat("model.vocab_size ", model.vocab_size(),
                     " padded to a multiple of 128 * parallel.tensor (", static_cast<int64_t>(Vp),
                     ") exceeds 2147483647 [rule: the engine's kernels index the "
                     "vocabulary with int32]"));
  }
  const double Fl = F / t, Hl = H / t, Vl = Vp / t;
  const double microbatches = NumMicrobatches(par);

  // Parameters, as ParameterLayout lays them out for each chunk (model/'s table).
  const RankParameterCounts counts = ParameterCountsPerTensorRank(config, par.tensor());
  const double per_layer = counts.per_layer;
  const int chunks = assignment.layers_size();
  const int total_layers = spec.model().num_layers();
  // The chunks that hold the embedding and the head (rank_layout.h: by their layers; ZB-V's
  // stage 0 holds both, and the tied embedding once).
  const auto is_embedding = [&](int c) { return assignment.layers(c).first_layer() == 0; };
  const auto is_head = [&](int c) {
    return assignment.layers(c).first_layer() + assignment.layers(c).num_layers() == total_layers;
  };
  double params = 0;
  bool tied_counted = false;
  std::vector<double> chunk_layers;
  for (int c = 0; c < chunks; ++c) {
    const double layers = assignment.layers(c).num_layers();
    chunk_layers.push_back(layers);
    const bool embedding = is_embedding(c);
    const bool head = is_head(c);
    params += layers * per_layer;
    if ((embedding || head) && !tied_counted) {
      params += counts.first_and_last_stage;
      tied_counted = true;
    }
    if (embedding) params += counts.first_stage;
    if (head) params += counts.last_stage;
  }
  const bool zero = par.zero_stage() == 1 && par.data() > 1;
  const double buffer = zero ? std::ceil(params / d) * d : params;

  RankAllocationEstimate estimate;
  estimate.parameters = buffer * kFloat;
  estimate.gradients = buffer * kFloat;
  estimate.optimizer = 2 * (zero ? buffer / d : params) * kFloat;
  // A checkpoint save gathers both moments over the whole buffer (and a load reads them
  // into such copies); ZeRO-1 also gathers the parameters each step.
  estimate.staging = 2 * buffer * kFloat + (zero ? buffer * kFloat : 0);

  if (host_activations) {
    ModelOptions recompute;  // the granularity the model will run with
    ApplyRecompute(spec.train(), &recompute);
    const double attention = B * Hl * S;  // one layer's attention log-sum-exp
    // The attention's widths and the MLP input projection's on this rank (model/): GPT-2's
    // [q|k|v] is 3 Cl and its fc Fl; Llama's [q|k|v] has fewer key-value heads and its
    // [gate|up] is 2 Fl.
    const double Ql = static_cast<double>(config.query_width()) / t;
    const double qkv_l = qkv / t;
    const double mlp_in_l = (config.gated_mlp ? 2 : 1) * Fl;
    const double statistics = config.normalization == NormKind::kRmsNorm ? 1 : 2;
    const double core = n * Ql + attention;  // selective recomputation's: attn_y and lse
    // Sequence parallelism: the residual stream, h1 and the LayerNorm statistics hold this
    // rank's rows only (r of them).
    const bool sequence_parallel = par.sequence_parallel() && t > 1;
    const double r = sequence_parallel ? n / t : n;
    // LayerActivations: ln1, h1, ln2 [r, C]; qkv [n, qkv_l]; attn_y [n, Ql]; fc [n, mlp_in_l]
    // and the activation [n, Fl]; the attention's log-sum-exp; the normalisations'
    // statistics [r] each (RMSNorm: no mean).
    const double saved_layer =
        3 * r * C + n * qkv_l + n * Ql + n * (mlp_in_l + Fl) + attention + 2 * statistics * r;
    const std::vector<double> in_flight =
        InFlightPerChunk(assignment.schedule(), par, chunks, microbatches);
    double activations = 0;
    for (int c = 0; c < chunks; ++c) {
      const bool head = is_head(c);
      // TransformerModel::NewActivations: the kept inputs (full recomputation in groups: the first
      // of each) and the chunk's output, and the saved sets of the layers not recomputed.
      const double layers = chunk_layers[c];
      double inputs = layers, saved = layers;
      const double group = recompute.recompute_group;  // 1 under block
      if (recompute.recompute && recompute.recompute_block >= 0) {
        saved = layers - std::min<double>(layers, recompute.recompute_block);
      } else if (recompute.recompute) {
        inputs = std::ceil(layers / group);
        saved = 0;
      }
      double per_microbatch = 3 * n + (inputs + 1) * r * C;
      per_microbatch += saved * (recompute.selective_recompute ? saved_layer - core : saved_layer);
      if (head) per_microbatch += n * C + n * Vl + 5 * n;
      // The pipeline's received input and output gradient of each microbatch in flight.
      per_microbatch += 2 * r * C;
      // Backward scratch of the chunk (TransformerModel::AllocateScratch), the recomputed layers,
      // and the head's temporaries (d_logits, the residual gradients). The attention core's
      // own workspace (three 64 x S blocks per thread, [S, D] per head) is below this precision.
      double scratch = 2 * n * C + n * (mlp_in_l + Fl) + n * (qkv_l + Ql);
      if (recompute.recompute) {
        // A group's sets, its inputs and output, the forward's two alternating inputs.
        const double sets = std::min(group, layers);
        scratch += sets * saved_layer + (sets + 3) * r * C;
      }
      if (recompute.selective_recompute) scratch += core;
      if (sequence_parallel) scratch += r * C + n * C;  // a block of rows, a whole
      if (head) scratch += n * Vl + 3 * n * C + n;
      activations += in_flight[c] * per_microbatch + scratch;
    }
    // The split backward's owed weight halves (DeferredWeightGradient): each linear layer's
    // output gradient, and the inputs the set does not hold (a recomputed layer's; the
    // gathered ones under sequence parallelism), per layer of a chunk.
    double owed_layer = n * (qkv_l + C + mlp_in_l + C);
    if (recompute.recompute) {
      owed_layer += n * (C + Ql + C + Fl);
    } else if (recompute.selective_recompute) {
      owed_layer += n * Ql;
    }
    if (sequence_parallel && !recompute.recompute) owed_layer += 2 * n * C;
    const double chunk_layers_max =
        chunks > 0 ? *std::max_element(chunk_layers.begin(), chunk_layers.end()) : 0;
    activations += OwedWeightHalves(assignment.schedule()) * chunk_layers_max * owed_layer;
    // Every microbatch's tokens and targets are loaded at the start of a step.
    activations += microbatches * 2 * n;
    estimate.activations = activations * kFloat;
  }
  return estimate;
}

}  // namespace mtrain
