// The header of a checkpoint shard file ("rank-00005.bin"), shared by the writer and the
// reader in checkpoint.cc. docs/CHECKPOINT_FORMAT.md is the full description.
//
//   offset  size  field
//        0     8  magic "MTSHARD\0"
//        8     4  uint32 format version (1)
//       12     4  uint32 global rank that wrote the file
//       16     8  int64  step (optimizer steps completed)
//       24     8  uint64 payload bytes (file size - 64)
//       32    32  reserved, zero
//       64     -  payload: raw little-endian f32 tensor data, located by the manifest
// Integers are little-endian. The payload starts 64-byte aligned so a reader may map it
// and use it as floats in place.
#ifndef MTRAIN_CHECKPOINT_CHECKPOINT_SHARD_FILE_H_
#define MTRAIN_CHECKPOINT_CHECKPOINT_SHARD_FILE_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace mtrain {

inline constexpr absl::string_view kShardMagic("MTSHARD\0", 8);
inline constexpr int64_t kShardHeaderBytes = 64;

struct ShardFileHeader {
  uint32_t format_version = 0;
  uint32_t global_rank = 0;
  int64_t step = 0;
  uint64_t payload_bytes = 0;
};

// The 64 header bytes.
std::string EncodeShardHeader(const ShardFileHeader& header);

// DATA_LOSS naming `file` if `bytes` is not 64 bytes starting with the magic. The version
// is returned as stored: the caller decides which versions it accepts.
absl::StatusOr<ShardFileHeader> DecodeShardHeader(absl::string_view file, absl::string_view bytes);

// Little-endian integers of `bytes` bytes (the byte order of every header field here and
// of the manifest envelope), appended to / read from byte strings.
void PutLittleEndian(uint64_t value, int bytes, std::string* out);
uint64_t GetLittleEndian(absl::string_view bytes, size_t at, int size);

}  // namespace mtrain

#endif  // MTRAIN_CHECKPOINT_CHECKPOINT_SHARD_FILE_H_
