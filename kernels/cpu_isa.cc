#include "kernels/cpu_isa.h"

#include <atomic>
#include <cstdlib>
#include <cstring>

namespace mtrain::cpu {
namespace {

bool DetectedAvx2() {
  static const bool avx2 = [] {
    const char* forced = std::getenv("MTRAIN_CPU_ISA");
    if (forced != nullptr && std::strcmp(forced, "generic") == 0) return false;
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") != 0;
  }();
  return avx2;
}

// -1: no override; 0 or 1: what OverrideCpuKernelsIsaForTesting set.
std::atomic<int> isa_override{-1};

}  // namespace

bool CpuKernelsUseAvx2() {
  const int forced = isa_override.load(std::memory_order_relaxed);
  return forced >= 0 ? forced == 1 : DetectedAvx2();
}

void OverrideCpuKernelsIsaForTesting(std::optional<bool> avx2) {
  isa_override.store(avx2.has_value() ? (*avx2 ? 1 : 0) : -1, std::memory_order_relaxed);
}

}  // namespace mtrain::cpu
