// data.split: how a dataset's documents are divided into train, validation and test, as
// Megatron-LM's --split does it.
//
// The text is one to three non-negative numbers separated by ',' or '/' ("969,30,1",
// "98/2"); missing shares are 0 and the shares are normalised to sum to 1. Each split is a
// contiguous range of the documents, in order: train first. The boundaries are
// Megatron-Core's (blended_megatron_dataset_builder.py): split k is
// [round(c_k * count), round(c_k+1 * count)) with c the cumulative shares.
//
//   ASSIGN_OR_RETURN(DataSplit split, ParseDataSplit("969,30,1"));
//   SplitRange valid = SplitBoundaries(split, num_documents, SplitKind::kValidation);
#ifndef MTRAIN_SPEC_DATA_SPLIT_H_
#define MTRAIN_SPEC_DATA_SPLIT_H_

#include <array>
#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace mtrain {

enum class SplitKind { kTrain = 0, kValidation = 1, kTest = 2 };

// The normalised shares, in SplitKind order; they sum to 1.
struct DataSplit {
  std::array<double, 3> shares = {1.0, 0.0, 0.0};

  double share(SplitKind kind) const { return shares[static_cast<int>(kind)]; }
};

// [begin, end) of one split, in documents (or tokens, for a text stream).
struct SplitRange {
  int64_t begin = 0;
  int64_t end = 0;
  int64_t size() const { return end - begin; }
};

// The split's text when data.split is unset: everything trains.
inline constexpr char kDefaultDataSplit[] = "1,0,0";

// INVALID_ARGUMENT naming data.split and the rule for text that is not one to three
// finite non-negative numbers with a positive sum.
absl::StatusOr<DataSplit> ParseDataSplit(absl::string_view text);

// The range of `kind` among `count` items (documents, or tokens of a text stream).
SplitRange SplitBoundaries(const DataSplit& split, int64_t count, SplitKind kind);

// "train", "validation", "test": for messages and cache file names.
const char* SplitKindName(SplitKind kind);

}  // namespace mtrain

#endif  // MTRAIN_SPEC_DATA_SPLIT_H_
