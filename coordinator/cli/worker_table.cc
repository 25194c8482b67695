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

constexpr const char* kProfileColumns = "%9s %9s %6s %9s  %s";

// The GEMM library, its kernel and the ISA for CPU profiles ("OpenBLAS 0.3.21 Zen avx2").
std::string KernelText(const DeviceProfile& profile) {
  if (profile.gemm_library().empty()) return "-";
  return absl::StrCat(profile.gemm_library(), " ", profile.gemm_kernel(), " ", profile.isa());
}

std::string ProfileText(const DeviceProfile& profile) {
  if (profile.fp32_flops() <= 0) return absl::StrFormat(kProfileColumns, "-", "-", "-", "-", "-");
  const double efficiency = profile.matmul_efficiency() > 0 ? profile.matmul_efficiency() : 1;
  return absl::StrFormat(kProfileColumns, absl::StrFormat("%.1f", profile.fp32_flops() / 1e9),
                         absl::StrFormat("%.1f", profile.fp32_flops() * efficiency / 1e9),
                         absl::StrFormat("%.0f", profile.matmul_half_size()),
                         absl::StrFormat("%.1f", profile.memory_bandwidth_bytes_per_second() / 1e9),
                         KernelText(profile));
}

}  // namespace

std::string FormatWorkerTable(const ListWorkersResponse& workers, bool wide) {
  constexpr const char* kRow = "%-24s %-16s %-28s %10s %-12s %s";
  std::string out =
      absl::StrFormat(kRow, "WORKER", "HOST", "DEVICE", "MEMORY", "STATE", "LAST SEEN");
  if (wide) {
    absl::StrAppend(&out, "  ",
                    absl::StrFormat(kProfileColumns, "PEAK GF/S", "GEMM GF/S", "HALF", "MEM GB/S",
                                    "GEMM KERNEL"));
  }
  absl::StrAppend(&out, "\n");
  for (const WorkerStatus& status : workers.workers()) {
    const WorkerInfo& info = status.worker();
    std::string row = absl::StrFormat(
        kRow, info.worker_id(), info.host(), DeviceText(info), FormatBytes(info.memory_bytes()),
        StateText(status), absl::StrFormat("%.1fs ago", status.last_seen_ms_ago() / 1000.0));
    if (wide) absl::StrAppend(&row, "  ", ProfileText(info.profile()));
    absl::StrAppend(&out, row, "\n");
  }
  return out;
}

}  // namespace mtrain
