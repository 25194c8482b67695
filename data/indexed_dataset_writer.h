// Writes Megatron-LM's indexed dataset (the MMIDIDX format, indexed_dataset_format.h), the
// same layout as Megatron's IndexedDatasetBuilder: sequences back to back in the .bin,
// document indices starting with 0 and followed by the sequence count after each document.
//
// Both files are written under temporary names and renamed into place by Finish, so a
// reader never sees a half-written dataset; a writer destroyed before Finish removes them.
//
//   ASSIGN_OR_RETURN(auto writer, IndexedDatasetWriter::Create(prefix, IndexedDtype::kUint16));
//   RETURN_IF_ERROR(writer->AddDocument(tokens));
//   RETURN_IF_ERROR(writer->Finish());
#ifndef MTRAIN_DATA_INDEXED_DATASET_WRITER_H_
#define MTRAIN_DATA_INDEXED_DATASET_WRITER_H_

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "data/indexed_dataset_format.h"

namespace mtrain {

class IndexedDatasetWriter {
 public:
  // Opens <prefix>.bin.tmp for writing; errors name the path.
  static absl::StatusOr<std::unique_ptr<IndexedDatasetWriter>> Create(const std::string& prefix,
                                                                      IndexedDtype dtype);

  // Removes the temporary files unless Finish succeeded.
  ~IndexedDatasetWriter();
  IndexedDatasetWriter(const IndexedDatasetWriter&) = delete;
  IndexedDatasetWriter& operator=(const IndexedDatasetWriter&) = delete;

  // Appends one sequence to the current document. INVALID_ARGUMENT (naming the sequence and
  // position) for an id the dtype cannot hold exactly, or a sequence of 2^31 tokens or more.
  absl::Status AddSequence(absl::Span<const int32_t> tokens);
  // Ends the current document (Megatron's end_document).
  void EndDocument();
  // AddSequence, then EndDocument: one document made of one sequence.
  absl::Status AddDocument(absl::Span<const int32_t> tokens);

  // Ends a document left open, writes the .idx and renames both files into place.
  // FAILED_PRECONDITION if called twice.
  absl::Status Finish();

  int64_t num_sequences() const { return static_cast<int64_t>(lengths_.size()); }
  int64_t num_tokens() const { return num_tokens_; }

 private:
  IndexedDatasetWriter(std::string prefix, IndexedDtype dtype, std::FILE* bin)
      : prefix_(std::move(prefix)), dtype_(dtype), bin_(bin) {}

  std::string TempPath(const std::string& path) const { return path + ".tmp"; }

  std::string prefix_;
  IndexedDtype dtype_;
  std::FILE* bin_;  // nullptr once closed
  bool finished_ = false;
  int64_t num_tokens_ = 0;
  std::vector<int32_t> lengths_;
  std::vector<int64_t> document_indices_ = {0};
};

// The dtype our tools write: uint16 when every id is in [0, 65536), else int32.
IndexedDtype ChooseTokenDtype(const std::vector<std::vector<int32_t>>& documents);

// Writes `documents` (each one sequence) to <prefix>.bin/.idx with ChooseTokenDtype.
absl::Status WriteIndexedDataset(const std::string& prefix,
                                 const std::vector<std::vector<int32_t>>& documents);

}  // namespace mtrain

#endif  // MTRAIN_DATA_INDEXED_DATASET_WRITER_H_
