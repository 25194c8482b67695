#include "data/indexed_dataset_writer.h"

#include <cerrno>
#include <limits>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace mtrain {
namespace {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "MMIDIDX writing assumes little-endian");

template <typename T>
void Append(std::string* out, T value) {
  out->append(reinterpret_cast<const char*>(&value), sizeof(T));
}

// Whether `id` survives a round trip through T. Floating-point types compare in double,
// because casting an out-of-range float back to int32 is undefined.
template <typename T>
bool Fits(int32_t id) {
  if constexpr (std::is_floating_point_v<T>) {
    return static_cast<double>(static_cast<T>(id)) == static_cast<double>(id);
  } else {
    return static_cast<int32_t>(static_cast<T>(id)) == id;
  }
}

// Appends `tokens` as T to `out`; the index of the first id T cannot hold, or -1.
template <typename T>
int64_t Encode(absl::Span<const int32_t> tokens, std::string* out) {
  out->reserve(out->size() + tokens.size() * sizeof(T));
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (!Fits<T>(tokens[i])) return static_cast<int64_t>(i);
    Append(out, static_cast<T>(tokens[i]));
  }
  return -1;
}

int64_t EncodeAs(IndexedDtype dtype, absl::Span<const int32_t> tokens, std::string* out) {
  switch (dtype) {
    case IndexedDtype::kUint8:
      return Encode<uint8_t>(tokens, out);
    case IndexedDtype::kInt8:
      return Encode<int8_t>(tokens, out);
    case IndexedDtype::kInt16:
      return Encode<int16_t>(tokens, out);
    case IndexedDtype::kUint16:
      return Encode<uint16_t>(tokens, out);
    case IndexedDtype::kInt32:
      return Encode<int32_t>(tokens, out);
    case IndexedDtype::kInt64:
      return Encode<int64_t>(tokens, out);
    case IndexedDtype::kFloat64:
      return Encode<double>(tokens, out);
    case IndexedDtype::kFloat32:
      return Encode<float>(tokens, out);
  }
  return 0;
}

absl::Status WriteFile(const std::string& path, const std::string& bytes) {
  std::FILE* file = std::fopen(path.c_str(), "wb");
  if (file == nullptr) return absl::ErrnoToStatus(errno, absl::StrCat("cannot create ", path));
  const bool written = std::fwrite(bytes.data(), 1, bytes.size(), file) == bytes.size();
  const int write_error = errno;
  if (std::fclose(file) != 0 || !written) {
    return absl::ErrnoToStatus(written ? errno : write_error, absl::StrCat("cannot write ", path));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<IndexedDatasetWriter>> IndexedDatasetWriter::Create(
    const std::string& prefix, IndexedDtype dtype) {
  if (!IsValidDtypeCode(static_cast<uint8_t>(dtype))) {
    return absl::InvalidArgumentError(
        absl::StrCat(prefix, ": unknown dtype code ", static_cast<int>(dtype)));
  }
  const std::string bin_path = DataFilePath(prefix) + ".tmp";
  std::FILE* bin = std::fopen(bin_path.c_str(), "wb");
  if (bin == nullptr) return absl::ErrnoToStatus(errno, absl::StrCat("cannot create ", bin_path));
  return std::unique_ptr<IndexedDatasetWriter>(new IndexedDatasetWriter(prefix, dtype, bin));
}

IndexedDatasetWriter::~IndexedDatasetWriter() {
  if (bin_ != nullptr) std::fclose(bin_);
  if (!finished_) {
    std::remove(TempPath(DataFilePath(prefix_)).c_str());
    std::remove(TempPath(IndexFilePath(prefix_)).c_str());
  }
}

absl::Status IndexedDatasetWriter::AddSequence(absl::Span<const int32_t> tokens) {
  if (bin_ == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(prefix_, ": writer already finished"));
  }
  if (tokens.size() > static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
    return absl::InvalidArgumentError(
        absl::StrCat(prefix_, ": sequence ", lengths_.size(), " has ", tokens.size(),
                     " tokens; MMIDIDX lengths are int32 [rule: length < 2^31]"));
  }
  std::string bytes;
  const int64_t bad = EncodeAs(dtype_, tokens, &bytes);
  if (bad >= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(prefix_, ": sequence ", lengths_.size(), ", position ", bad, ": token id ",
                     tokens[bad], " does not fit the dataset's dtype ", DtypeName(dtype_)));
  }
  if (std::fwrite(bytes.data(), 1, bytes.size(), bin_) != bytes.size()) {
    return absl::ErrnoToStatus(errno,
                               absl::StrCat("cannot write ", TempPath(DataFilePath(prefix_))));
  }
  lengths_.push_back(static_cast<int32_t>(tokens.size()));
  num_tokens_ += static_cast<int64_t>(tokens.size());
  return absl::OkStatus();
}

void IndexedDatasetWriter::EndDocument() {
  document_indices_.push_back(static_cast<int64_t>(lengths_.size()));
}

absl::Status IndexedDatasetWriter::AddDocument(absl::Span<const int32_t> tokens) {
  RETURN_IF_ERROR(AddSequence(tokens));
  EndDocument();
  return absl::OkStatus();
}

absl::Status IndexedDatasetWriter::Finish() {
  if (bin_ == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(prefix_, ": writer already finished"));
  }
  if (document_indices_.back() != static_cast<int64_t>(lengths_.size())) EndDocument();
  const std::string bin_path = DataFilePath(prefix_);
  const std::string idx_path = IndexFilePath(prefix_);
  const int close_result = std::fclose(bin_);
  bin_ = nullptr;
  if (close_result != 0) {
    return absl::ErrnoToStatus(errno, absl::StrCat("cannot write ", TempPath(bin_path)));
  }

  const int item_size = DtypeSize(dtype_);
  std::string index(kIndexMagic);
  Append<uint64_t>(&index, kIndexVersion);
  Append<uint8_t>(&index, static_cast<uint8_t>(dtype_));
  Append<uint64_t>(&index, lengths_.size());
  Append<uint64_t>(&index, document_indices_.size());
  for (int32_t length : lengths_) Append<int32_t>(&index, length);
  int64_t pointer = 0;
  for (int32_t length : lengths_) {
    Append<int64_t>(&index, pointer);
    pointer += int64_t{length} * item_size;
  }
  for (int64_t document_index : document_indices_) Append<int64_t>(&index, document_index);
  RETURN_IF_ERROR(WriteFile(TempPath(idx_path), index));

  // The .bin first: a reader that finds the new .idx also finds its .bin.
  for (const std::string& path : {bin_path, idx_path}) {
    if (std::rename(TempPath(path).c_str(), path.c_str()) != 0) {
      return absl::ErrnoToStatus(errno,
                                 absl::StrCat("cannot rename ", TempPath(path), " to ", path));
    }
  }
  finished_ = true;
  return absl::OkStatus();
}

IndexedDtype ChooseTokenDtype(const std::vector<std::vector<int32_t>>& documents) {
  for (const std::vector<int32_t>& document : documents) {
    for (int32_t id : document) {
      if (id < 0 || id >= 65536) return IndexedDtype::kInt32;
    }
  }
  return IndexedDtype::kUint16;
}

absl::Status WriteIndexedDataset(const std::string& prefix,
                                 const std::vector<std::vector<int32_t>>& documents) {
  ASSIGN_OR_RETURN(std::unique_ptr<IndexedDatasetWriter> writer,
                   IndexedDatasetWriter::Create(prefix, ChooseTokenDtype(documents)));
  for (const std::vector<int32_t>& document : documents) {
    RETURN_IF_ERROR(writer->AddDocument(document));
  }
  return writer->Finish();
}

}  // namespace mtrain
