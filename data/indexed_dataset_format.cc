#include "data/indexed_dataset_format.h"

#include "absl/strings/str_cat.h"

namespace mtrain {

bool IsValidDtypeCode(uint8_t code) { return code >= 1 && code <= 8; }

int DtypeSize(IndexedDtype dtype) {
  switch (dtype) {
    case IndexedDtype::kUint8:
    case IndexedDtype::kInt8:
      return 1;
    case IndexedDtype::kInt16:
    case IndexedDtype::kUint16:
      return 2;
    case IndexedDtype::kInt32:
    case IndexedDtype::kFloat32:
      return 4;
    case IndexedDtype::kInt64:
    case IndexedDtype::kFloat64:
      return 8;
  }
  return 0;
}

absl::string_view DtypeName(IndexedDtype dtype) {
  switch (dtype) {
    case IndexedDtype::kUint8:
      return "uint8";
    case IndexedDtype::kInt8:
      return "int8";
    case IndexedDtype::kInt16:
      return "int16";
    case IndexedDtype::kInt32:
      return "int32";
    case IndexedDtype::kInt64:
      return "int64";
    case IndexedDtype::kFloat64:
      return "float64";
    case IndexedDtype::kFloat32:
      return "float32";
    case IndexedDtype::kUint16:
      return "uint16";
  }
  return "unknown";
}

int64_t DtypeTokenUpperBound(IndexedDtype dtype) {
  switch (dtype) {
    case IndexedDtype::kUint8:
      return int64_t{1} << 8;
    case IndexedDtype::kUint16:
      return int64_t{1} << 16;
    default:
      return int64_t{1} << 31;
  }
}

std::string IndexFilePath(absl::string_view prefix) { return absl::StrCat(prefix, ".idx"); }
std::string DataFilePath(absl::string_view prefix) { return absl::StrCat(prefix, ".bin"); }

}  // namespace mtrain
