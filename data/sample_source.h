// Where a split's training samples come from: sample k (0-based) of the split is
// seq_length + 1 tokens, the inputs being the first seq_length and the targets the last.
// Every implementation is a pure function of its construction arguments (the data, the
// split, seq_length, the seed), so a job resumed at any step, and every layout, sees the
// same samples for the same k: the trainer asks for sample (step - 1) * global_batch + j
// for sequence j of a step's global batch, and for samples 0 .. eval_iters * global_batch
// - 1 of the validation split at each evaluation.
//
// Implementations: WindowSamples (a text stream: windows with replacement, as
// SequenceSampler draws them), DocumentSamples (Megatron's GPT dataset over an indexed
// dataset's documents: per-epoch shuffles, no sample repeated within an epoch) and
// BlendedSamples (a weighted blend of several, Megatron's blending order).
//
// Not thread-safe unless an implementation says so: one trainer thread draws samples.
//
//   std::vector<int32_t> sample(seq_length + 1);
//   RETURN_IF_ERROR(source.Fill(k, absl::MakeSpan(sample)));
#ifndef MTRAIN_DATA_SAMPLE_SOURCE_H_
#define MTRAIN_DATA_SAMPLE_SOURCE_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/types/span.h"

namespace mtrain {

class SampleSource {
 public:
  virtual ~SampleSource() = default;

  // The tokens of the samples.
  virtual int seq_length() const = 0;

  // Copies sample `index` (any index >= 0; sources without end wrap into new epochs) into
  // `tokens`, which must hold seq_length() + 1. INVALID_ARGUMENT for a negative index or a
  // buffer of another size; read errors of the underlying data pass through.
  virtual absl::Status Fill(int64_t index, absl::Span<int32_t> tokens) = 0;

  // One line for the rank's log: what the samples are drawn from and how ("documents
  // 0..9847 of /data/web, 10,163,402 tokens, 9,921 samples an epoch, index cached in ...").
  virtual std::string Describe() const = 0;
};

}  // namespace mtrain

#endif  // MTRAIN_DATA_SAMPLE_SOURCE_H_
