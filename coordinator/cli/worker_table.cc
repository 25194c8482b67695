#include "coordinator/cli/worker_table.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace mtrain {

std::string FormatBytes(int64_t bytes) {
  constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024 && unit < 4) {
    value /= 1024;
    ++unit;
  }
  return unit == 0 ? absl::StrCat(bytes, " B") : absl::StrFormat("%.1f %s", value, kUnits[unit]);
}

namespace {

std::string DeviceText(const WorkerInfo& info) {
  if (info.device_kind() == DEVICE_KIND_CUDA) {
    return absl::StrCat("cuda x", info.device_count(), " ", info.device_name());
  }
  return info.device_name().empty() ? "cpu" : info.device_name();
}

std::string StateText(const WorkerStatus& status) {
  if (!status.alive()) return "dead";
  if (status.state() == WORKER_STATE_BUSY) return absl::StrCat("busy ", status.job_id());
  return "idle";
}

}  // namespace

std::string FormatWorkerTable(const ListWorkersResponse& workers) {
  constexpr const char* kRow = "%-24s %-16s %-28s %10s %-12s %s\n";
  std::string out =
      absl::StrFormat(kRow, "WORKER", "HOST", "DEVICE", "MEMORY", "STATE", "LAST SEEN");
  for (const WorkerStatus& status : workers.workers()) {
    const WorkerInfo& info = status.worker();
    absl::StrAppend(
        &out, absl::StrFormat(kRow, info.worker_id(), info.host(), DeviceText(info),
                              FormatBytes(info.memory_bytes()), StateText(status),
                              absl::StrFormat("%.1fs ago", status.last_seen_ms_ago() / 1000.0)));
  }
  return out;
}

}  // namespace mtrain
