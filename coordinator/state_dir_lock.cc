#include "coordinator/state_dir_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace mtrain {
namespace {

absl::Status ErrnoError(int error, const std::string& what) {
  const std::string message = absl::StrCat(what, ": ", std::strerror(error));
  if (error == ENOENT || error == ENOTDIR) return absl::NotFoundError(message);
  if (error == EACCES || error == EPERM || error == EROFS) {
    return absl::PermissionDeniedError(message);
  }
  return absl::InternalError(message);
}

// The pid the holder wrote, or "unknown". The holder writes it just after locking, so a
// read in between finds the file empty (or, from an earlier holder, stale): retry briefly.
std::string HolderPid(int fd) {
  for (int attempt = 0; attempt < 20; ++attempt) {
    char text[32] = {};
    const ssize_t n = ::pread(fd, text, sizeof(text) - 1, 0);
    int pid = 0;
    if (n > 0 && absl::SimpleAtoi(absl::StripAsciiWhitespace(text), &pid) && pid > 0) {
      return absl::StrCat(pid);
    }
    absl::SleepFor(absl::Milliseconds(5));
  }
  return "unknown";
}

}  // namespace

absl::StatusOr<std::unique_ptr<StateDirLock>> StateDirLock::Acquire(const std::string& dir) {
  if (dir.empty()) return absl::InvalidArgumentError("state dir must not be empty");
  if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) {
    return ErrnoError(errno, absl::StrCat("cannot create state dir ", dir));
  }
  std::string path = dir + "/LOCK";
  // O_CLOEXEC: a child process inheriting the descriptor would keep the lock alive after
  // this coordinator died.
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoError(errno, absl::StrCat("cannot open ", path));
  int rc;
  do {
    rc = ::flock(fd, LOCK_EX | LOCK_NB);
  } while (rc != 0 && errno == EINTR);
  if (rc != 0) {
    const int error = errno;
    absl::Status status =
        error == EWOULDBLOCK
            ? absl::FailedPreconditionError(absl::StrCat(
                  "state dir ", dir, " is in use by another coordinator (pid ", HolderPid(fd), ")"))
            : ErrnoError(error, absl::StrCat("cannot lock ", path));
    ::close(fd);
    return status;
  }
  // Replace whatever an earlier holder wrote: its pid may belong to anything by now.
  const std::string pid = absl::StrCat(::getpid(), "\n");
  ssize_t written = -1;
  if (::ftruncate(fd, 0) == 0) written = ::pwrite(fd, pid.data(), pid.size(), 0);
  if (written != static_cast<ssize_t>(pid.size())) {
    const int error = written < 0 ? errno : EIO;
    ::close(fd);
    return ErrnoError(error, absl::StrCat("cannot write ", path));
  }
  return std::unique_ptr<StateDirLock>(new StateDirLock(fd, std::move(path)));
}

StateDirLock::~StateDirLock() {
  // Closing the last descriptor of the open file description releases the flock.
  ::close(fd_);
}

}  // namespace mtrain
