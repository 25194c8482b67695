#include "checkpoint/checkpoint_shard_file.h"

#include "absl/strings/str_cat.h"

namespace mtrain {

void PutLittleEndian(uint64_t value, int bytes, std::string* out) {
  for (int i = 0; i < bytes; ++i) out->push_back(static_cast<char>((value >> (8 * i)) & 0xFF));
}

uint64_t GetLittleEndian(absl::string_view bytes, size_t at, int size) {
  uint64_t value = 0;
  for (int i = 0; i < size; ++i) {
    value |= uint64_t{static_cast<unsigned char>(bytes[at + i])} << (8 * i);
  }
  return value;
}

std::string EncodeShardHeader(const ShardFileHeader& header) {
  std::string out(kShardMagic);
  PutLittleEndian(header.format_version, 4, &out);
  PutLittleEndian(header.global_rank, 4, &out);
  PutLittleEndian(static_cast<uint64_t>(header.step), 8, &out);
  PutLittleEndian(header.payload_bytes, 8, &out);
  out.resize(kShardHeaderBytes, '\0');
  return out;
}

absl::StatusOr<ShardFileHeader> DecodeShardHeader(absl::string_view file, absl::string_view bytes) {
  if (bytes.size() != static_cast<size_t>(kShardHeaderBytes)) {
    return absl::DataLossError(absl::StrCat("shard file ", file, ": header has ", bytes.size(),
                                            " bytes, expected ", kShardHeaderBytes));
  }
  if (bytes.substr(0, kShardMagic.size()) != kShardMagic) {
    return absl::DataLossError(
        absl::StrCat("shard file ", file, ": bad magic (not a checkpoint shard file)"));
  }
  ShardFileHeader header;
  header.format_version = static_cast<uint32_t>(GetLittleEndian(bytes, 8, 4));
  header.global_rank = static_cast<uint32_t>(GetLittleEndian(bytes, 12, 4));
  header.step = static_cast<int64_t>(GetLittleEndian(bytes, 16, 8));
  header.payload_bytes = GetLittleEndian(bytes, 24, 8);
  return header;
}

}  // namespace mtrain
