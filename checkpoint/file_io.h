// The few POSIX file operations checkpoints need, with absl::Status errors that name the
// path: a writer that makes a file appear complete or not at all, positional reads, and
// directory syncs (the part of durability that std::ofstream cannot express).
//
//   ASSIGN_OR_RETURN(AtomicFileWriter writer, AtomicFileWriter::Create(dir + "/MANIFEST"));
//   RETURN_IF_ERROR(writer.Append(bytes));
//   RETURN_IF_ERROR(writer.Commit());  // fsync, rename over the final name, fsync the dir
//
// Objects are movable, not copyable, and not thread-safe.
#ifndef MTRAIN_CHECKPOINT_FILE_IO_H_
#define MTRAIN_CHECKPOINT_FILE_IO_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace mtrain {

// Writes `path` through a temporary file "<path>.tmp" so that, even after a crash, `path`
// is either absent (or its previous version) or complete. A writer destroyed without
// Commit removes the temporary file.
class AtomicFileWriter {
 public:
  // INTERNAL if the temporary file cannot be created (e.g. the directory is missing).
  static absl::StatusOr<AtomicFileWriter> Create(std::string path);

  AtomicFileWriter(AtomicFileWriter&& other) noexcept;
  AtomicFileWriter& operator=(AtomicFileWriter&& other) noexcept;
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;
  ~AtomicFileWriter();

  absl::Status Append(const void* data, size_t size);
  absl::Status Append(absl::string_view data) { return Append(data.data(), data.size()); }

  // fsync the data, rename the temporary file over `path`, then fsync the directory so the
  // new name itself survives a crash. INTERNAL naming the path on failure.
  absl::Status Commit();

  const std::string& path() const { return path_; }

 private:
  AtomicFileWriter(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  void Abandon();

  std::string path_;
  int fd_ = -1;
};

// Read-only access at arbitrary offsets (pread), for loading parts of shard files.
class RandomAccessFile {
 public:
  // NOT_FOUND if `path` does not exist; INVALID_ARGUMENT naming the path if it is not a
  // regular file (a device such as /dev/zero, a FIFO, a directory); INTERNAL for other
  // open errors. Never blocks (a FIFO is refused, not waited on).
  static absl::StatusOr<RandomAccessFile> Open(std::string path);

  RandomAccessFile(RandomAccessFile&& other) noexcept;
  RandomAccessFile& operator=(RandomAccessFile&& other) noexcept;
  RandomAccessFile(const RandomAccessFile&) = delete;
  RandomAccessFile& operator=(const RandomAccessFile&) = delete;
  ~RandomAccessFile();

  // Bytes in the file now.
  absl::StatusOr<uint64_t> Size() const;

  // Reads exactly `size` bytes at `offset` into `out`. DATA_LOSS naming the path if the
  // file ends first; INTERNAL for I/O errors.
  absl::Status Read(uint64_t offset, size_t size, void* out) const;

  const std::string& path() const { return path_; }

 private:
  RandomAccessFile(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}

  std::string path_;
  int fd_ = -1;
};

// fsync a directory, making the creation, renaming and removal of its entries durable.
absl::Status SyncDirectory(const std::string& dir);

}  // namespace mtrain

#endif  // MTRAIN_CHECKPOINT_FILE_IO_H_
