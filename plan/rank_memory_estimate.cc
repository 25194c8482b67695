#include "plan/rank_memory_estimate.h"

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
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
  bool recompute, half_precision, zero1;
  Schedule schedule;
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
  s.microbatches = Positive(MicrobatchesPerReplica(positive, static_cast<int>(s.data)));
  s.recompute = spec.train().recompute();
  s.half_precision = spec.precision() == PRECISION_BF16 || spec.precision() == PRECISION_FP16;
  s.zero1 = p.zero_stage() == 1;
  s.schedule = p.schedule();
  return s;
}

// Parameters of one transformer layer on one tensor-parallel rank: 12 C Cl + 7 Cl + 6 C
// (qkv 3 C Cl + 3 Cl, attention projection Cl C + C, MLP 4 C Cl + 4 Cl and 4 Cl C + C,
// two LayerNorms 4 C).
int64_t LayerParameters(const Shape& s) {
  const int64_t c = s.hidden;
  const int64_t cl = s.local_hidden();
  return Sum({Mul(12, Mul(c, cl)), Mul(7, cl), Mul(6, c)});
}

int64_t StageParameters(const Shape& s, int64_t stage) {
  const bool first = stage == 0;
  const bool last = stage == s.pipeline - 1;
  int64_t count = Mul(LayerParameters(s), s.layers / s.pipeline);
  // The tied word embedding: once on a stage that embeds, predicts, or both.
  if (first || last) count = Add(count, Mul(s.vocab_local, s.hidden));
  if (first) count = Add(count, Mul(s.seq, s.hidden));
  if (last) count = Add(count, Mul(2, s.hidden));
  return count;
}

// Layer-microbatches whose activations stage `stage` holds at its peak.
int64_t LayersInFlight(const Shape& s, int64_t stage) {
  const int64_t p = s.pipeline;
  const int64_t m = s.microbatches;
  const int64_t layers_per_stage = s.layers / p;
  switch (s.schedule) {
    case SCHEDULE_GPIPE:
      return Mul(m, layers_per_stage);
    case SCHEDULE_INTERLEAVED_1F1B: {
      const int64_t v = s.virtual_stages;
      const int64_t all = Mul(m, v);
      const int64_t warmup_plus_one = Sum({Mul(2, p - stage - 1), Mul(v - 1, p), 1});
      const int64_t chunks = m == p ? all : std::min(warmup_plus_one, all);
      return Mul(chunks, layers_per_stage / v);
    }
    default:  // SCHEDULE_1F1B
      return Mul(std::min(p - stage, m), layers_per_stage);
  }
}

// Elements one layer saves for its backward per microbatch (activations.h).
int64_t LayerActivationElements(const Shape& s) {
  const int64_t n = s.tokens();
  const int64_t attention = Mul(Mul(s.micro_batch, s.heads / s.tensor), s.seq);
  return Sum({Mul(4, Mul(n, s.hidden)), Mul(4, n), Mul(12, Mul(n, s.local_hidden())), attention});
}

int64_t ActivationBytes(const Shape& s, int64_t stage) {
  const int64_t in_flight = LayersInFlight(s, stage);
  if (!s.recompute) return Mul(kFp32Bytes, Mul(in_flight, LayerActivationElements(s)));
  // Only each layer's input is kept; one layer at a time is recomputed in full.
  const int64_t inputs = Mul(in_flight, Mul(s.tokens(), s.hidden));
  return Mul(kFp32Bytes, Add(inputs, LayerActivationElements(s)));
}

int64_t LogitsBytes(const Shape& s, int64_t stage) {
  if (stage != s.pipeline - 1) return 0;
  int64_t in_flight = 1;
  if (s.schedule == SCHEDULE_GPIPE) in_flight = s.microbatches;
  if (s.schedule == SCHEDULE_INTERLEAVED_1F1B) in_flight = std::min(s.microbatches, s.pipeline);
  const int64_t n = s.tokens();
  const int64_t logits = Mul(n, s.vocab_local);
  const int64_t per_microbatch = Sum({logits, Mul(n, s.hidden), Mul(5, n)});
  return Mul(kFp32Bytes, Add(Mul(in_flight, per_microbatch), logits));
}

RankMemoryEstimate EstimateStage(const Shape& s, int64_t stage) {
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
  e.activation_bytes = ActivationBytes(s, stage);
  e.logits_bytes = LogitsBytes(s, stage);
  e.total_bytes = Sum(
      {e.weight_bytes, e.gradient_bytes, e.optimizer_bytes, e.activation_bytes, e.logits_bytes});
  return e;
}

}  // namespace

RankMemoryEstimate EstimateRankMemory(const JobSpec& spec) {
  const Shape shape = ShapeOf(spec);
  // The first stage holds the most activations (1F1B, interleaved) and the embedding; the
  // last holds the logits. Middle stages hold no more than the first.
  const RankMemoryEstimate first = EstimateStage(shape, 0);
  if (shape.pipeline == 1) return first;
  const RankMemoryEstimate last = EstimateStage(shape, shape.pipeline - 1);
  return last.total_bytes > first.total_bytes ? last : first;
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
  return absl::StrCat(FormatMemoryBytes(total_bytes), " (pipeline stage ", pipeline_stage, ", ",
                      parameters, " parameters: weights ", FormatMemoryBytes(weight_bytes),
                      ", gradients ", FormatMemoryBytes(gradient_bytes), ", optimizer ",
                      FormatMemoryBytes(optimizer_bytes), ", activations ",
                      FormatMemoryBytes(activation_bytes), ", logits ",
                      FormatMemoryBytes(logits_bytes), ")");
}

}  // namespace mtrain
