#include "data/window_samples.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace mtrain {
namespace {

absl::Status CheckBuffer(absl::Span<int32_t> tokens, int seq_length, int64_t index) {
  if (index < 0) {
    return absl::InvalidArgumentError(absl::StrCat("sample index ", index, " is negative"));
  }
  if (tokens.size() != static_cast<size_t>(seq_length) + 1) {
    return absl::InvalidArgumentError(absl::StrCat("a sample is seq_length + 1 = ", seq_length + 1,
                                                   " tokens; the buffer holds ", tokens.size()));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckSplitHoldsASample(const std::string& source, SplitKind kind,
                                    absl::string_view where, int64_t tokens, int seq_length) {
  if (tokens >= int64_t{seq_length} + 1) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "data.split: the ", SplitKindName(kind), " split of ", source, " (", where, ") holds ",
      tokens, " tokens, fewer than model.seq_length + 1 = ", int64_t{seq_length} + 1,
      " that one sample needs [rule: every split in use holds a sample; give it a larger share "
      "or use more data]"));
}

absl::Status TokenRangeDataset::Read(int64_t offset, int length, int32_t* out) const {
  RETURN_IF_ERROR(CheckReadRange(*this, offset, length));
  return base_->Read(range_.begin + offset, length, out);
}

absl::StatusOr<std::unique_ptr<RandomWindowSamples>> RandomWindowSamples::Create(
    const TokenDataset* data, SplitRange range, SplitKind kind, int seq_length, uint64_t seed,
    int64_t global_batch) {
  RETURN_IF_ERROR(CheckSplitHoldsASample(
      data->source(), kind, absl::StrCat("tokens [", range.begin, ", ", range.end, ")"),
      range.size(), seq_length));
  if (global_batch <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("parallel.global_batch_size: ", global_batch, " must be > 0"));
  }
  ASSIGN_OR_RETURN(SequenceSampler sampler,
                   SequenceSampler::Create(range.size(), seq_length, seed));
  return std::unique_ptr<RandomWindowSamples>(
      new RandomWindowSamples(data, range, kind, sampler, global_batch));
}

absl::Status RandomWindowSamples::Fill(int64_t index, absl::Span<int32_t> tokens) {
  RETURN_IF_ERROR(CheckBuffer(tokens, seq_length(), index));
  const int64_t start = sampler_.SampleStart(index / global_batch_ + 1, index % global_batch_);
  return view_.Read(start, seq_length() + 1, tokens.data());
}

std::string RandomWindowSamples::Describe() const {
  return absl::StrCat(view_.source(), " ", SplitKindName(kind_), " tokens [", range_.begin, ", ",
                      range_.end, "): windows of ", seq_length() + 1,
                      " tokens drawn with replacement");
}

absl::StatusOr<std::unique_ptr<SequentialWindowSamples>> SequentialWindowSamples::Create(
    const TokenDataset* data, SplitRange range, SplitKind kind, int seq_length) {
  if (seq_length <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("model.seq_length: ", seq_length, " must be > 0"));
  }
  RETURN_IF_ERROR(CheckSplitHoldsASample(
      data->source(), kind, absl::StrCat("tokens [", range.begin, ", ", range.end, ")"),
      range.size(), seq_length));
  return std::unique_ptr<SequentialWindowSamples>(
      new SequentialWindowSamples(data, range, kind, seq_length));
}

absl::Status SequentialWindowSamples::Fill(int64_t index, absl::Span<int32_t> tokens) {
  RETURN_IF_ERROR(CheckBuffer(tokens, seq_length_, index));
  const int64_t start = (index % windows_) * seq_length_;
  return view_.Read(start, seq_length_ + 1, tokens.data());
}

std::string SequentialWindowSamples::Describe() const {
  return absl::StrCat(view_.source(), " ", SplitKindName(kind_), " tokens [", range_.begin, ", ",
                      range_.end, "): ", windows_, " consecutive windows of ", seq_length_ + 1,
                      " tokens");
}

}  // namespace mtrain
