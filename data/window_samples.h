// Samples of a text stream (a TokenDataset without documents) inside one split's token
// range [begin, end):
//
//   RandomWindowSamples      the training windows: sample k = (step, j) with
//                            step = k / global_batch + 1, j = k % global_batch, drawn by
//                            SequenceSampler (with replacement) over the range. With the
//                            whole stream as the range these are exactly the windows jobs
//                            trained on before splits existed.
//   SequentialWindowSamples  the validation windows: sample k starts at
//                            (k mod M) * seq_length, M = (size - 1) / seq_length, so every
//                            token of the range is read once before any is read again.
//
//   RandomWindowSamples train(&dataset, {0, 95000}, 128, seed, /*global_batch=*/8);
//   SequentialWindowSamples valid(&dataset, {95000, 100000}, 128);
#ifndef MTRAIN_DATA_WINDOW_SAMPLES_H_
#define MTRAIN_DATA_WINDOW_SAMPLES_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "data/sample_source.h"
#include "data/sequence_sampler.h"
#include "data/token_dataset.h"
#include "spec/data_split.h"

namespace mtrain {

// A TokenDataset that is tokens [range.begin, range.end) of another (which must outlive it).
class TokenRangeDataset final : public TokenDataset {
 public:
  TokenRangeDataset(const TokenDataset* base, SplitRange range) : base_(base), range_(range) {}
  int64_t size() const override { return range_.size(); }
  absl::Status Read(int64_t offset, int length, int32_t* out) const override;
  int64_t vocab_upper_bound() const override { return base_->vocab_upper_bound(); }
  std::string source() const override { return base_->source(); }

 private:
  const TokenDataset* base_;
  SplitRange range_;
};

class RandomWindowSamples final : public SampleSource {
 public:
  // INVALID_ARGUMENT (naming data.split and the split) when the range holds fewer than
  // seq_length + 1 tokens. `data` must outlive the result.
  static absl::StatusOr<std::unique_ptr<RandomWindowSamples>> Create(const TokenDataset* data,
                                                                     SplitRange range,
                                                                     SplitKind kind, int seq_length,
                                                                     uint64_t seed,
                                                                     int64_t global_batch);
  int seq_length() const override { return sampler_.seq_length(); }
  absl::Status Fill(int64_t index, absl::Span<int32_t> tokens) override;
  std::string Describe() const override;

 private:
  RandomWindowSamples(const TokenDataset* data, SplitRange range, SplitKind kind,
                      SequenceSampler sampler, int64_t global_batch)
      : view_(data, range),
        range_(range),
        kind_(kind),
        sampler_(sampler),
        global_batch_(global_batch) {}

  TokenRangeDataset view_;
  SplitRange range_;
  SplitKind kind_;
  SequenceSampler sampler_;
  int64_t global_batch_;
};

class SequentialWindowSamples final : public SampleSource {
 public:
  // INVALID_ARGUMENT as RandomWindowSamples. `data` must outlive the result.
  static absl::StatusOr<std::unique_ptr<SequentialWindowSamples>> Create(const TokenDataset* data,
                                                                         SplitRange range,
                                                                         SplitKind kind,
                                                                         int seq_length);
  int seq_length() const override { return seq_length_; }
  absl::Status Fill(int64_t index, absl::Span<int32_t> tokens) override;
  std::string Describe() const override;
  // Distinct windows before they repeat: (range size - 1) / seq_length.
  int64_t windows() const { return windows_; }

 private:
  SequentialWindowSamples(const TokenDataset* data, SplitRange range, SplitKind kind,
                          int seq_length)
      : view_(data, range),
        range_(range),
        kind_(kind),
        seq_length_(seq_length),
        windows_((range.size() - 1) / seq_length) {}

  TokenRangeDataset view_;
  SplitRange range_;
  SplitKind kind_;
  int seq_length_;
  int64_t windows_;
};

// The check both share, exposed for the indexed sources' messages to match: OK when
// `tokens` >= seq_length + 1, else INVALID_ARGUMENT "data.split: the <kind> split of
// <source> (tokens [b, e)) holds N tokens, fewer than model.seq_length + 1 = ...".
absl::Status CheckSplitHoldsASample(const std::string& source, SplitKind kind,
                                    absl::string_view where, int64_t tokens, int seq_length);

}  // namespace mtrain

#endif  // MTRAIN_DATA_WINDOW_SAMPLES_H_
