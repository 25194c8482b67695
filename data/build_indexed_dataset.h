// Turns a text file into an indexed (MMIDIDX) dataset: split into documents, byte-tokenize,
// one sequence per document, dtype uint16 (Megatron's choice for vocabularies < 65500).
// The library half of the build_indexed_dataset tool, so tests can call it directly.
//
// Document rule: the text is cut after each run of one or more consecutive copies of the
// separator, and each document keeps the run that ends it. So with the default "\n\n",
// documents are blank-line-separated paragraphs, no document is empty, and the documents
// concatenated reproduce the file byte for byte (the MMIDIDX token stream equals the TEXT
// one). An empty separator makes the whole file one document.
#ifndef MTRAIN_DATA_BUILD_INDEXED_DATASET_H_
#define MTRAIN_DATA_BUILD_INDEXED_DATASET_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "data/indexed_dataset_format.h"

namespace mtrain {

inline constexpr absl::string_view kDefaultDocumentSeparator = "\n\n";

// The documents of `text` under the rule above; views into `text`.
std::vector<absl::string_view> SplitIntoDocuments(absl::string_view text,
                                                  absl::string_view separator);

struct BuildIndexedDatasetSummary {
  int64_t documents = 0;
  int64_t tokens = 0;
  IndexedDtype dtype = IndexedDtype::kUint16;
};

// Reads `input_path`, writes <output_prefix>.bin/.idx. NOT_FOUND for a missing input,
// INVALID_ARGUMENT for an empty one; messages name the path.
absl::StatusOr<BuildIndexedDatasetSummary> BuildIndexedDatasetFromText(
    const std::string& input_path, const std::string& output_prefix, absl::string_view separator);

}  // namespace mtrain

#endif  // MTRAIN_DATA_BUILD_INDEXED_DATASET_H_
