#include "checkpoint/file_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"

namespace mtrain {
namespace {

absl::Status ErrnoError(absl::string_view what, const std::string& path, int error) {
  return absl::InternalError(absl::StrCat(what, " ", path, ": ", std::strerror(error)));
}

std::string DirectoryOf(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

const char* FileKind(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

}  // namespace

absl::StatusOr<AtomicFileWriter> AtomicFileWriter::Create(std::string path) {
  const std::string temporary = path + ".tmp";
  // O_TRUNC: a temporary file left by an earlier crash is garbage, never a resume point.
  const int fd = open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoError("cannot create", temporary, errno);
  return AtomicFileWriter(std::move(path), fd);
}

AtomicFileWriter::AtomicFileWriter(AtomicFileWriter&& other) noexcept
    : path_(std::move(other.path_)), fd_(std::exchange(other.fd_, -1)) {}

AtomicFileWriter& AtomicFileWriter::operator=(AtomicFileWriter&& other) noexcept {
  if (this != &other) {
    Abandon();
    path_ = std::move(other.path_);
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

AtomicFileWriter::~AtomicFileWriter() { Abandon(); }

void AtomicFileWriter::Abandon() {
  if (fd_ < 0) return;
  close(fd_);
  fd_ = -1;
  std::remove((path_ + ".tmp").c_str());
}

absl::Status AtomicFileWriter::Append(const void* data, size_t size) {
  if (fd_ < 0) return absl::FailedPreconditionError(absl::StrCat(path_, " is already closed"));
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    // Linux writes at most ~2 GiB per call; loop for large tensors and short writes.
    const ssize_t n = write(fd_, p, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoError("cannot write", path_ + ".tmp", errno);
    }
    p += n;
    size -= static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

absl::Status AtomicFileWriter::Commit() {
  if (fd_ < 0) return absl::FailedPreconditionError(absl::StrCat(path_, " is already closed"));
  const std::string temporary = path_ + ".tmp";
  // Data first: a rename that reaches the disk before the data would expose a file of
  // zeros (or nothing) under the final name after a crash.
  if (fsync(fd_) != 0) {
    const int error = errno;
    Abandon();
    return ErrnoError("cannot fsync", temporary, error);
  }
  const int fd = std::exchange(fd_, -1);
  if (close(fd) != 0) {
    const int error = errno;
    std::remove(temporary.c_str());
    return ErrnoError("cannot close", temporary, error);
  }
  if (std::rename(temporary.c_str(), path_.c_str()) != 0) {
    const int error = errno;
    std::remove(temporary.c_str());
    return ErrnoError(absl::StrCat("cannot rename ", temporary, " to"), path_, error);
  }
  return SyncDirectory(DirectoryOf(path_));
}

absl::StatusOr<RandomAccessFile> RandomAccessFile::Open(std::string path) {
  // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer forever. It
  // has no effect on the regular files this class accepts.
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    if (errno == ENOENT) return absl::NotFoundError(absl::StrCat(path, " does not exist"));
    return ErrnoError("cannot open", path, errno);
  }
  struct stat info;
  if (fstat(fd, &info) != 0) {
    const int error = errno;
    close(fd);
    return ErrnoError("cannot stat", path, error);
  }
  if (!S_ISREG(info.st_mode)) {
    // A device (/dev/zero never ends), a FIFO or a directory has no size to check reads
    // against.
    close(fd);
    return absl::InvalidArgumentError(absl::StrCat(path, " is not a regular file (",
                                                   FileKind(info.st_mode),
                                                   "); only regular files are read"));
  }
  return RandomAccessFile(std::move(path), fd);
}

RandomAccessFile::RandomAccessFile(RandomAccessFile&& other) noexcept
    : path_(std::move(other.path_)), fd_(std::exchange(other.fd_, -1)) {}

RandomAccessFile& RandomAccessFile::operator=(RandomAccessFile&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) close(fd_);
    path_ = std::move(other.path_);
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

RandomAccessFile::~RandomAccessFile() {
  if (fd_ >= 0) close(fd_);
}

absl::StatusOr<uint64_t> RandomAccessFile::Size() const {
  struct stat info;
  if (fstat(fd_, &info) != 0) return ErrnoError("cannot stat", path_, errno);
  return static_cast<uint64_t>(info.st_size);
}

absl::Status RandomAccessFile::Read(uint64_t offset, size_t size, void* out) const {
  char* p = static_cast<char*>(out);
  while (size > 0) {
    const ssize_t n = pread(fd_, p, size, static_cast<off_t>(offset));
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoError("cannot read", path_, errno);
    }
    if (n == 0) {
      return absl::DataLossError(absl::StrCat(path_, " ends at byte ", offset, ", before the ",
                                              size, " more bytes expected there (truncated file)"));
    }
    p += n;
    offset += static_cast<uint64_t>(n);
    size -= static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

absl::Status SyncDirectory(const std::string& dir) {
  const int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return ErrnoError("cannot open directory", dir, errno);
  const int result = fsync(fd);
  const int error = errno;
  close(fd);
  if (result != 0) return ErrnoError("cannot fsync directory", dir, error);
  return absl::OkStatus();
}

}  // namespace mtrain
