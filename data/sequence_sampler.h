// Deterministic training samples. Sequence j (0-based) of the global batch of optimizer
// step s (1-based) starts at a token offset that is a pure function of (seed, s, j), and
// the sample is the seq_length + 1 tokens from there: inputs are the first seq_length,
// targets the last seq_length (the inputs shifted by one).
//
// Being a pure function is the point: a job resumed after step N just continues at step
// N + 1 (no sampler state to checkpoint), and however a global batch is divided among
// data-parallel ranks and microbatches, each index j maps to the same sequence.
//
// The start is drawn uniformly from the size - seq_length valid starts
// [0, size - seq_length - 1], with replacement (samples of one batch may overlap):
//   h = SplitMix64(SplitMix64(SplitMix64(seed) ^ step) ^ index)
//   start = (h * num_starts) >> 64          (128-bit product)
// SplitMix64 is the splitmix64 generator's output function applied to x + 0x9E3779B97F4A7C15
// (a bijective avalanche mixer), so each (seed, step, index) gets an independent-looking
// 64-bit value. The multiply-shift maps it to [0, num_starts) without a modulo; its bias is
// at most num_starts / 2^64 per start, nothing at any dataset size.
//
//   ASSIGN_OR_RETURN(SequenceSampler sampler, SequenceSampler::Create(data.size(), 128, seed));
//   RETURN_IF_ERROR(sampler.Fill(data, step, indices, inputs, targets));
#ifndef MTRAIN_DATA_SEQUENCE_SAMPLER_H_
#define MTRAIN_DATA_SEQUENCE_SAMPLER_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "data/token_dataset.h"

namespace mtrain {

// The mixer above, exposed for tests.
uint64_t SplitMix64(uint64_t x);

class SequenceSampler {
 public:
  // INVALID_ARGUMENT if seq_length <= 0 or the dataset has fewer than seq_length + 1 tokens.
  static absl::StatusOr<SequenceSampler> Create(int64_t dataset_size, int seq_length,
                                                uint64_t seed);

  // The first token of sequence `index_in_global_batch` of optimizer step `step`; always in
  // [0, dataset_size - seq_length - 1]. Any step and index are accepted (they are only
  // hashed); the engine uses steps 1, 2, ... and indices 0 .. global_batch_size - 1.
  int64_t SampleStart(int64_t step, int64_t index_in_global_batch) const;

  // For each of `indices` (indices within step's global batch), in order, copies the
  // sample's inputs and targets: indices.size() * seq_length tokens into each buffer.
  // INVALID_ARGUMENT if a buffer has another size or `dataset` has a size other than the
  // one the sampler was created for; read errors from the dataset pass through.
  absl::Status Fill(const TokenDataset& dataset, int64_t step, absl::Span<const int64_t> indices,
                    absl::Span<int32_t> inputs, absl::Span<int32_t> targets) const;

  int64_t dataset_size() const { return dataset_size_; }
  int seq_length() const { return seq_length_; }
  uint64_t seed() const { return seed_; }
  // How many distinct starts exist: dataset_size - seq_length.
  int64_t num_starts() const { return dataset_size_ - seq_length_; }

 private:
  SequenceSampler(int64_t dataset_size, int seq_length, uint64_t seed)
      : dataset_size_(dataset_size), seq_length_(seq_length), seed_(seed) {}

  int64_t dataset_size_;
  int seq_length_;
  uint64_t seed_;
};

}  // namespace mtrain

#endif  // MTRAIN_DATA_SEQUENCE_SAMPLER_H_
