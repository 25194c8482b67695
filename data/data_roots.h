// Confines the files a rank reads on a user's behalf (data.path, train.init_from) to
// directories the worker's operator chose: ranks often run as root, and a job spec is
// written by whoever can reach the coordinator. A path is resolved with realpath(3)
// (".." and every symlink followed) and must then lie inside one of the roots, themselves
// resolved the same way.
//
// The worker daemon's --data_root (a comma-separated list) defaults to DefaultDataRoots():
// the directory holding the shipped corpus as the rank would find it
// ($MTRAIN_DATA_DIR, the repository, the runfiles) and $MTRAIN_DATA_DIR itself, so the
// demo and the tests run unchanged while `../../etc/passwd` and `/etc/shadow` are refused.
//
//   ASSIGN_OR_RETURN(std::vector<std::string> roots, ParseDataRoots(flag));
//   ASSIGN_OR_RETURN(DataSpec confined, ConfineDataSpec(spec.data(), roots));
//   ASSIGN_OR_RETURN(std::string init, ConfineToDataRoots("train.init_from", path, roots));
//
// Thread-safe (no state).
#ifndef MTRAIN_DATA_DATA_ROOTS_H_
#define MTRAIN_DATA_DATA_ROOTS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "proto/job_spec.pb.h"

namespace mtrain {

// Each comma-separated entry resolved (realpath). INVALID_ARGUMENT naming the entry if it
// does not exist or is not a directory; an empty list parses to no roots.
absl::StatusOr<std::vector<std::string>> ParseDataRoots(absl::string_view comma_separated);

// The resolved directory of the shipped corpus (FindDefaultCorpus; also that of the file
// it links to, in a runfiles tree) and $MTRAIN_DATA_DIR, each when it exists, without
// duplicates; may be empty.
std::vector<std::string> DefaultDataRoots();

// `path` resolved, when it lies inside one of `roots` (resolved directories, as
// ParseDataRoots returns). INVALID_ARGUMENT naming `field`, the path (and what it resolves
// to) and the roots otherwise, or when it cannot be resolved (it does not exist, say).
absl::StatusOr<std::string> ConfineToDataRoots(absl::string_view field, const std::string& path,
                                               const std::vector<std::string>& roots);

// data.path confined: an unset path (the shipped corpus, found by the rank itself) is
// left alone; a text file is replaced by its resolved path, so the file opened is the one
// checked; for DATA_FORMAT_MMIDIDX both PREFIX.idx and PREFIX.bin must lie inside, and so
// for every prefix of a blend (data.paths). The tokenizer's files (data.vocab_file,
// merge_file, tokenizer_json) likewise.
absl::StatusOr<DataSpec> ConfineDataSpec(const DataSpec& data,
                                         const std::vector<std::string>& roots);

}  // namespace mtrain

#endif  // MTRAIN_DATA_DATA_ROOTS_H_
