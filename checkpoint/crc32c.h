// CRC-32C (Castagnoli, polynomial 0x1EDC6F41, reflected 0x82F63B78), the checksum of the
// checkpoint format (docs/CHECKPOINT_FORMAT.md), as used by iSCSI (RFC 3720), ext4 and
// LevelDB. Chosen over CRC-32 (zlib) for its better error detection on long messages.
//
// Implemented by hand: the Abseil release here (20220623) predates absl/crc, and no other
// library this workspace links provides CRC-32C. The implementation is table-driven
// ("slicing-by-8": eight 256-entry tables, 8 bytes per step), about 1-2 GB/s on one core,
// which keeps checksumming a small part of a checkpoint's cost next to the disk.
//
//   uint32_t crc = Crc32c(data, size);
//   // or incrementally, over consecutive pieces:
//   uint32_t crc = 0;
//   crc = ExtendCrc32c(crc, header, header_size);
//   crc = ExtendCrc32c(crc, body, body_size);
//
// Thread-safe (pure functions over constant tables).
#ifndef MTRAIN_CHECKPOINT_CRC32C_H_
#define MTRAIN_CHECKPOINT_CRC32C_H_

#include <cstddef>
#include <cstdint>

namespace mtrain {

// The CRC-32C of `crc`'s message followed by the `size` bytes at `data`; `crc` is the
// value returned for the preceding bytes (0 for none). ExtendCrc32c(0, "123456789", 9) is
// the standard check value 0xE3069283.
uint32_t ExtendCrc32c(uint32_t crc, const void* data, size_t size);

// The CRC-32C of `size` bytes.
inline uint32_t Crc32c(const void* data, size_t size) { return ExtendCrc32c(0, data, size); }

}  // namespace mtrain

#endif  // MTRAIN_CHECKPOINT_CRC32C_H_
