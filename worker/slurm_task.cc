#include "worker/slurm_task.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace mtrain {
namespace {

// The variable as an int in [min, max]; `fallback` when unset.
absl::StatusOr<int> IntVariable(const std::function<const char*(const char*)>& getenv,
                                const char* name, int min, int max, int fallback) {
  const char* value = getenv(name);
  if (value == nullptr || *value == '\0') return fallback;
  int parsed = 0;
  if (!absl::SimpleAtoi(value, &parsed) || parsed < min || parsed > max) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": '", value, "' must be an integer in [", min, ", ", max, "]"));
  }
  return parsed;
}

std::string StringVariable(const std::function<const char*(const char*)>& getenv,
                           const char* name) {
  const char* value = getenv(name);
  return value == nullptr ? std::string() : std::string(value);
}

}  // namespace

absl::StatusOr<std::string> FirstSlurmHost(const std::string& nodelist) {
  if (nodelist.empty()) return absl::InvalidArgumentError("the Slurm host list is empty");
  // The first entry ends at a comma outside brackets.
  std::string first;
  int depth = 0;
  for (char c : nodelist) {
    if (c == '[') ++depth;
    if (c == ']') --depth;
    if (depth < 0) break;
    if (c == ',' && depth == 0) break;
    first.push_back(c);
  }
  if (depth != 0 || first.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("malformed Slurm host list '", nodelist, "'"));
  }
  // Each bracketed range becomes its first number, zero padding kept: "[07-09,12]" -> "07".
  std::string host;
  size_t at = 0;
  while (at < first.size()) {
    const size_t open = first.find('[', at);
    if (open == std::string::npos) {
      host += first.substr(at);
      break;
    }
    const size_t close = first.find(']', open);
    const std::string range = first.substr(open + 1, close - open - 1);
    const std::string number = range.substr(0, range.find_first_of("-,"));
    if (number.empty() || number.find_first_not_of("0123456789") != std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat("malformed Slurm host list '", nodelist, "'"));
    }
    host += first.substr(at, open - at) + number;
    at = close + 1;
  }
  return host;
}

absl::StatusOr<std::optional<SlurmTask>> SlurmTaskFromEnvironment(
    const std::function<const char*(const char*)>& getenv) {
  if (getenv("SLURM_PROCID") == nullptr) return std::optional<SlurmTask>();
  SlurmTask task;
  constexpr int kMaxWorld = 1 << 20;
  absl::StatusOr<int> world = IntVariable(getenv, "SLURM_NTASKS", 1, kMaxWorld, 1);
  if (!world.ok()) return world.status();
  task.world_size = *world;
  absl::StatusOr<int> rank = IntVariable(getenv, "SLURM_PROCID", 0, task.world_size - 1, 0);
  if (!rank.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(rank.status().message(),
                     " [rule: 0 <= SLURM_PROCID < SLURM_NTASKS = ", task.world_size, "]"));
  }
  task.rank = *rank;
  absl::StatusOr<int> local = IntVariable(getenv, "SLURM_LOCALID", 0, task.world_size - 1, 0);
  if (!local.ok()) return local.status();
  task.local_rank = *local;
  absl::StatusOr<int> nodes = IntVariable(getenv, "SLURM_STEP_NUM_NODES", 1, kMaxWorld, -1);
  if (!nodes.ok()) return nodes.status();
  if (*nodes < 0) nodes = IntVariable(getenv, "SLURM_NNODES", 1, kMaxWorld, 1);
  if (!nodes.ok()) return nodes.status();
  task.nodes = *nodes;
  task.job_id = StringVariable(getenv, "SLURM_JOB_ID");
  task.step_id = StringVariable(getenv, "SLURM_STEP_ID");
  task.submit_dir = StringVariable(getenv, "SLURM_SUBMIT_DIR");
  std::string nodelist = StringVariable(getenv, "SLURM_STEP_NODELIST");
  if (nodelist.empty()) nodelist = StringVariable(getenv, "SLURM_JOB_NODELIST");
  if (!nodelist.empty()) {
    absl::StatusOr<std::string> first = FirstSlurmHost(nodelist);
    if (!first.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("SLURM_STEP_NODELIST: ", first.status().message()));
    }
    task.first_host = *first;
  }
  return std::optional<SlurmTask>(task);
}

std::string SlurmRendezvousDir(const SlurmTask& task) {
  const std::string base = task.submit_dir.empty() ? std::string(".") : task.submit_dir;
  return absl::StrCat(base, "/.mtrain-rendezvous/", task.job_id.empty() ? "job" : task.job_id, ".",
                      task.step_id.empty() ? "0" : task.step_id);
}

}  // namespace mtrain
