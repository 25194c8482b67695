#include "coordinator/server_token.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace mtrain {
namespace {

std::string Errno(int error) { return std::strerror(error); }

// gRPC carries only printable ASCII in a text metadata value.
bool IsPrintableLine(const std::string& token) {
  for (const char c : token) {
    if (c < 0x20 || c > 0x7e) return false;
  }
  return true;
}

// Reads exactly `size` bytes from /dev/urandom (the kernel's CSPRNG, never blocking once
// seeded, which it is by the time a daemon starts).
absl::StatusOr<std::string> RandomBytes(size_t size) {
  const int fd = ::open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return absl::InternalError(absl::StrCat("cannot open /dev/urandom: ", Errno(errno)));
  std::string bytes(size, '\0');
  size_t got = 0;
  while (got < size) {
    const ssize_t n = ::read(fd, bytes.data() + got, size - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int error = n < 0 ? errno : EIO;
      ::close(fd);
      return absl::InternalError(absl::StrCat("cannot read /dev/urandom: ", Errno(error)));
    }
    got += static_cast<size_t>(n);
  }
  ::close(fd);
  return bytes;
}

absl::Status WriteAll(int fd, const std::string& text, const std::string& path) {
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return absl::InternalError(absl::StrCat(path, ": cannot write: ", Errno(errno)));
    done += static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

absl::StatusOr<StateDirToken> CreateToken(const std::string& state_dir, const std::string& path) {
  absl::StatusOr<std::string> random = RandomBytes(kGeneratedTokenBytes);
  if (!random.ok()) return random.status();
  const std::string token = absl::BytesToHexString(*random);
  const std::string temporary = path + ".tmp";
  ::unlink(temporary.c_str());  // left by a crash between create and rename
  const int fd =
      ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) {
    return absl::InternalError(absl::StrCat(temporary, ": cannot create: ", Errno(errno)));
  }
  // Exactly 0600 whatever the umask.
  absl::Status written = ::fchmod(fd, 0600) == 0
                             ? WriteAll(fd, token + "\n", temporary)
                             : absl::InternalError(absl::StrCat(temporary, ": ", Errno(errno)));
  if (written.ok() && ::fsync(fd) != 0) {
    written = absl::InternalError(absl::StrCat(temporary, ": cannot sync: ", Errno(errno)));
  }
  ::close(fd);
  if (written.ok() && ::rename(temporary.c_str(), path.c_str()) != 0) {
    written = absl::InternalError(absl::StrCat(path, ": cannot create: ", Errno(errno)));
  }
  if (!written.ok()) {
    ::unlink(temporary.c_str());
    return written;
  }
  // The rename itself survives a power loss only once the directory is synced.
  if (const int dir = ::open(state_dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); dir >= 0) {
    (void)::fsync(dir);
    ::close(dir);
  }
  return StateDirToken{token, path, /*created=*/true};
}

// `what` names the file in errors: the flag for --auth_token_file, the path otherwise.
absl::StatusOr<std::string> ReadToken(const std::string& path, const std::string& what) {
  // stdio rather than iostreams: its errors keep errno ("Permission denied", "Is a
  // directory") for the message.
  std::FILE* file = std::fopen(path.c_str(), "rb");
  if (file == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": cannot read: ", Errno(errno)));
  }
  std::string token;
  char buffer[4096];
  size_t read = 0;
  // A token is short; a huge file is a mistake (the wrong path), not a token.
  constexpr size_t kMaxTokenFileBytes = 64 << 10;
  while ((read = std::fread(buffer, 1, sizeof(buffer), file)) > 0 &&
         token.size() <= kMaxTokenFileBytes) {
    token.append(buffer, read);
  }
  const int error = std::ferror(file) ? errno : 0;
  std::fclose(file);
  if (error != 0) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": cannot read: ", Errno(error)));
  }
  if (token.size() > kMaxTokenFileBytes) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": more than ", kMaxTokenFileBytes,
                                                   " bytes [rule: a token is one short line]"));
  }
  absl::StripTrailingAsciiWhitespace(&token);
  if (token.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": the file is empty"));
  }
  if (!IsPrintableLine(token)) {
    return absl::InvalidArgumentError(
        absl::StrCat(what,
                     ": the token must be one line of printable ASCII (what gRPC metadata "
                     "carries)"));
  }
  return token;
}

}  // namespace

bool IsLoopbackListenAddress(const std::string& listen) {
  if (absl::StartsWith(listen, "unix:") || absl::StartsWith(listen, "unix-abstract:")) {
    return true;
  }
  const size_t colon = listen.rfind(':');
  if (colon == std::string::npos) return false;
  std::string host = listen.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  if (absl::AsciiStrToLower(host) == "localhost") return true;
  in_addr v4;
  if (::inet_pton(AF_INET, host.c_str(), &v4) == 1) {
    return (ntohl(v4.s_addr) >> 24) == 127;
  }
  in6_addr v6;
  if (::inet_pton(AF_INET6, host.c_str(), &v6) == 1) {
    if (IN6_IS_ADDR_LOOPBACK(&v6)) return true;
    // ::ffff:127.x.y.z
    return IN6_IS_ADDR_V4MAPPED(&v6) && v6.s6_addr[12] == 127;
  }
  return false;  // a wildcard, a host name, or something unparsable: assume reachable
}

absl::StatusOr<std::string> ReadServerTokenFile(const std::string& path) {
  return ReadToken(path, absl::StrCat("--auth_token_file=", path));
}

absl::StatusOr<StateDirToken> LoadOrCreateStateDirToken(const std::string& state_dir) {
  const std::string path = absl::StrCat(state_dir, "/", kStateDirTokenFile);
  struct stat info;
  if (::lstat(path.c_str(), &info) != 0) {
    if (errno != ENOENT) {
      return absl::InternalError(absl::StrCat(path, ": cannot stat: ", Errno(errno)));
    }
    return CreateToken(state_dir, path);
  }
  if (!S_ISREG(info.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat(path,
                     " is not a regular file [rule: the generated token is a plain file, "
                     "mode 0600]"));
  }
  if ((info.st_mode & 077) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof(mode), "%04o", static_cast<unsigned>(info.st_mode & 07777));
    return absl::FailedPreconditionError(
        absl::StrCat(path, " has mode ", mode,
                     ": group or others may read the token [rule: mode 0600; fix with chmod 600 ",
                     path, ", or delete it to have a new token generated]"));
  }
  absl::StatusOr<std::string> token = ReadToken(path, path);
  if (!token.ok()) {
    return absl::Status(token.status().code(),
                        absl::StrCat(token.status().message(),
                                     " (the coordinator's generated token; delete the file to "
                                     "have a new one generated)"));
  }
  return StateDirToken{*std::move(token), path, /*created=*/false};
}

absl::StatusOr<ServerToken> ChooseServerToken(const std::string& listen,
                                              const std::string& auth_token_file,
                                              const std::string& state_dir) {
  ServerToken chosen;
  if (!auth_token_file.empty()) {
    absl::StatusOr<std::string> token = ReadServerTokenFile(auth_token_file);
    if (!token.ok()) return token.status();
    chosen.token = *std::move(token);
    return chosen;
  }
  if (IsLoopbackListenAddress(listen)) return chosen;
  absl::StatusOr<StateDirToken> generated = LoadOrCreateStateDirToken(state_dir);
  if (!generated.ok()) return generated.status();
  chosen.token = std::move(generated->token);
  chosen.generated_path = std::move(generated->path);
  chosen.created = generated->created;
  return chosen;
}

}  // namespace mtrain
