#include "worker/parallel/key_value_store.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace mtrain {
namespace {

// Longest file name most file systems accept (NAME_MAX on Linux).
constexpr size_t kMaxFileNameBytes = 255;

// Wait polls with a back-off: the first checks come quickly (ranks usually arrive within
// milliseconds of each other), later ones slow down so hundreds of waiting ranks do not
// hammer a shared file system.
constexpr absl::Duration kFirstPollInterval = absl::Milliseconds(1);
constexpr absl::Duration kMaxPollInterval = absl::Milliseconds(50);

std::string ErrnoText(int error) { return std::strerror(error); }

bool IsPlainKeyChar(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' ||
         c == '_' || c == '-';
}

// "%XX" for every byte outside [A-Za-z0-9._-], and for a leading '.': that keeps the keys
// "." and ".." from naming directory entries, and leaves names starting with '.' free for
// temporary files, which can therefore never collide with a key.
std::string EscapeKey(const std::string& key) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string escaped;
  escaped.reserve(key.size());
  for (size_t i = 0; i < key.size(); ++i) {
    const char c = key[i];
    if (IsPlainKeyChar(c) && !(i == 0 && c == '.')) {
      escaped.push_back(c);
    } else {
      const unsigned char byte = static_cast<unsigned char>(c);
      escaped.push_back('%');
      escaped.push_back(kHex[byte >> 4]);
      escaped.push_back(kHex[byte & 0xF]);
    }
  }
  return escaped;
}

absl::Status CheckKey(const std::string& key) {
  if (key.empty()) return absl::InvalidArgumentError("key-value store: empty key");
  if (EscapeKey(key).size() > kMaxFileNameBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("key-value store: key too long for a file name (", key.size(),
                     " bytes, at most ", kMaxFileNameBytes, " after escaping)"));
  }
  return absl::OkStatus();
}

absl::Status WriteAll(int fd, const std::string& data, const std::string& path) {
  size_t written = 0;
  while (written < data.size()) {
    const ssize_t n = ::write(fd, data.data() + written, data.size() - written);
    if (n < 0) {
      if (errno == EINTR) continue;
      return absl::InternalError(absl::StrCat("write ", path, ": ", ErrnoText(errno)));
    }
    written += static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

bool FileExists(const std::string& path) {
  struct stat info;
  return ::stat(path.c_str(), &info) == 0;
}

}  // namespace

absl::StatusOr<std::unique_ptr<DirectoryStore>> DirectoryStore::Open(const std::string& directory) {
  if (directory.empty()) {
    return absl::InvalidArgumentError("DirectoryStore: empty directory name");
  }
  // Create every missing component, like `mkdir -p`.
  for (size_t slash = directory.find('/', 1);; slash = directory.find('/', slash + 1)) {
    const std::string prefix = directory.substr(0, slash);
    if (::mkdir(prefix.c_str(), 0755) != 0 && errno != EEXIST) {
      return absl::InvalidArgumentError(
          absl::StrCat("DirectoryStore: cannot create ", prefix, ": ", ErrnoText(errno)));
    }
    if (slash == std::string::npos) break;
  }
  struct stat info;
  if (::stat(directory.c_str(), &info) != 0 || !S_ISDIR(info.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat("DirectoryStore: ", directory, " is not a directory"));
  }
  return std::unique_ptr<DirectoryStore>(new DirectoryStore(directory));
}

std::string DirectoryStore::PathOf(const std::string& key) const {
  return absl::StrCat(directory_, "/", EscapeKey(key));
}

absl::Status DirectoryStore::Set(const std::string& key, const std::string& value) {
  if (absl::Status status = CheckKey(key); !status.ok()) return status;
  // Unique per process, thread and call, so concurrent writers of one key never share a
  // temporary file; the rename makes the last writer win atomically.
  static std::atomic<uint64_t> counter{0};
  const std::string temp_path = absl::StrCat(
      directory_, "/.tmp-", ::getpid(), "-",
      std::hash<std::thread::id>()(std::this_thread::get_id()), "-", counter.fetch_add(1));
  const int fd = ::open(temp_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    return absl::InternalError(
        absl::StrCat("DirectoryStore: create ", temp_path, ": ", ErrnoText(errno)));
  }
  absl::Status status = WriteAll(fd, value, temp_path);
  if (::close(fd) != 0 && status.ok()) {
    status = absl::InternalError(absl::StrCat("close ", temp_path, ": ", ErrnoText(errno)));
  }
  if (status.ok() && ::rename(temp_path.c_str(), PathOf(key).c_str()) != 0) {
    status = absl::InternalError(
        absl::StrCat("DirectoryStore: rename to ", PathOf(key), ": ", ErrnoText(errno)));
  }
  if (!status.ok()) ::unlink(temp_path.c_str());
  return status;
}

absl::StatusOr<std::string> DirectoryStore::Get(const std::string& key) {
  if (absl::Status status = CheckKey(key); !status.ok()) return status;
  const std::string path = PathOf(key);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) {
      return absl::NotFoundError(absl::StrCat("key-value store: key '", key, "' is not set"));
    }
    return absl::InternalError(absl::StrCat("DirectoryStore: open ", path, ": ", ErrnoText(errno)));
  }
  std::string value;
  char chunk[4096];
  for (;;) {
    const ssize_t n = ::read(fd, chunk, sizeof(chunk));
    if (n < 0) {
      if (errno == EINTR) continue;
      const int error = errno;
      ::close(fd);
      return absl::InternalError(
          absl::StrCat("DirectoryStore: read ", path, ": ", ErrnoText(error)));
    }
    if (n == 0) break;
    value.append(chunk, static_cast<size_t>(n));
  }
  ::close(fd);
  return value;
}

absl::Status DirectoryStore::Wait(const std::vector<std::string>& keys, absl::Duration timeout) {
  for (const std::string& key : keys) {
    if (absl::Status status = CheckKey(key); !status.ok()) return status;
  }
  const absl::Time deadline = absl::Now() + timeout;
  std::vector<std::string> missing = keys;
  absl::Duration interval = kFirstPollInterval;
  for (;;) {
    missing.erase(
        std::remove_if(missing.begin(), missing.end(),
                       [this](const std::string& key) { return FileExists(PathOf(key)); }),
        missing.end());
    if (missing.empty()) return absl::OkStatus();
    const absl::Time now = absl::Now();
    if (now >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("key-value store: keys still missing after ", absl::FormatDuration(timeout),
                       " in ", directory_, ": ", absl::StrJoin(missing, ", ")));
    }
    absl::SleepFor(std::min(interval, deadline - now));
    interval = std::min(interval * 2, kMaxPollInterval);
  }
}

}  // namespace mtrain
