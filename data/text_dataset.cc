#include "data/text_dataset.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "data/byte_tokenizer.h"
#include "data/mapped_file.h"

namespace mtrain {

absl::StatusOr<std::unique_ptr<TextDataset>> TextDataset::Open(const std::string& path,
                                                               const BpeTokenizer* tokenizer) {
  // Mapping rather than streaming reads the file in one pass without a second copy of it.
  ASSIGN_OR_RETURN(std::unique_ptr<MappedFile> file, MappedFile::Open(path));
  if (file->size() > kMaxTextFileBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": the text file has ", file->size(), " bytes, more than the ", kMaxTextFileBytes,
        " a DATA_FORMAT_TEXT dataset may have (it is held in memory, 4 bytes per byte); convert "
        "it with build_indexed_dataset and use DATA_FORMAT_MMIDIDX, which is memory-mapped"));
  }
  if (file->size() == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": the text file is empty; a dataset needs at least one token"));
  }
  if (tokenizer == nullptr) {
    return std::unique_ptr<TextDataset>(
        new TextDataset(path, ByteTokenizer::Encode(file->bytes()), ByteTokenizer::kVocabSize));
  }
  return std::unique_ptr<TextDataset>(
      new TextDataset(path, tokenizer->Encode(file->bytes()), tokenizer->vocab_size()));
}

absl::Status TextDataset::Read(int64_t offset, int length, int32_t* out) const {
  RETURN_IF_ERROR(CheckReadRange(*this, offset, length));
  std::copy_n(tokens_.data() + offset, length, out);
  return absl::OkStatus();
}

int64_t TextDataset::vocab_upper_bound() const { return vocab_upper_bound_; }

}  // namespace mtrain
