// The byte tokenizer: one token per byte of the text, the byte's unsigned value as the id
// (0..255). Lossless for any byte string (UTF-8 or not), so the vocabulary is fixed at 256
// and needs no vocabulary file.
//
//   std::vector<int32_t> ids = ByteTokenizer::Encode("To be");   // {84, 111, 32, 98, 101}
//   absl::StatusOr<std::string> text = ByteTokenizer::Decode(ids);
#ifndef MTRAIN_DATA_BYTE_TOKENIZER_H_
#define MTRAIN_DATA_BYTE_TOKENIZER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace mtrain {

class ByteTokenizer {
 public:
  // Ids are 0..kVocabSize-1.
  static constexpr int kVocabSize = 256;

  // One id per byte, in order.
  static std::vector<int32_t> Encode(absl::string_view text);

  // Writes text.size() ids to `out`, for callers that own the buffer.
  static void EncodeTo(absl::string_view text, int32_t* out);

  // The bytes back. INVALID_ARGUMENT naming the position and value of the first id outside
  // 0..255 (a model with a padded vocabulary can produce such ids).
  static absl::StatusOr<std::string> Decode(absl::Span<const int32_t> ids);
};

}  // namespace mtrain

#endif  // MTRAIN_DATA_BYTE_TOKENIZER_H_
