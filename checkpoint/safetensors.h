// Reading and writing the safetensors format (HuggingFace): an 8-byte little-endian header
// length, a JSON header mapping each tensor name to {dtype, shape, data_offsets} (plus an
// optional "__metadata__" map of strings), then the raw little-endian tensor bytes.
// Used for reference data exchanged with PyTorch and for exporting checkpoints. The header
// is written by common/json_writer.h, compact and minimally escaped: the bytes this
// project's files have always had (files are hashed; safetensors_test pins them).
#ifndef MTRAIN_CHECKPOINT_SAFETENSORS_H_
#define MTRAIN_CHECKPOINT_SAFETENSORS_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "checkpoint/file_io.h"

namespace mtrain {

struct SafetensorsTensor {
  std::string dtype;  // "F32", "F64", "I32", "I64"
  std::vector<int64_t> shape;
  std::string bytes;  // raw little-endian data
  // Set instead of `bytes` by SafetensorsReader::ReadFloat32 for an F32 tensor: its values.
  std::vector<float> f32;

  int64_t num_elements() const;
};

struct SafetensorsFile {
  std::map<std::string, SafetensorsTensor> tensors;
  std::map<std::string, std::string> metadata;
};

SafetensorsTensor MakeF32Tensor(std::vector<int64_t> shape, const float* data);
SafetensorsTensor MakeI32Tensor(std::vector<int64_t> shape, const int32_t* data);

// Element values as float/int32; INVALID_ARGUMENT on a dtype mismatch (F64 converts to
// float).
absl::StatusOr<std::vector<float>> TensorAsFloats(const SafetensorsTensor& tensor);
absl::StatusOr<std::vector<int32_t>> TensorAsInt32(const SafetensorsTensor& tensor);

// Writes atomically (temporary file, then rename). Bytes of names and metadata that are
// not UTF-8 are written as U+FFFD, since the header must be UTF-8 JSON to be read back.
absl::Status WriteSafetensors(const std::string& path, const SafetensorsFile& file);

// One tensor as the header describes it: where its bytes lie in the data section.
struct SafetensorsEntry {
  std::string dtype;
  std::vector<int64_t> shape;
  uint64_t begin = 0;  // byte offsets into the data section
  uint64_t end = 0;
};

// A safetensors file whose header is read and checked, its tensors read one at a time on
// demand: an importer holds one tensor's bytes at a time instead of the whole file.
//
//   ASSIGN_OR_RETURN(SafetensorsReader reader, SafetensorsReader::Open(path));
//   for (const auto& [name, entry] : reader.entries()) {
//     ASSIGN_OR_RETURN(SafetensorsTensor tensor, reader.Read(name));
//   }
class SafetensorsReader {
 public:
  // Checks the header (length at most 100 MiB and inside the file, JSON, known dtypes,
  // shapes and data offsets whole numbers whose bytes lie inside the file) before any
  // tensor data is read. DATA_LOSS for a malformed or truncated file, naming the file and
  // what is wrong; INVALID_ARGUMENT naming the file if it is not a regular file
  // (/dev/zero, a FIFO, a directory); NOT_FOUND if absent.
  static absl::StatusOr<SafetensorsReader> Open(const std::string& path);

  const std::map<std::string, SafetensorsEntry>& entries() const { return entries_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const std::string& path() const { return file_.path(); }

  // The tensor's bytes, read now. NOT_FOUND naming the tensor and the file if the header
  // has no such name; DATA_LOSS if the file was truncated since Open.
  absl::StatusOr<SafetensorsTensor> Read(const std::string& name) const;
  // As Read, but an F32 tensor's values go straight into `f32` (`bytes` stays empty): the
  // reader holds them once, not as bytes and then floats. Other dtypes come as bytes.
  absl::StatusOr<SafetensorsTensor> ReadFloat32(const std::string& name) const;

 private:
  SafetensorsReader(RandomAccessFile file, uint64_t data_start)
      : file_(std::move(file)), data_start_(data_start) {}

  RandomAccessFile file_;
  uint64_t data_start_;
  std::map<std::string, SafetensorsEntry> entries_;
  std::map<std::string, std::string> metadata_;
};

// SafetensorsReader::Open, then every tensor read: allocates at most the file's size.
absl::StatusOr<SafetensorsFile> ReadSafetensors(const std::string& path);

}  // namespace mtrain

#endif  // MTRAIN_CHECKPOINT_SAFETENSORS_H_
