#include "data/sequence_sampler.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace mtrain {

uint64_t SplitMix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

absl::StatusOr<SequenceSampler> SequenceSampler::Create(int64_t dataset_size, int seq_length,
                                                        uint64_t seed) {
  if (seq_length <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("model.seq_length: ", seq_length, " must be > 0"));
  }
  if (dataset_size < int64_t{seq_length} + 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "data: the dataset has ", dataset_size, " tokens, fewer than model.seq_length + 1 (",
        int64_t{seq_length} + 1, ") that one sample needs [rule: tokens > seq_length]"));
  }
  return SequenceSampler(dataset_size, seq_length, seed);
}

int64_t SequenceSampler::SampleStart(int64_t step, int64_t index_in_global_batch) const {
  // Each input is mixed in on its own: a linear key such as step * batch + index would make
  // pairs alias one another whenever the batch size changes.
  uint64_t h = SplitMix64(seed_);
  h = SplitMix64(h ^ static_cast<uint64_t>(step));
  h = SplitMix64(h ^ static_cast<uint64_t>(index_in_global_batch));
  using uint128 = unsigned __int128;
  return static_cast<int64_t>((static_cast<uint128>(h) * static_cast<uint64_t>(num_starts())) >>
                              64);
}

absl::Status SequenceSampler::Fill(const TokenDataset& dataset, int64_t step,
                                   absl::Span<const int64_t> indices, absl::Span<int32_t> inputs,
                                   absl::Span<int32_t> targets) const {
  if (dataset.size() != dataset_size_) {
    return absl::InvalidArgumentError(absl::StrCat(dataset.source(), ": has ", dataset.size(),
                                                   " tokens but the sampler was created for ",
                                                   dataset_size_));
  }
  const size_t needed = indices.size() * static_cast<size_t>(seq_length_);
  if (inputs.size() != needed || targets.size() != needed) {
    return absl::InvalidArgumentError(absl::StrCat(
        "sampler: ", indices.size(), " samples of ", seq_length_, " tokens need buffers of ",
        needed, " tokens; got inputs ", inputs.size(), ", targets ", targets.size()));
  }
  for (size_t i = 0; i < indices.size(); ++i) {
    const int64_t start = SampleStart(step, indices[i]);
    // Two reads instead of one seq_length + 1 read and a copy: the overlap is cheap.
    RETURN_IF_ERROR(dataset.Read(start, seq_length_, inputs.data() + i * seq_length_));
    RETURN_IF_ERROR(dataset.Read(start + 1, seq_length_, targets.data() + i * seq_length_));
  }
  return absl::OkStatus();
}

}  // namespace mtrain
