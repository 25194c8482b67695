// BlendedSamples: a weighted blend of SampleSources in Megatron-Core's order, so a job
// blending datasets draws, for every sample index, the same dataset and the same sample of
// it as Megatron's BlendedDataset would.
//
// Weights are normalised as Megatron does (numpy's pairwise sum, divided, and that twice:
// once by the builder and once by BlendedDataset). Sample i goes to the dataset whose share
// lags furthest behind its weight, Megatron-Core's greedy build_blending_indices: with
// count[d] the samples given to d among the first i,
//   d(i) = the first d maximising  weights[d] * max(i, 1) - count[d]   (in double)
// and the sample is dataset d(i)'s sample count[d(i)]. The arithmetic is Megatron's, so the
// assignment matches it bit for bit.
//
// Megatron builds the assignment for a fixed number of samples up front; here any index
// >= 0 is valid. The per-dataset counts are kept every kCheckpointInterval samples, the
// table extended lazily as larger indices are asked for, and an index is resolved by
// replaying the greedy rule from its block's checkpoint (the last block replayed is kept,
// so the samples of one batch cost one replay).
//
// Thread-safe: Fill and CountsBefore may be called from several threads, provided the
// sources' Fill is too.
//
//   std::vector<std::unique_ptr<SampleSource>> sources = ...;
//   ASSIGN_OR_RETURN(std::unique_ptr<BlendedSamples> blend,
//                    BlendedSamples::Create(std::move(sources), {0.3, 0.7}, {"web", "code"}));
//   RETURN_IF_ERROR(blend->Fill(k, absl::MakeSpan(sample)));
#ifndef MTRAIN_DATA_BLENDED_SAMPLES_H_
#define MTRAIN_DATA_BLENDED_SAMPLES_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/mutex.h"
#include "data/sample_source.h"

namespace mtrain {

class BlendedSamples final : public SampleSource {
 public:
  // Samples between two checkpoints of the per-dataset counts.
  static constexpr int64_t kCheckpointInterval = 4096;

  // Where one blended sample comes from.
  struct Assignment {
    int dataset;    // index into the sources
    int64_t index;  // the sample of that source
  };

  // `names` name the sources in messages (data.paths entries). INVALID_ARGUMENT for no
  // source, vectors of different sizes, sources of different seq_length, or a weight that
  // is not a finite number > 0.
  static absl::StatusOr<std::unique_ptr<BlendedSamples>> Create(
      std::vector<std::unique_ptr<SampleSource>> sources, std::vector<double> weights,
      std::vector<std::string> names);

  // SampleSource.
  int seq_length() const override { return seq_length_; }
  absl::Status Fill(int64_t index, absl::Span<int32_t> tokens) override;
  std::string Describe() const override;

  // Sample `index` (>= 0): which source and which of its samples.
  Assignment Assign(int64_t index) const;
  // How many of the first n samples (n >= 0) each source provides.
  std::vector<int64_t> CountsBefore(int64_t n) const;
  // Megatron's normalised weights, as the greedy rule uses them.
  const std::vector<double>& normalized_weights() const { return weights_; }

 private:
  BlendedSamples(std::vector<std::unique_ptr<SampleSource>> sources, std::vector<double> weights,
                 std::vector<std::string> names, int seq_length);

  // One greedy step: the dataset sample `index` goes to, given `counts` before it.
  int Choose(int64_t index, const int64_t* counts) const;
  // Counts before `block` * kCheckpointInterval, extending the table as needed.
  void EnsureCheckpoint(int64_t block) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // Replays `block` into the cached block below.
  void ReplayBlock(int64_t block) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);

  const std::vector<std::unique_ptr<SampleSource>> sources_;
  const std::vector<double> weights_;  // normalised
  const std::vector<std::string> names_;
  const int seq_length_;

  mutable Mutex mutex_;
  // Row b (num_sources values) holds the counts before sample b * kCheckpointInterval.
  mutable std::vector<int64_t> checkpoints_ ABSL_GUARDED_BY(mutex_);
  // The assignments of one replayed block (-1: none yet).
  mutable int64_t cached_block_ ABSL_GUARDED_BY(mutex_) = -1;
  mutable std::vector<Assignment> cached_assignments_ ABSL_GUARDED_BY(mutex_);
};

// The samples Megatron asks of each dataset for a blend of `target_samples`:
// ceil(ceil(target_samples * w) * 1.005) for each normalised weight w, as
// _get_size_per_split_per_dataset computes it with the default mid-level surplus of 0.005.
std::vector<int64_t> MegatronSizesPerDataset(const std::vector<double>& normalized_weights,
                                             int64_t target_samples);

// Megatron's normalize(): w / sum(w), the sum in numpy's pairwise order. Applied once.
std::vector<double> MegatronNormalize(const std::vector<double>& weights);

}  // namespace mtrain

#endif  // MTRAIN_DATA_BLENDED_SAMPLES_H_
