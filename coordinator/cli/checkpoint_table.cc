#include "coordinator/cli/checkpoint_table.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace mtrain {

std::string FormatBytes(uint64_t bytes) {
  if (bytes < 1024) return absl::StrCat(bytes, " B");
  const char* const units[] = {"KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes) / 1024;
  int unit = 0;
  while (value >= 1024 && unit < 3) {
    value /= 1024;
    ++unit;
  }
  return absl::StrFormat("%.1f %s", value, units[unit]);
}

std::string FormatCheckpointTable(const ListCheckpointsResponse& checkpoints, absl::TimeZone zone) {
  if (checkpoints.checkpoints().empty()) return "no checkpoints yet\n";
  std::string out = absl::StrFormat("%-9s %-19s  %-13s  %5s  %7s  %10s  %s\n", "STEP", "CREATED",
                                    "LAYOUT(t,p,d)", "FILES", "TENSORS", "SIZE", "KIND");
  for (const CheckpointInfo& c : checkpoints.checkpoints()) {
    absl::StrAppendFormat(&out, "%-9d %-19s  %-13s  %5d  %7d  %10s  %s\n", c.step(),
                          absl::FormatTime("%Y-%m-%d %H:%M:%S",
                                           absl::FromUnixSeconds(c.created_unix_seconds()), zone),
                          absl::StrCat(c.tensor(), ",", c.pipeline(), ",", c.data()), c.num_files(),
                          c.num_tensors(), FormatBytes(c.total_bytes()),
                          c.parameters_only() ? "weights" : "full");
  }
  return out;
}

}  // namespace mtrain
