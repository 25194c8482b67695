#include "kernels/cpu_isa.h"

#include <atomic>
#include <cstdlib>
#include <cstring>

namespace mtrain::cpu {
namespace {

KernelIsa Supported() {
  static const KernelIsa isa = [] {
    // libgcc's detection checks that the OS saves the wider registers (xgetbv) too.
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") &&
        __builtin_cpu_supports("avx2")) {
      return KernelIsa::kAvx512;
    }
    return __builtin_cpu_supports("avx2") ? KernelIsa::kAvx2 : KernelIsa::kGeneric;
  }();
  return isa;
}

KernelIsa Detected() {
  static const KernelIsa isa = [] {
    const KernelIsa supported = Supported();
    const char* forced = std::getenv("MTRAIN_CPU_ISA");
    if (forced != nullptr && std::strcmp(forced, "generic") == 0) return KernelIsa::kGeneric;
    if (forced != nullptr && std::strcmp(forced, "avx2") == 0 && supported > KernelIsa::kAvx2) {
      return KernelIsa::kAvx2;
    }
    return supported;
  }();
  return isa;
}

// -1: no override; otherwise the KernelIsa OverrideCpuKernelIsaForTesting set.
std::atomic<int> isa_override{-1};

}  // namespace

const char* KernelIsaName(KernelIsa isa) {
  switch (isa) {
    case KernelIsa::kGeneric:
      return "generic";
    case KernelIsa::kAvx2:
      return "avx2";
    case KernelIsa::kAvx512:
      return "avx512";
  }
  return "generic";
}

KernelIsa CpuKernelIsa() {
  const int forced = isa_override.load(std::memory_order_relaxed);
  return forced >= 0 ? static_cast<KernelIsa>(forced) : Detected();
}

KernelIsa CpuSupportedKernelIsa() { return Supported(); }

void OverrideCpuKernelIsaForTesting(std::optional<KernelIsa> isa) {
  if (isa.has_value() && *isa > Supported()) isa = Supported();
  isa_override.store(isa.has_value() ? static_cast<int>(*isa) : -1, std::memory_order_relaxed);
}

}  // namespace mtrain::cpu
