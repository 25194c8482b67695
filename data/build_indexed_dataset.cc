#include "data/build_indexed_dataset.h"

#include <memory>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "data/byte_tokenizer.h"
#include "data/indexed_dataset_writer.h"
#include "data/mapped_file.h"

namespace mtrain {

std::vector<absl::string_view> SplitIntoDocuments(absl::string_view text,
                                                  absl::string_view separator) {
  std::vector<absl::string_view> documents;
  if (separator.empty()) {
    if (!text.empty()) documents.push_back(text);
    return documents;
  }
  size_t begin = 0;
  while (begin < text.size()) {
    size_t found = text.find(separator, begin);
    if (found == absl::string_view::npos) {
      documents.push_back(text.substr(begin));
      break;
    }
    size_t end = found + separator.size();
    while (absl::StartsWith(text.substr(end), separator)) end += separator.size();
    documents.push_back(text.substr(begin, end - begin));
    begin = end;
  }
  return documents;
}

absl::StatusOr<BuildIndexedDatasetSummary> BuildIndexedDatasetFromText(
    const std::string& input_path, const std::string& output_prefix, absl::string_view separator) {
  ASSIGN_OR_RETURN(std::unique_ptr<MappedFile> input, MappedFile::Open(input_path));
  if (input->size() == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(input_path, ": the text file is empty; there is nothing to index"));
  }
  BuildIndexedDatasetSummary summary;
  // Byte ids are < 256, so uint16 holds them (the writer rejects anything it cannot hold).
  summary.dtype = IndexedDtype::kUint16;
  ASSIGN_OR_RETURN(std::unique_ptr<IndexedDatasetWriter> writer,
                   IndexedDatasetWriter::Create(output_prefix, summary.dtype));
  std::vector<int32_t> tokens;
  for (absl::string_view document : SplitIntoDocuments(input->bytes(), separator)) {
    tokens.resize(document.size());
    ByteTokenizer::EncodeTo(document, tokens.data());
    RETURN_IF_ERROR(writer->AddDocument(tokens));
    ++summary.documents;
  }
  summary.tokens = writer->num_tokens();
  RETURN_IF_ERROR(writer->Finish());
  return summary;
}

}  // namespace mtrain
