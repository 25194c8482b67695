// A private temporary directory (mkdtemp under $TMPDIR, else /tmp), removed with all its
// contents when the object is destroyed: staging for checkpoint uploads and downloads.
//
//   ASSIGN_OR_RETURN(ScratchDir scratch, ScratchDir::Create("export"));
//   ... write under scratch.path() ...
#ifndef MTRAIN_COMMON_SCRATCH_DIR_H_
#define MTRAIN_COMMON_SCRATCH_DIR_H_

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <system_error>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

namespace mtrain {

class ScratchDir {
 public:
  // `label` becomes part of the name ("mtrain-LABEL-XXXXXX"). INTERNAL if mkdtemp fails.
  static absl::StatusOr<ScratchDir> Create(const std::string& label) {
    const char* tmp = std::getenv("TMPDIR");
    std::string pattern =
        absl::StrCat(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp", "/mtrain-", label, "-XXXXXX");
    if (::mkdtemp(pattern.data()) == nullptr) {
      return absl::InternalError(
          absl::StrCat("cannot create a directory like ", pattern, ": ", std::strerror(errno)));
    }
    return ScratchDir(std::move(pattern));
  }

  ScratchDir(ScratchDir&& other) noexcept : path_(std::move(other.path_)) { other.path_.clear(); }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  ScratchDir& operator=(ScratchDir&&) = delete;
  ~ScratchDir() {
    std::error_code ignored;
    if (!path_.empty()) std::filesystem::remove_all(path_, ignored);
  }

  const std::string& path() const { return path_; }

 private:
  explicit ScratchDir(std::string path) : path_(std::move(path)) {}
  std::string path_;
};

}  // namespace mtrain

#endif  // MTRAIN_COMMON_SCRATCH_DIR_H_
