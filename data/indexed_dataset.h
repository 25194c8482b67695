// Reads Megatron-LM's indexed dataset (the MMIDIDX format, indexed_dataset_format.h) through
// read-only memory maps of <prefix>.idx and <prefix>.bin.
//
// Open validates everything the reader later relies on, so no corrupt or truncated file
// can make an access fall outside the maps:
//   INVALID_ARGUMENT  not this format: bad magic, a version other than 1, an unknown dtype
//   DATA_LOSS         corrupt or truncated: a header shorter than 34 bytes, an .idx whose
//                     size does not match its counts, a negative length, a pointer outside
//                     the .bin, sequences not stored back to back in order, a .bin whose
//                     size does not match the index, document indices that do not run
//                     from 0 to the sequence count without decreasing
//   NOT_FOUND         a missing .idx or .bin
// Every message names the file and what is wrong. (A file truncated by another process
// after Open is outside this promise: reading its lost pages raises SIGBUS.)
//
// As a TokenDataset it is all sequences concatenated in order.
//
//   ASSIGN_OR_RETURN(std::unique_ptr<IndexedDataset> data, IndexedDataset::Open(prefix));
//   ASSIGN_OR_RETURN(std::vector<int32_t> tokens, data->Sequence(0));
#ifndef MTRAIN_DATA_INDEXED_DATASET_H_
#define MTRAIN_DATA_INDEXED_DATASET_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "data/indexed_dataset_format.h"
#include "data/mapped_file.h"
#include "data/token_dataset.h"

namespace mtrain {

// Where a sequence lies in the concatenated token stream.
struct SequenceRange {
  int64_t offset;  // token offset of its first token
  int32_t length;  // tokens
};

// Sequences [begin, end) make up one document.
struct DocumentRange {
  int64_t begin;
  int64_t end;
};

class IndexedDataset final : public TokenDataset {
 public:
  // Maps and validates <prefix>.idx and <prefix>.bin (errors above).
  static absl::StatusOr<std::unique_ptr<IndexedDataset>> Open(const std::string& prefix);

  IndexedDtype dtype() const { return dtype_; }
  int64_t num_sequences() const { return num_sequences_; }
  // The header's document count minus one: the index array starts with a 0 sentinel.
  int64_t num_documents() const { return num_document_indices_ - 1; }

  // OUT_OF_RANGE unless 0 <= index < num_sequences().
  absl::StatusOr<SequenceRange> sequence(int64_t index) const;
  // The tokens of one sequence. OUT_OF_RANGE for a bad index.
  absl::StatusOr<std::vector<int32_t>> Sequence(int64_t index) const;
  // OUT_OF_RANGE unless 0 <= document < num_documents().
  absl::StatusOr<DocumentRange> document(int64_t document) const;

  // TokenDataset: every sequence in order.
  int64_t size() const override { return num_tokens_; }
  absl::Status Read(int64_t offset, int length, int32_t* out) const override;
  int64_t vocab_upper_bound() const override { return DtypeTokenUpperBound(dtype_); }
  std::string source() const override { return prefix_; }

 private:
  IndexedDataset(std::string prefix, std::unique_ptr<MappedFile> index,
                 std::unique_ptr<MappedFile> data)
      : prefix_(std::move(prefix)), index_(std::move(index)), data_(std::move(data)) {}

  // Parses and checks the header and arrays; fills the fields below.
  absl::Status Validate();

  int32_t LengthAt(int64_t index) const;
  int64_t PointerAt(int64_t index) const;
  int64_t DocumentIndexAt(int64_t index) const;

  std::string prefix_;
  std::unique_ptr<MappedFile> index_;
  std::unique_ptr<MappedFile> data_;
  IndexedDtype dtype_ = IndexedDtype::kUint8;
  int item_size_ = 1;
  int64_t num_sequences_ = 0;
  int64_t num_document_indices_ = 0;
  int64_t num_tokens_ = 0;
  // Byte offsets of the three arrays inside the .idx.
  int64_t lengths_at_ = 0;
  int64_t pointers_at_ = 0;
  int64_t documents_at_ = 0;
};

}  // namespace mtrain

#endif  // MTRAIN_DATA_INDEXED_DATASET_H_
