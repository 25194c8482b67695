#include "data/data_roots.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/status_macros.h"
#include "data/data_source.h"
#include "data/indexed_dataset_format.h"

namespace mtrain {
namespace {

// realpath(3), or the reason it failed.
absl::StatusOr<std::string> Resolve(const std::string& path) {
  char resolved[PATH_MAX];
  if (::realpath(path.c_str(), resolved) == nullptr) {
    return absl::InvalidArgumentError(std::strerror(errno));
  }
  return std::string(resolved);
}

bool IsDirectory(const std::string& path) {
  struct stat info;
  return ::stat(path.c_str(), &info) == 0 && S_ISDIR(info.st_mode);
}

bool Inside(const std::string& resolved, const std::string& root) {
  if (root == "/") return true;
  return resolved == root ||
         (resolved.size() > root.size() && resolved.compare(0, root.size(), root) == 0 &&
          resolved[root.size()] == '/');
}

std::string RootsText(const std::vector<std::string>& roots) {
  if (roots.empty()) {
    return "no data roots (start the worker with --data_root=DIR[,DIR...]; by default it "
           "allows only the directory of the shipped corpus, which was not found)";
  }
  return absl::StrCat("the data roots [", absl::StrJoin(roots, ", "), "]");
}

}  // namespace

absl::StatusOr<std::vector<std::string>> ParseDataRoots(absl::string_view comma_separated) {
  std::vector<std::string> roots;
  for (absl::string_view entry : absl::StrSplit(comma_separated, ',', absl::SkipWhitespace())) {
    const std::string root(absl::StripAsciiWhitespace(entry));
    absl::StatusOr<std::string> resolved = Resolve(root);
    if (!resolved.ok() || !IsDirectory(*resolved)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--data_root: ", root, " is not a directory",
                       resolved.ok() ? "" : absl::StrCat(" (", resolved.status().message(), ")")));
    }
    if (std::find(roots.begin(), roots.end(), *resolved) == roots.end()) {
      roots.push_back(*std::move(resolved));
    }
  }
  return roots;
}

std::vector<std::string> DefaultDataRoots() {
  std::vector<std::string> candidates;
  if (absl::StatusOr<std::string> corpus = FindDefaultCorpus(); corpus.ok()) {
    // The directory it was found in and, as runfiles trees hold symlinks, the directory
    // of the file it resolves to (where a spec naming it explicitly resolves).
    for (const absl::StatusOr<std::string>& file :
         {absl::StatusOr<std::string>(*corpus), Resolve(*corpus)}) {
      if (!file.ok()) continue;
      const size_t slash = file->rfind('/');
      candidates.push_back(slash == std::string::npos ? "." : file->substr(0, slash));
    }
  }
  if (const char* dir = std::getenv("MTRAIN_DATA_DIR"); dir != nullptr && *dir != '\0') {
    candidates.push_back(dir);
  }
  std::vector<std::string> roots;
  for (const std::string& candidate : candidates) {
    absl::StatusOr<std::string> resolved = Resolve(candidate);
    if (resolved.ok() && IsDirectory(*resolved) &&
        std::find(roots.begin(), roots.end(), *resolved) == roots.end()) {
      roots.push_back(*std::move(resolved));
    }
  }
  return roots;
}

absl::StatusOr<std::string> ConfineToDataRoots(absl::string_view field, const std::string& path,
                                               const std::vector<std::string>& roots) {
  absl::StatusOr<std::string> resolved = Resolve(path);
  if (!resolved.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": ", path, " cannot be resolved (", resolved.status().message(), ")"));
  }
  for (const std::string& root : roots) {
    if (Inside(*resolved, root)) return resolved;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      field, ": ", path, *resolved == path ? "" : absl::StrCat(" (resolved: ", *resolved, ")"),
      " is outside ", RootsText(roots),
      " [rule: a rank reads data only inside the worker's --data_root]"));
}

namespace {

// Both PREFIX.idx and PREFIX.bin inside the roots; the resolved prefix when both resolve
// to one (the usual case: what is opened is what was checked), else `prefix` unchanged.
absl::StatusOr<std::string> ConfineIndexedPrefix(absl::string_view field, const std::string& prefix,
                                                 const std::vector<std::string>& roots) {
  ASSIGN_OR_RETURN(const std::string index,
                   ConfineToDataRoots(field, IndexFilePath(prefix), roots));
  ASSIGN_OR_RETURN(const std::string bin, ConfineToDataRoots(field, DataFilePath(prefix), roots));
  const absl::string_view resolved = absl::StripSuffix(index, ".idx");
  if (bin == DataFilePath(resolved)) return std::string(resolved);
  return prefix;
}

}  // namespace

absl::StatusOr<DataSpec> ConfineDataSpec(const DataSpec& data,
                                         const std::vector<std::string>& roots) {
  DataSpec confined = data;
  // The tokenizer's files are read on the worker too.
  if (!data.vocab_file().empty()) {
    ASSIGN_OR_RETURN(*confined.mutable_vocab_file(),
                     ConfineToDataRoots("data.vocab_file", data.vocab_file(), roots));
  }
  if (!data.merge_file().empty()) {
    ASSIGN_OR_RETURN(*confined.mutable_merge_file(),
                     ConfineToDataRoots("data.merge_file", data.merge_file(), roots));
  }
  if (!data.tokenizer_json().empty()) {
    ASSIGN_OR_RETURN(*confined.mutable_tokenizer_json(),
                     ConfineToDataRoots("data.tokenizer_json", data.tokenizer_json(), roots));
  }
  for (int i = 0; i < data.paths_size(); ++i) {
    ASSIGN_OR_RETURN(*confined.mutable_paths(i)->mutable_path(),
                     ConfineIndexedPrefix("data.paths", data.paths(i).path(), roots));
  }
  if (data.path().empty()) return confined;
  if (data.format() == DATA_FORMAT_MMIDIDX) {
    ASSIGN_OR_RETURN(*confined.mutable_path(),
                     ConfineIndexedPrefix("data.path", data.path(), roots));
    return confined;
  }
  ASSIGN_OR_RETURN(const std::string resolved, ConfineToDataRoots("data.path", data.path(), roots));
  confined.set_path(resolved);
  return confined;
}

}  // namespace mtrain
