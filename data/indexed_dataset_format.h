// Constants of Megatron-LM's indexed dataset format ("MMIDIDX", version 1), shared by the
// reader (indexed_dataset.h) and the writer (indexed_dataset_writer.h).
//
// A dataset is two files named by a common prefix:
//   <prefix>.idx  9 bytes  magic "MMIDIDX\0\0"
//                 uint64   version (1)
//                 uint8    dtype code (IndexedDtype)
//                 uint64   sequence count N
//                 uint64   document count D
//                 int32    sequence lengths[N]       (tokens)
//                 int64    sequence pointers[N]      (byte offsets into .bin)
//                 int64    document indices[D]       (0, then the sequence index after each
//                                                     document's last sequence)
//   <prefix>.bin  the tokens of all sequences back to back, each stored as `dtype`.
// All integers are little-endian. The arrays are not aligned (the header is 34 bytes), so
// readers must load them bytewise.
#ifndef MTRAIN_DATA_INDEXED_DATASET_FORMAT_H_
#define MTRAIN_DATA_INDEXED_DATASET_FORMAT_H_

#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"

namespace mtrain {

// The code of each element type as stored in the header (Megatron's DType enum).
enum class IndexedDtype : uint8_t {
  kUint8 = 1,
  kInt8 = 2,
  kInt16 = 3,
  kInt32 = 4,
  kInt64 = 5,
  kFloat64 = 6,
  kFloat32 = 7,
  kUint16 = 8,
};

inline constexpr absl::string_view kIndexMagic("MMIDIDX\0\0", 9);
inline constexpr uint64_t kIndexVersion = 1;
// magic + version + dtype + sequence count + document count.
inline constexpr int64_t kIndexHeaderBytes = 9 + 8 + 1 + 8 + 8;

// Whether `code` names one of the eight dtypes.
bool IsValidDtypeCode(uint8_t code);

// Bytes per element.
int DtypeSize(IndexedDtype dtype);

// NumPy's name of the type ("uint16", "float32", ...), for messages.
absl::string_view DtypeName(IndexedDtype dtype);

// A bound B such that every id the type can hold is in [0, B): 256 for uint8, 65536 for
// uint16. Signed and wider types give no such guarantee (they can hold negative ids, or any
// int32) and return 2^31, which no vocabulary size reaches.
int64_t DtypeTokenUpperBound(IndexedDtype dtype);

// "<prefix>.idx" and "<prefix>.bin".
std::string IndexFilePath(absl::string_view prefix);
std::string DataFilePath(absl::string_view prefix);

}  // namespace mtrain

#endif  // MTRAIN_DATA_INDEXED_DATASET_FORMAT_H_
