// How much memory this process may use, and the check a rank makes before it allocates:
// the machine's physical memory (or a smaller cgroup limit) and, when RLIMIT_AS is set
// (`ulimit -v`), the address space it leaves. A rank whose estimated need exceeds either
// is refused with RESOURCE_EXHAUSTED instead of aborting in std::bad_alloc (or being
// killed by the OOM killer) later.
//
//   const MemoryLimits limits = CurrentMemoryLimits();
//   RETURN_IF_ERROR(CheckMemoryFits("this rank", need_bytes, "parameters 1 GiB, ...", limits));
//
// Thread-safe (reads /proc and /sys; no state).
#ifndef MTRAIN_WORKER_ENGINE_MEMORY_LIMITS_H_
#define MTRAIN_WORKER_ENGINE_MEMORY_LIMITS_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace mtrain {

struct MemoryLimits {
  // Physical memory, or the cgroup's memory.max when that is smaller.
  uint64_t physical_bytes = 0;
  // RLIMIT_AS minus the address space already mapped; absent without a limit.
  std::optional<uint64_t> address_space_left_bytes;
};

MemoryLimits CurrentMemoryLimits();

// "1.50 GiB", "512.0 MiB", "4.0 KiB", "12 bytes": for messages.
std::string HumanBytes(double bytes);

// RESOURCE_EXHAUSTED if `need_bytes` exceeds a limit: "<what> needs about <need> (<detail>)
// but <the limit>", naming each limit that is exceeded. `need_bytes` is a double so that
// estimates of absurd sizes (2^70 bytes) are compared without overflow.
absl::Status CheckMemoryFits(absl::string_view what, double need_bytes, absl::string_view detail,
                             const MemoryLimits& limits);

}  // namespace mtrain

#endif  // MTRAIN_WORKER_ENGINE_MEMORY_LIMITS_H_
