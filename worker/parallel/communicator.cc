#include "worker/parallel/communicator.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace mtrain {

absl::Status Communicator::Send(const void* data, size_t bytes, int peer, uint64_t tag) {
  absl::StatusOr<std::unique_ptr<PendingSend>> pending = StartSend(data, bytes, peer, tag);
  if (!pending.ok()) return pending.status();
  return (*pending)->Wait();
}

absl::Status Communicator::Reduce(float* data, size_t count, ReduceOp op, int root) {
  if (root < 0 || root >= size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("Reduce to group rank ", root, " in group ", name(), ": root out of range"));
  }
  // Every member gets the result: a superset of what Reduce promises.
  return AllReduce(data, count, op);
}

absl::StatusOr<int> GroupRankOf(const GroupSpec& spec) {
  if (spec.name.empty()) return absl::InvalidArgumentError("group spec: empty name");
  if (spec.members.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("group ", spec.name, ": no members"));
  }
  if (spec.timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("group ", spec.name, ": timeout must be positive"));
  }
  std::vector<int> sorted = spec.members;
  std::sort(sorted.begin(), sorted.end());
  if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "group ", spec.name, ": duplicate member in ranks ", absl::StrJoin(spec.members, ",")));
  }
  const auto it = std::find(spec.members.begin(), spec.members.end(), spec.global_rank);
  if (it == spec.members.end()) {
    return absl::InvalidArgumentError(absl::StrCat("group ", spec.name, ": global rank ",
                                                   spec.global_rank, " is not among ranks ",
                                                   absl::StrJoin(spec.members, ",")));
  }
  return static_cast<int>(it - spec.members.begin());
}

std::string GroupDisplayName(const GroupSpec& spec) {
  return absl::StrCat(spec.name, " (ranks ", absl::StrJoin(spec.members, ","), ")");
}

}  // namespace mtrain
