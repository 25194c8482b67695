#include "data/indexed_dataset.h"

#include <cmath>
#include <cstring>
#include <limits>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace mtrain {
namespace {

// The format is little-endian and the reader copies values straight out of the maps.
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "MMIDIDX reading assumes little-endian");

// The arrays in the .idx are unaligned, so values are copied out rather than dereferenced.
template <typename T>
T Load(const char* at) {
  T value;
  std::memcpy(&value, at, sizeof(T));
  return value;
}

absl::Status NotThisFormat(const std::string& path, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(path, ": not a readable MMIDIDX index: ", what));
}

absl::Status Corrupt(const std::string& path, absl::string_view what) {
  return absl::DataLossError(absl::StrCat(path, ": corrupt MMIDIDX dataset: ", what));
}

// Integer element types convert exactly (all but int64 always fit in int32).
template <typename T>
absl::Status ConvertIntegers(const char* src, int length, int32_t* out) {
  for (int i = 0; i < length; ++i) out[i] = static_cast<int32_t>(Load<T>(src + i * sizeof(T)));
  return absl::OkStatus();
}

// int64 and floating-point elements must hold an integral value in int32's range. The
// comparison is done in double, which holds every int32 exactly and rejects NaN.
template <typename T>
absl::Status ConvertChecked(const char* src, int length, int32_t* out, const std::string& path,
                            int64_t first_offset) {
  for (int i = 0; i < length; ++i) {
    const double value = static_cast<double>(Load<T>(src + i * sizeof(T)));
    const bool in_range = value >= std::numeric_limits<int32_t>::min() &&
                          value <= std::numeric_limits<int32_t>::max();
    if (!in_range || value != std::floor(value)) {
      return absl::DataLossError(absl::StrCat(path, ": the value at token offset ",
                                              first_offset + i, " (", value,
                                              ") is not an int32 token id"));
    }
    out[i] = static_cast<int32_t>(value);
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<IndexedDataset>> IndexedDataset::Open(const std::string& prefix) {
  ASSIGN_OR_RETURN(std::unique_ptr<MappedFile> index, MappedFile::Open(IndexFilePath(prefix)));
  ASSIGN_OR_RETURN(std::unique_ptr<MappedFile> data, MappedFile::Open(DataFilePath(prefix)));
  std::unique_ptr<IndexedDataset> dataset(
      new IndexedDataset(prefix, std::move(index), std::move(data)));
  RETURN_IF_ERROR(dataset->Validate());
  return dataset;
}

absl::Status IndexedDataset::Validate() {
  const std::string& idx_path = index_->path();
  const std::string& bin_path = data_->path();
  const char* idx = index_->bytes().data();
  const int64_t idx_size = index_->size();

  // The magic first: a short file that is not an index at all should be called that, not
  // "truncated".
  const absl::string_view magic = index_->bytes().substr(0, kIndexMagic.size());
  if (magic != kIndexMagic.substr(0, magic.size())) {
    return NotThisFormat(idx_path, absl::StrCat("bad magic \"", absl::CHexEscape(magic),
                                                "\", expected \"MMIDIDX\\000\\000\""));
  }
  if (idx_size < kIndexHeaderBytes) {
    return Corrupt(idx_path, absl::StrCat("truncated header: the file has ", idx_size,
                                          " bytes, the header alone needs ", kIndexHeaderBytes));
  }
  const uint64_t version = Load<uint64_t>(idx + 9);
  if (version != kIndexVersion) {
    return NotThisFormat(idx_path,
                         absl::StrCat("version ", version, " is not supported (only version 1)"));
  }
  const uint8_t dtype_code = Load<uint8_t>(idx + 17);
  if (!IsValidDtypeCode(dtype_code)) {
    return NotThisFormat(
        idx_path, absl::StrCat("unknown dtype code ", dtype_code,
                               " (known: 1 uint8, 2 int8, 3 int16, 4 int32, 5 int64, 6 float64, "
                               "7 float32, 8 uint16)"));
  }
  dtype_ = static_cast<IndexedDtype>(dtype_code);
  item_size_ = DtypeSize(dtype_);
  const uint64_t sequence_count = Load<uint64_t>(idx + 18);
  const uint64_t document_count = Load<uint64_t>(idx + 26);

  // In 128 bits the expected size cannot overflow, whatever the counts say.
  using uint128 = unsigned __int128;
  const uint128 expected_size = static_cast<uint128>(kIndexHeaderBytes) +
                                static_cast<uint128>(sequence_count) * (4 + 8) +
                                static_cast<uint128>(document_count) * 8;
  if (expected_size != static_cast<uint128>(idx_size)) {
    const std::string counts = absl::StrCat("its header (", sequence_count, " sequences, ",
                                            document_count, " document indices) needs ");
    if (expected_size > static_cast<uint128>(idx_size)) {
      const std::string needed = expected_size > std::numeric_limits<uint64_t>::max()
                                     ? std::string("more than 2^64")
                                     : absl::StrCat(static_cast<uint64_t>(expected_size));
      return Corrupt(idx_path, absl::StrCat("truncated index: the file has ", idx_size,
                                            " bytes but ", counts, needed));
    }
    return Corrupt(idx_path, absl::StrCat("trailing data: the file has ", idx_size, " bytes but ",
                                          counts, static_cast<uint64_t>(expected_size),
                                          " (multimodal indexes are not supported)"));
  }
  // Both counts are now bounded by the file size, so they fit in int64.
  num_sequences_ = static_cast<int64_t>(sequence_count);
  num_document_indices_ = static_cast<int64_t>(document_count);
  lengths_at_ = kIndexHeaderBytes;
  pointers_at_ = lengths_at_ + 4 * num_sequences_;
  documents_at_ = pointers_at_ + 8 * num_sequences_;

  // Every sequence must lie inside the .bin, right after the previous one: the layout
  // Megatron writes, and what lets the concatenated view address the .bin directly.
  const int64_t bin_size = data_->size();
  int64_t expected_pointer = 0;  // where sequence i must start; never exceeds bin_size
  for (int64_t i = 0; i < num_sequences_; ++i) {
    const int32_t length = LengthAt(i);
    const int64_t pointer = PointerAt(i);
    if (length < 0) {
      return Corrupt(idx_path,
                     absl::StrCat("sequence ", i, " has a negative length (", length, ")"));
    }
    const int64_t bytes = int64_t{length} * item_size_;
    if (pointer != expected_pointer) {
      if (pointer < 0 || pointer > bin_size || bytes > bin_size - pointer) {
        return Corrupt(idx_path,
                       absl::StrCat("pointer out of range: sequence ", i, " starts at byte ",
                                    pointer, " and has ", bytes, " bytes, outside ", bin_path, " (",
                                    bin_size, " bytes)"));
      }
      return Corrupt(
          idx_path,
          absl::StrCat(pointer < expected_pointer ? "pointers not monotonic" : "gap in data",
                       ": sequence ", i, " starts at byte ", pointer,
                       " but the previous sequence ends at byte ", expected_pointer,
                       " (sequences must be stored back to back, in order)"));
    }
    if (bytes > bin_size - pointer) {
      // Either the .bin lost its end or this length is wrong; the next pointer tells which.
      if (i + 1 < num_sequences_ && PointerAt(i + 1) != pointer + bytes) {
        return Corrupt(idx_path,
                       absl::StrCat("bad length: sequence ", i, " has length ", length, " (", bytes,
                                    " bytes from byte ", pointer, "), which runs past the end of ",
                                    bin_path, " (", bin_size,
                                    " bytes) and disagrees with the next "
                                    "sequence's pointer ",
                                    PointerAt(i + 1)));
      }
      return Corrupt(bin_path,
                     absl::StrCat("truncated data file: sequence ", i, " ends at byte ",
                                  pointer + bytes, " but the file has ", bin_size, " bytes"));
    }
    expected_pointer += bytes;
  }
  if (expected_pointer != bin_size) {
    return Corrupt(bin_path, absl::StrCat("size mismatch: the file has ", bin_size, " bytes but ",
                                          idx_path, " describes ", expected_pointer,
                                          " (the .idx and .bin do not belong together)"));
  }
  num_tokens_ = bin_size / item_size_;

  // Megatron's reader asserts the same: documents partition the sequences, so the indices
  // run from 0 to the sequence count without decreasing.
  const std::string document_rule = absl::StrCat(
      "document indices must start at 0, never decrease and end at the sequence count (",
      num_sequences_, ")");
  if (num_document_indices_ == 0) {
    return Corrupt(idx_path, absl::StrCat("no document indices; ", document_rule));
  }
  int64_t previous = 0;
  for (int64_t j = 0; j < num_document_indices_; ++j) {
    const int64_t value = DocumentIndexAt(j);
    const bool last = j + 1 == num_document_indices_;
    if (value < previous || value > num_sequences_ || (j == 0 && value != 0) ||
        (last && value != num_sequences_)) {
      return Corrupt(idx_path,
                     absl::StrCat("document index ", j, " is ", value, "; ", document_rule));
    }
    previous = value;
  }
  return absl::OkStatus();
}

int32_t IndexedDataset::LengthAt(int64_t index) const {
  return Load<int32_t>(index_->bytes().data() + lengths_at_ + 4 * index);
}

int64_t IndexedDataset::PointerAt(int64_t index) const {
  return Load<int64_t>(index_->bytes().data() + pointers_at_ + 8 * index);
}

int64_t IndexedDataset::DocumentIndexAt(int64_t index) const {
  return Load<int64_t>(index_->bytes().data() + documents_at_ + 8 * index);
}

absl::StatusOr<SequenceRange> IndexedDataset::sequence(int64_t index) const {
  if (index < 0 || index >= num_sequences_) {
    return absl::OutOfRangeError(absl::StrCat(prefix_, ": sequence ", index, " does not exist (",
                                              num_sequences_, " sequences)"));
  }
  return SequenceRange{PointerAt(index) / item_size_, LengthAt(index)};
}

absl::StatusOr<std::vector<int32_t>> IndexedDataset::Sequence(int64_t index) const {
  ASSIGN_OR_RETURN(const SequenceRange range, sequence(index));
  std::vector<int32_t> tokens(range.length);
  RETURN_IF_ERROR(Read(range.offset, range.length, tokens.data()));
  return tokens;
}

absl::StatusOr<DocumentRange> IndexedDataset::document(int64_t document) const {
  if (document < 0 || document >= num_documents()) {
    return absl::OutOfRangeError(absl::StrCat(prefix_, ": document ", document, " does not exist (",
                                              num_documents(), " documents)"));
  }
  return DocumentRange{DocumentIndexAt(document), DocumentIndexAt(document + 1)};
}

absl::Status IndexedDataset::Read(int64_t offset, int length, int32_t* out) const {
  RETURN_IF_ERROR(CheckReadRange(*this, offset, length));
  const char* src = data_->bytes().data() + offset * item_size_;
  switch (dtype_) {
    case IndexedDtype::kUint8:
      return ConvertIntegers<uint8_t>(src, length, out);
    case IndexedDtype::kInt8:
      return ConvertIntegers<int8_t>(src, length, out);
    case IndexedDtype::kInt16:
      return ConvertIntegers<int16_t>(src, length, out);
    case IndexedDtype::kUint16:
      return ConvertIntegers<uint16_t>(src, length, out);
    case IndexedDtype::kInt32:
      return ConvertIntegers<int32_t>(src, length, out);
    case IndexedDtype::kInt64:
      return ConvertChecked<int64_t>(src, length, out, data_->path(), offset);
    case IndexedDtype::kFloat64:
      return ConvertChecked<double>(src, length, out, data_->path(), offset);
    case IndexedDtype::kFloat32:
      return ConvertChecked<float>(src, length, out, data_->path(), offset);
  }
  return absl::InternalError("unreachable dtype");
}

}  // namespace mtrain
