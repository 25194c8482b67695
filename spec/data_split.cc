#include "spec/data_split.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace mtrain {
namespace {

absl::Status SplitError(absl::string_view text, absl::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrCat("data.split: \"", text, "\" ", why,
                   " [rule: one to three non-negative numbers separated by ',' or '/', with "
                   "a positive sum, e.g. \"969,30,1\"]"));
}

}  // namespace

absl::StatusOr<DataSplit> ParseDataSplit(absl::string_view text) {
  const std::vector<absl::string_view> parts =
      absl::StrSplit(text, absl::ByAnyChar(",/"), absl::AllowEmpty());
  if (parts.size() > 3) return SplitError(text, absl::StrCat("has ", parts.size(), " shares"));
  DataSplit split;
  double sum = 0;
  for (size_t i = 0; i < 3; ++i) {
    double value = 0;
    if (i < parts.size()) {
      const absl::string_view part = absl::StripAsciiWhitespace(parts[i]);
      if (!absl::SimpleAtod(part, &value) || !std::isfinite(value)) {
        return SplitError(text, absl::StrCat("share ", i + 1, " (\"", part, "\") is not a number"));
      }
      if (value < 0) {
        return SplitError(text, absl::StrCat("share ", i + 1, " (", value, ") is negative"));
      }
    }
    split.shares[i] = value;
    sum += value;
  }
  if (!(sum > 0)) return SplitError(text, "sums to 0");
  for (double& share : split.shares) share /= sum;
  return split;
}

SplitRange SplitBoundaries(const DataSplit& split, int64_t count, SplitKind kind) {
  // Megatron-Core: the cumulative shares [0, s0, s0 + s1, s0 + s1 + s2] are the book-ends,
  // and a split is [round(book_end_k * count), round(book_end_k+1 * count)). Python's
  // round() rounds halves to even, as std::nearbyint does in the default rounding mode.
  // The sums are formed in the same order as Megatron's (left to right) so that the
  // doubles, and so the rounding, agree.
  std::array<double, 4> book_ends = {0, 0, 0, 0};
  for (int i = 0; i < 3; ++i) book_ends[i + 1] = book_ends[i] + split.shares[i];
  const auto at = [&](int i) {
    const double scaled = std::nearbyint(book_ends[i] * static_cast<double>(count));
    return std::max<int64_t>(0, std::min<int64_t>(count, static_cast<int64_t>(scaled)));
  };
  const int k = static_cast<int>(kind);
  SplitRange range;
  range.begin = at(k);
  range.end = std::max(range.begin, at(k + 1));
  return range;
}

const char* SplitKindName(SplitKind kind) {
  switch (kind) {
    case SplitKind::kTrain:
      return "train";
    case SplitKind::kValidation:
      return "validation";
    case SplitKind::kTest:
      return "test";
  }
  return "unknown";
}

}  // namespace mtrain
