#include "data/byte_tokenizer.h"

#include "absl/strings/str_cat.h"

namespace mtrain {

std::vector<int32_t> ByteTokenizer::Encode(absl::string_view text) {
  std::vector<int32_t> ids(text.size());
  EncodeTo(text, ids.data());
  return ids;
}

void ByteTokenizer::EncodeTo(absl::string_view text, int32_t* out) {
  // Through unsigned char: `char` is signed here, and bytes >= 128 must map to 128..255.
  for (size_t i = 0; i < text.size(); ++i) out[i] = static_cast<unsigned char>(text[i]);
}

absl::StatusOr<std::string> ByteTokenizer::Decode(absl::Span<const int32_t> ids) {
  std::string text(ids.size(), '\0');
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= kVocabSize) {
      return absl::InvalidArgumentError(absl::StrCat("byte tokenizer: token id ", ids[i],
                                                     " at position ", i,
                                                     " is not a byte [rule: 0 <= id < 256]"));
    }
    text[i] = static_cast<char>(static_cast<unsigned char>(ids[i]));
  }
  return text;
}

}  // namespace mtrain
