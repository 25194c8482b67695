#include "data/token_dataset.h"

#include "absl/strings/str_cat.h"

namespace mtrain {

absl::Status CheckReadRange(const TokenDataset& dataset, int64_t offset, int length) {
  // Written so that nothing overflows: offset <= size and length <= size - offset.
  if (offset < 0 || length < 0 || offset > dataset.size() || length > dataset.size() - offset) {
    return absl::OutOfRangeError(absl::StrCat(dataset.source(), ": cannot read ", length,
                                              " tokens at offset ", offset, " of ", dataset.size(),
                                              " tokens"));
  }
  return absl::OkStatus();
}

}  // namespace mtrain
