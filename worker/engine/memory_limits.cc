#include "worker/engine/memory_limits.h"

#include <sys/resource.h>
#include <unistd.h>

#include <fstream>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"

namespace mtrain {
namespace {

// The cgroup v2 limit of this process's group ("max" or absent: none).
std::optional<uint64_t> CgroupMemoryMax() {
  std::ifstream in("/sys/fs/cgroup/memory.max");
  std::string text;
  if (!(in >> text)) return std::nullopt;
  uint64_t value = 0;
  if (!absl::SimpleAtoi(text, &value)) return std::nullopt;
  return value;
}

// VmSize of /proc/self/status: the address space mapped now, which RLIMIT_AS counts.
uint64_t MappedBytes() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    absl::string_view rest = line;
    if (!absl::ConsumePrefix(&rest, "VmSize:")) continue;
    rest = absl::StripAsciiWhitespace(rest);
    absl::ConsumeSuffix(&rest, "kB");
    uint64_t kib = 0;
    if (absl::SimpleAtoi(absl::StripAsciiWhitespace(rest), &kib)) return kib * 1024;
  }
  return 0;
}

}  // namespace

MemoryLimits CurrentMemoryLimits() {
  MemoryLimits limits;
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page_size = sysconf(_SC_PAGE_SIZE);
  if (pages > 0 && page_size > 0) {
    limits.physical_bytes = static_cast<uint64_t>(pages) * static_cast<uint64_t>(page_size);
  }
  if (const std::optional<uint64_t> cgroup = CgroupMemoryMax();
      cgroup.has_value() && (limits.physical_bytes == 0 || *cgroup < limits.physical_bytes)) {
    limits.physical_bytes = *cgroup;
  }
  struct rlimit rl;
  if (getrlimit(RLIMIT_AS, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
    const uint64_t limit = static_cast<uint64_t>(rl.rlim_cur);
    const uint64_t mapped = MappedBytes();
    limits.address_space_left_bytes = limit > mapped ? limit - mapped : 0;
  }
  return limits;
}

std::string HumanBytes(double bytes) {
  constexpr const char* kUnits[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  if (bytes < 1024) return absl::StrFormat("%.0f bytes", bytes);
  int unit = -1;
  while (bytes >= 1024 && unit + 1 < static_cast<int>(sizeof(kUnits) / sizeof(kUnits[0]))) {
    bytes /= 1024;
    ++unit;
  }
  return absl::StrFormat(bytes < 10 ? "%.2f %s" : "%.1f %s", bytes, kUnits[unit]);
}

absl::Status CheckMemoryFits(absl::string_view what, double need_bytes, absl::string_view detail,
                             const MemoryLimits& limits) {
  std::string exceeded;
  if (limits.physical_bytes > 0 && need_bytes > static_cast<double>(limits.physical_bytes)) {
    exceeded =
        absl::StrCat("this machine has ", HumanBytes(limits.physical_bytes), " of physical memory");
  }
  if (limits.address_space_left_bytes.has_value() &&
      need_bytes > static_cast<double>(*limits.address_space_left_bytes)) {
    absl::StrAppend(&exceeded, exceeded.empty() ? "" : " and ", "RLIMIT_AS (ulimit -v) leaves ",
                    HumanBytes(*limits.address_space_left_bytes), " of address space");
  }
  if (exceeded.empty()) return absl::OkStatus();
  return absl::ResourceExhaustedError(absl::StrCat(what, " needs about ", HumanBytes(need_bytes),
                                                   detail.empty() ? "" : " (", detail,
                                                   detail.empty() ? "" : ")", " but ", exceeded));
}

}  // namespace mtrain
