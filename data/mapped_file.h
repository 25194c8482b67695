// A whole file mapped read-only into memory, unmapped when the object is destroyed.
// The indexed dataset reads its .idx and .bin through this, so a dataset larger than RAM
// costs only address space and the page cache shares it between ranks on one host.
//
//   ASSIGN_OR_RETURN(std::unique_ptr<MappedFile> file, MappedFile::Open(path));
//   absl::string_view bytes = file->bytes();
#ifndef MTRAIN_DATA_MAPPED_FILE_H_
#define MTRAIN_DATA_MAPPED_FILE_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace mtrain {

class MappedFile {
 public:
  // NOT_FOUND if the file does not exist, PERMISSION_DENIED if it cannot be read,
  // INVALID_ARGUMENT if it is not a regular file; the message names the path. An empty
  // file is valid and maps to an empty view (mmap cannot map zero bytes).
  static absl::StatusOr<std::unique_ptr<MappedFile>> Open(const std::string& path);

  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const std::string& path() const { return path_; }
  int64_t size() const { return static_cast<int64_t>(size_); }
  // The file's contents; valid as long as this object lives.
  absl::string_view bytes() const { return absl::string_view(data_, size_); }

 private:
  MappedFile(std::string path, const char* data, size_t size)
      : path_(std::move(path)), data_(data), size_(size) {}

  std::string path_;
  const char* data_;  // nullptr for an empty file
  size_t size_;
};

}  // namespace mtrain

#endif  // MTRAIN_DATA_MAPPED_FILE_H_
