#include "plan/step_cost_model.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <tuple>

#include "absl/base/const_init.h"
#include "absl/synchronization/mutex.h"
#include "model/model_flops.h"
#include "model/transformer_config.h"
#include "plan/schedule_checker.h"
#include "spec/job_spec_arithmetic.h"

namespace mtrain {
namespace {

// The spec's sizes as doubles (FLOP and byte counts overflow int64 at trillion-parameter
// scale only in products, which are all taken in double here).
struct Sizes {
  double layers, hidden, heads, seq, vocab;
  double qkv = 0, ffn = 0;  // the fused query/key/value projections' width; the MLP's
  bool gated_mlp = false;   // three FFN matrices (SwiGLU)
  double t, p, d, v, micro_batch, global_batch;
  // Share of the layers whose forward runs again before the backward (full
  // recomputation: all of them, or the block method's first layers of each chunk), and
  // whether only the attention core does (selective).
  double recomputed = 0;
  bool selective = false;
  // Sequence parallelism: LayerNorms, dropouts and residuals on n/t rows each.
  bool sequence_parallel = false;
  double tokens() const { return micro_batch * seq; }  // n, per microbatch
  double microbatches() const { return std::max(1.0, global_batch / (micro_batch * d)); }
};

double AtLeastOne(int value) { return std::max(1, value); }

Sizes SizesOf(const JobSpec& spec) {
  const ModelSpec& m = spec.model();
  const ParallelSpec& par = spec.parallel();
  Sizes s;
  s.layers = AtLeastOne(m.num_layers());
  s.hidden = AtLeastOne(m.hidden_size());
  s.heads = AtLeastOne(m.num_heads());
  s.seq = AtLeastOne(m.seq_length());
  s.vocab = AtLeastOne(m.vocab_size());
  // The layer's matrices from the model's own sizes (model/), on sizes taken as above.
  JobSpec positive;
  ModelSpec& pm = *positive.mutable_model();
  pm = m;
  pm.set_num_heads(static_cast<int>(s.heads));
  pm.set_hidden_size(static_cast<int>(s.hidden));
  const TransformerConfig config = TransformerConfigOf(positive);
  s.qkv = config.query_width() + 2 * config.kv_width();
  s.ffn = config.ffn_hidden;
  s.gated_mlp = config.gated_mlp;
  s.t = AtLeastOne(par.tensor());
  s.p = AtLeastOne(par.pipeline());
  s.d = AtLeastOne(par.data());
  s.v = AtLeastOne(par.virtual_stages());
  s.micro_batch = AtLeastOne(par.micro_batch_size());
  s.global_batch = std::max<double>(AtLeastOne(par.global_batch_size()), s.micro_batch * s.d);
  s.sequence_parallel = par.sequence_parallel() && s.t > 1;
  const RecomputeChoice recompute = RecomputeChoiceOf(spec.train());
  s.selective = recompute.selective;
  if (recompute.full) {
    const double per_chunk = std::max(1.0, s.layers / (s.p * s.v));
    s.recomputed = recompute.block >= 0 ? std::min(1.0, recompute.block / per_chunk) : 1;
  }
  return s;
}

// 16-bit activations, messages and GEMMs. The CPU engine's bf16 rounds its GEMMs' operands
// only: what it keeps and sends stays fp32, at its fp32 GEMM rate or below.
bool HalfPrecision(const JobSpec& spec) {
  return (spec.precision() == PRECISION_BF16 || spec.precision() == PRECISION_FP16) &&
         spec.device() != DEVICE_CPU;
}

// Prices work on one device of the cluster.
class DeviceClock {
 public:
  DeviceClock(const DeviceProfile& device, double peak)
      : device_(device),
        rate_(peak * (device.matmul_efficiency() > 0 ? device.matmul_efficiency() : 1.0)),
        bandwidth_(device.memory_bandwidth_bytes_per_second()) {}

  // x / (x + half): the share of the large-matrix rate a dimension x allows.
  double SizeFactor(double x) const {
    const double half = device_.matmul_half_size();
    return half > 0 ? x / (x + half) : 1.0;
  }
  // [m, k] x [k, n].
  double Gemm(double m, double n, double k) const {
    return 2 * m * n * k / (rate_ * SizeFactor(m) * SizeFactor(n) * SizeFactor(k));
  }
  // `count` independent GEMMs of the same shape (the attention's per-head products).
  double BatchedGemm(double count, double m, double n, double k) const {
    return count * Gemm(m, n, k);
  }
  double Bytes(double bytes) const { return bandwidth_ > 0 ? bytes / bandwidth_ : 0.0; }

 private:
  const DeviceProfile& device_;
  double rate_;
  double bandwidth_;
};

// Ring all-reduce of `bytes` among `ranks` on `link`.
double AllReduceSeconds(double bytes, double ranks, const LinkProfile& link) {
  if (ranks <= 1) return 0;
  const double bandwidth = link.bandwidth_bytes_per_second();
  const double transfer = bandwidth > 0 ? 2 * (ranks - 1) / ranks * bytes / bandwidth : 0.0;
  return transfer + 2 * (ranks - 1) * link.latency_seconds();
}

double MessageSeconds(double bytes, const LinkProfile& link) {
  const double bandwidth = link.bandwidth_bytes_per_second();
  return (bandwidth > 0 ? bytes / bandwidth : 0.0) + link.latency_seconds();
}

// All-gather of `bytes` (the whole result) among `ranks` on `link`: each rank receives the
// (ranks - 1)/ranks it lacks.
double AllGatherSeconds(double bytes, double ranks, const LinkProfile& link) {
  if (ranks <= 1) return 0;
  const double bandwidth = link.bandwidth_bytes_per_second();
  const double transfer = bandwidth > 0 ? (ranks - 1) / ranks * bytes / bandwidth : 0.0;
  return transfer + (ranks - 1) * link.latency_seconds();
}

// The link a group of `size` ranks, `stride` apart in the rank order, communicates over.
// Consecutive ranks fill a node first (rank_grid.h): a group whose span fits a node and
// divides it stays inside one (a span of 6 on 8-device nodes starts at rank 6 once and
// straddles two). A group spanning nodes with k members on each drives k of a node's
// adapters at once (NCCL's rings are spread over them), so its inter-node bandwidth is
// min(k, adapters) times one adapter's. A job of at most one node's devices never leaves it.
LinkProfile GroupLink(double size, double stride, double job_devices,
                      const ClusterDescription& cluster) {
  const double per_node = std::max(1, cluster.devices_per_node());
  const double span = size * stride;
  if (job_devices <= per_node || (span <= per_node && std::fmod(per_node, span) == 0)) {
    return cluster.intra_node();
  }
  LinkProfile link = cluster.inter_node();
  const double members_per_node = std::clamp(std::floor(per_node / stride), 1.0, size);
  const double adapters = std::max(1, cluster.inter_node_adapters());
  link.set_bandwidth_bytes_per_second(link.bandwidth_bytes_per_second() *
                                      std::min(members_per_node, adapters));
  return link;
}

// Forward and backward of one transformer layer for one microbatch on one tensor rank,
// split into the StepCost terms (seconds).
struct LayerTimes {
  double matmul = 0, attention = 0, elementwise = 0, tensor_comm = 0;
  double total() const { return matmul + attention + elementwise + tensor_comm; }
};

LayerTimes LayerForwardBackward(const Sizes& s, double e, const DeviceClock& clock,
                                const LinkProfile& tensor_link, const StepCostOptions& options) {
  const double n = s.tokens();
  const double h = s.hidden;
  const double local_heads = s.heads / s.t;
  const double head_dim = h / s.heads;
  // Forward passes: one, plus the recomputation before the backward (of the share of
  // layers recomputed; selective recomputation reruns the attention core only).
  const double forwards = 1 + s.recomputed;
  const double attention_forwards = s.selective ? 2 : forwards;

  LayerTimes times;
  // A gated MLP (SwiGLU) has a second input projection of the same shape.
  const double mlp_inputs = s.gated_mlp ? 2 : 1;
  const double linear_forward = clock.Gemm(n, s.qkv / s.t, h) + clock.Gemm(n, h, h / s.t) +
                                mlp_inputs * clock.Gemm(n, s.ffn / s.t, h) +
                                clock.Gemm(n, h, s.ffn / s.t);
  times.matmul = (forwards + 2) * linear_forward;

  const double sequences = s.micro_batch * local_heads;  // independent S x S problems
  const double scores = sequences * s.seq * s.seq;       // elements of all score matrices
  if (options.attention == AttentionKernel::kFused) {
    // Causal half of Q K^T and P V forward; the backward recomputes the scores and makes
    // four products (dV, dP, dQ, dK).
    const double product = clock.BatchedGemm(sequences, s.seq, s.seq, head_dim) / 2;
    times.attention = attention_forwards * 2 * product + 5 * product;
  } else {
    // Every S^2 product, each no faster than its S^2 operand moves through memory.
    const double product =
        std::max(clock.BatchedGemm(sequences, s.seq, s.seq, head_dim), clock.Bytes(scores * e));
    const double mask = options.dropout ? 1 : 0;
    const double softmax_forward =
        clock.Bytes(scores * (2 * e + (options.dropout ? 2 * e : 0) + mask));
    const double softmax_backward =
        clock.Bytes(scores * (3 * e + (options.dropout ? 2 * e : 0) + mask));
    times.attention =
        attention_forwards * (2 * product + softmax_forward) + 4 * product + softmax_backward;
  }

  // Two LayerNorms (read, write), two bias + dropout + residual passes (read two, write
  // one, the mask), over the rank's rows (n, or n/t under sequence parallelism), and
  // bias + GeLU over the local F/t columns (read, write).
  const double mask = options.dropout ? 1 : 0;
  const double rows = s.sequence_parallel ? n / s.t : n;
  const double elementwise_forward =
      clock.Bytes(rows * h * (2 * 2 * e) + 2 * rows * h * (3 * e + mask) + n * s.ffn / s.t * 2 * e);
  times.elementwise = (forwards + 2) * elementwise_forward;

  // Under sequence parallelism each all-reduce becomes an all-gather before the layer's
  // first GEMM and a reduce-scatter after its last (the same bytes), and the backward
  // gathers both LayerNorm outputs again (they are kept for the rank's rows only).
  const double all_reduce = AllReduceSeconds(n * h * e, s.t, tensor_link);
  times.tensor_comm = (forwards + 1) * 2 * all_reduce;
  if (s.sequence_parallel) times.tensor_comm += 2 * AllGatherSeconds(n * h * e, s.t, tensor_link);
  return times;
}

}  // namespace

double ZeroBubbleFraction(Schedule schedule, int p, int m, const ComputeCosts& costs) {
  if (p <= 1) return 0;
  ScheduleConfig config;
  config.schedule = schedule;
  config.pipeline = p;
  config.virtual_stages = schedule == SCHEDULE_ZB_V ? 2 : 1;
  config.microbatches = m;
  // The simulation walks every action of every stage; beyond this many the paper's closed
  // forms stand in: ZB-H1 idles (p - 1)(F + B - W) a stage; ZB-V about none.
  constexpr int64_t kMaxSimulatedActions = 1 << 20;
  if (int64_t{p} * m * config.virtual_stages * 6 > kMaxSimulatedActions) {
    const double busy = m * (costs.forward + costs.backward_input + costs.backward_weight);
    if (schedule == SCHEDULE_ZB_V) return 0;
    return (p - 1) * std::max(0.0, costs.forward + costs.backward_input - costs.backward_weight) /
           busy;
  }
  // Layout searches price the same (schedule, p, m) again and again.
  static absl::Mutex mutex(absl::kConstInit);
  static auto* cache = new std::map<std::tuple<int, int, int, double, double>, double>();
  const auto key = std::make_tuple(static_cast<int>(schedule), p, m, costs.backward_input,
                                   costs.backward_weight);
  {
    absl::MutexLock lock(&mutex);
    if (auto it = cache->find(key); it != cache->end()) return it->second;
  }
  absl::StatusOr<double> fraction = SimulatedBubbleFraction(config, costs);
  // A (p, m) the builder refuses has no schedule to run: price it like 1F1B.
  const double result = fraction.ok() ? *fraction : (p - 1.0) / m;
  absl::MutexLock lock(&mutex);
  cache->emplace(key, result);
  return result;
}

StepCostOptions ProjectEngineOptions(const JobSpec& spec) {
  StepCostOptions options;
  options.attention = AttentionKernel::kFused;
  options.gradient_bytes = 4;
  options.data_parallel_overlap = 0.5;
  options.dropout = spec.train().dropout() > 0;
  // The engine's pipeline messages: sliced by default under tensor parallelism.
  const ParallelSpec& par = spec.parallel();
  options.scatter_gather = par.has_scatter_gather() ? par.scatter_gather() : par.tensor() > 1;
  return options;
}

double ModelFlopsPerStep(const JobSpec& spec) {
  return ModelFlopsPerStep(TransformerConfigOf(spec), SizesOf(spec).global_batch);
}

double HardwareFlopsPerStep(const JobSpec& spec) {
  const Sizes s = SizesOf(spec);
  const TransformerConfig config = TransformerConfigOf(spec);
  return ModelFlopsPerStep(config, s.global_batch) +
         RecomputeFlopsPerStep(config, s.global_batch, s.recomputed, s.selective);
}

double PeakFlops(const JobSpec& spec, const DeviceProfile& device) {
  if (HalfPrecision(spec) && device.half_flops() > 0) return device.half_flops();
  return device.fp32_flops();
}

StepCost PredictStepCost(const JobSpec& spec, const ClusterDescription& cluster,
                         const StepCostOptions& options) {
  const Sizes s = SizesOf(spec);
  const DeviceProfile& device = cluster.device();
  const double peak = PeakFlops(spec, device);
  const DeviceClock clock(device, peak);
  const double e = HalfPrecision(spec) ? 2 : 4;
  const double n = s.tokens();
  const double h = s.hidden;
  // The engines pad the vocabulary to a multiple of 128 t (parameter_layout.cc).
  const double padded_vocab = std::ceil(s.vocab / (128 * s.t)) * 128 * s.t;
  const double local_vocab = padded_vocab / s.t;

  const double job_devices = s.t * s.d * s.p;
  const LinkProfile tensor_link = GroupLink(s.t, 1, job_devices, cluster);
  const LinkProfile data_link = GroupLink(s.d, s.t, job_devices, cluster);
  // Between neighbouring stages: one rank to one rank t d ranks on (with scatter/gather
  // the t ranks of a tensor group each send their slice over their own adapter).
  const LinkProfile pipeline_link = GroupLink(2, s.t * s.d, job_devices, cluster);

  // One microbatch through the last stage (its layers and the head), which is the
  // slowest: the first stage's embedding lookup is a gather of n h elements.
  const LayerTimes layer = LayerForwardBackward(s, e, clock, tensor_link, options);
  const double stage_layers = s.layers / s.p;
  const double head_matmul = 3 * clock.Gemm(n, local_vocab, h);
  // Logits written, read by the cross-entropy, their gradient written and read.
  const double head_elementwise = clock.Bytes(4 * n * local_vocab * 4 + 2 * n * h * 2 * e);
  // With the vocabulary split over the tensor group: the cross-entropy's three all-reduces
  // of one value a token (maximum, sum of exponentials, target logit) and the input
  // gradient of the tied output layer; on a single stage also the embedding's all-reduce.
  const double head_tensor_comm =
      s.t > 1 ? 3 * AllReduceSeconds(n * 4, s.t, tensor_link) +
                    (s.p > 1 ? 1 : 2) * AllReduceSeconds(n * h * e, s.t, tensor_link)
              : 0.0;
  // With scatter/gather each tensor rank sends its 1/t slice and the receivers all-gather
  // the slices over the tensor group's link.
  // Sequence parallelism's messages are the rank's rows, as scatter/gather's slices, but
  // nothing is gathered on arrival.
  const double chunk_message =
      s.p == 1 ? 0.0
      : s.sequence_parallel
          ? MessageSeconds(n * h * e / s.t, pipeline_link)
          : MessageSeconds(n * h * e / (options.scatter_gather ? s.t : 1), pipeline_link) +
                (options.scatter_gather ? AllGatherSeconds(n * h * e, s.t, tensor_link) : 0.0);
  // Each microbatch enters and leaves each of a rank's v chunks: one activation forward and
  // one gradient back per chunk boundary.
  const double pipeline_per_microbatch = 2 * s.v * chunk_message;
  // Parameters of one rank of the last stage: its layers and its copy of the tied
  // embedding (the first stage holds the positions instead; the same within s h).
  const double layer_parameters = 12 * h * h / s.t + 7 * h / s.t + 6 * h;
  const double rank_parameters = stage_layers * layer_parameters + local_vocab * h + 2 * h;
  // A separate pass adding each microbatch's gradients into the reduction buffer.
  const double accumulation = clock.Bytes(rank_parameters * options.gradient_accumulation_bytes);
  const double per_microbatch = stage_layers * layer.total() + head_matmul + head_elementwise +
                                accumulation + head_tensor_comm + pipeline_per_microbatch;

  StepCost cost;
  const double m = s.microbatches();
  cost.microbatches = static_cast<int>(m);
  cost.devices = static_cast<int>(s.t * s.p * s.d);
  cost.matmul_seconds = m * (stage_layers * layer.matmul + head_matmul);
  cost.attention_seconds = m * stage_layers * layer.attention;
  cost.elementwise_seconds =
      m * (stage_layers * layer.elementwise + head_elementwise + accumulation);
  cost.tensor_comm_seconds = m * (stage_layers * layer.tensor_comm + head_tensor_comm);
  cost.pipeline_comm_seconds = m * pipeline_per_microbatch;
  const Schedule schedule = spec.parallel().schedule();
  const bool interleaved = schedule == SCHEDULE_INTERLEAVED_1F1B;
  const int sharing = std::max(1, options.ranks_per_device);
  if (schedule == SCHEDULE_ZB_H1 || schedule == SCHEDULE_ZB_V) {
    // The split backward costs its halves' shares of the combined one (two thirds of a
    // microbatch's compute, the forward one third); the overhead is extra passes.
    const double compute = per_microbatch - pipeline_per_microbatch;
    const double split =
        (1 + 2 * (options.backward_input_share + options.backward_weight_share)) / 3;
    const double overhead = compute * (split - 1);
    cost.elementwise_seconds += m * overhead;
    ComputeCosts costs;
    costs.forward = 1;
    costs.backward = 2;
    costs.backward_input = 2 * options.backward_input_share;
    costs.backward_weight = 2 * options.backward_weight_share;
    const double fraction =
        ZeroBubbleFraction(schedule, static_cast<int>(s.p), static_cast<int>(m), costs);
    cost.bubble_seconds = fraction * m * (per_microbatch + overhead) / sharing;
    cost.bubble_fraction = cost.bubble_seconds / (m * (per_microbatch + overhead));
  } else {
    cost.bubble_seconds = (s.p - 1) * per_microbatch / (interleaved ? s.v : 1.0) / sharing;
    cost.bubble_fraction = cost.bubble_seconds / (m * per_microbatch);
  }

  const double gradient_reduction =
      AllReduceSeconds(rank_parameters * options.gradient_bytes, s.d, data_link);
  // The tied embedding's gradient is summed between the first and last stage.
  const double embedding_reduction =
      s.p > 1 ? AllReduceSeconds(local_vocab * h * options.gradient_bytes, 2, pipeline_link) : 0.0;
  cost.data_comm_seconds =
      (1 - std::clamp(options.data_parallel_overlap, 0.0, 1.0)) * gradient_reduction +
      embedding_reduction;
  // AdamW reads parameter, gradient and both moments and writes three of them (fp32), plus
  // the gradient norm's read; under ZeRO-1 each rank updates 1/d of them.
  const double updated =
      spec.parallel().zero_stage() == 1 ? rank_parameters / s.d : rank_parameters;
  cost.optimizer_seconds = clock.Bytes(updated * (7 * 4 + (e < 4 ? 2 : 0)) + rank_parameters * 4);

  cost.step_seconds = cost.matmul_seconds + cost.attention_seconds + cost.elementwise_seconds +
                      cost.tensor_comm_seconds + cost.pipeline_comm_seconds + cost.bubble_seconds +
                      cost.data_comm_seconds + cost.optimizer_seconds;

  cost.model_flops = ModelFlopsPerStep(spec);
  cost.hardware_flops = HardwareFlopsPerStep(spec);
  if (cost.step_seconds > 0) {
    cost.tokens_per_second = s.global_batch * s.seq / cost.step_seconds;
    cost.model_flops_per_device = cost.model_flops / cost.step_seconds / cost.devices;
    cost.hardware_flops_per_device = cost.hardware_flops / cost.step_seconds / cost.devices;
    cost.mfu = peak > 0 ? cost.model_flops_per_device / peak : 0;
  }
  return cost;
}

}  // namespace mtrain
