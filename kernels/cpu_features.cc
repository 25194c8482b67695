#include "kernels/cpu_features.h"

#include <cpuid.h>

#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

namespace mtrain::cpu {
namespace {

struct Registers {
  uint32_t eax = 0, ebx = 0, ecx = 0, edx = 0;
};

Registers Cpuid(uint32_t leaf, uint32_t subleaf = 0) {
  Registers r;
  __cpuid_count(leaf, subleaf, r.eax, r.ebx, r.ecx, r.edx);
  return r;
}

bool Bit(uint32_t value, int bit) { return ((value >> bit) & 1u) != 0; }

// The extended control register XCR0: which register states the OS saves. Read with the
// raw instruction so that this file needs no -mxsave.
uint64_t ReadXcr0() {
  uint32_t low = 0, high = 0;
  __asm__ volatile("xgetbv" : "=a"(low), "=d"(high) : "c"(0));
  return (static_cast<uint64_t>(high) << 32) | low;
}

std::string Trimmed(const char* text) {
  std::string s(text);
  const size_t first = s.find_first_not_of(' ');
  const size_t last = s.find_last_not_of(' ');
  return first == std::string::npos ? std::string() : s.substr(first, last - first + 1);
}

}  // namespace

std::string CpuFeatures::FlagList() const {
  const std::pair<bool, const char*> flags[] = {
      {sse42, "sse4_2"},
      {avx, "avx"},
      {fma, "fma"},
      {avx2, "avx2"},
      {avx512f, "avx512f"},
      {avx512dq, "avx512dq"},
      {avx512cd, "avx512cd"},
      {avx512bw, "avx512bw"},
      {avx512vl, "avx512vl"},
      {avx512_vnni, "avx512_vnni"},
      {avx512_bf16, "avx512_bf16"},
      {avx512_fp16, "avx512_fp16"},
      {avx_vnni, "avx_vnni"},
      {amx_tile, "amx_tile"},
      {amx_bf16, "amx_bf16"},
      {amx_int8, "amx_int8"},
  };
  std::string list;
  for (const auto& [set, name] : flags) {
    if (!set) continue;
    if (!list.empty()) list += ' ';
    list += name;
  }
  return list.empty() ? "none beyond x86-64" : list;
}

const char* VectorIsaName(VectorIsa isa) {
  switch (isa) {
    case VectorIsa::kSse:
      return "sse4.2";
    case VectorIsa::kAvx:
      return "avx";
    case VectorIsa::kAvx2:
      return "avx2";
    case VectorIsa::kAvx512:
      return "avx512";
    case VectorIsa::kAvx512Bf16:
      return "avx512_bf16";
    case VectorIsa::kAmxBf16:
      return "amx_bf16";
  }
  return "unknown";
}

int Fp32Lanes(VectorIsa isa) {
  if (isa >= VectorIsa::kAvx512) return 16;
  if (isa >= VectorIsa::kAvx) return 8;
  return 4;
}

VectorIsa BestVectorIsa(const CpuFeatures& cpu) {
  const bool avx512 = cpu.avx2 && cpu.fma && cpu.avx512f && cpu.avx512dq && cpu.avx512cd &&
                      cpu.avx512bw && cpu.avx512vl;
  if (avx512 && cpu.amx_tile && cpu.amx_bf16) return VectorIsa::kAmxBf16;
  if (avx512 && cpu.avx512_bf16) return VectorIsa::kAvx512Bf16;
  if (avx512) return VectorIsa::kAvx512;
  if (cpu.avx2 && cpu.fma) return VectorIsa::kAvx2;
  if (cpu.avx) return VectorIsa::kAvx;
  return VectorIsa::kSse;
}

VectorIsa BestFp32Isa(const CpuFeatures& cpu) {
  const VectorIsa best = BestVectorIsa(cpu);
  return best > VectorIsa::kAvx512 ? VectorIsa::kAvx512 : best;
}

CpuFeatures ReadCpuFeatures() {
  CpuFeatures cpu;
  const Registers leaf0 = Cpuid(0);
  const uint32_t max_leaf = leaf0.eax;
  char vendor[13] = {};
  std::memcpy(vendor + 0, &leaf0.ebx, 4);
  std::memcpy(vendor + 4, &leaf0.edx, 4);
  std::memcpy(vendor + 8, &leaf0.ecx, 4);
  cpu.vendor = vendor;

  const uint32_t max_extended = Cpuid(0x80000000u).eax;
  if (max_extended >= 0x80000004u) {
    char brand[49] = {};
    for (uint32_t i = 0; i < 3; ++i) {
      const Registers r = Cpuid(0x80000002u + i);
      std::memcpy(brand + 16 * i + 0, &r.eax, 4);
      std::memcpy(brand + 16 * i + 4, &r.ebx, 4);
      std::memcpy(brand + 16 * i + 8, &r.ecx, 4);
      std::memcpy(brand + 16 * i + 12, &r.edx, 4);
    }
    cpu.model_name = Trimmed(brand);
  }
  if (max_leaf < 1) return cpu;

  const Registers leaf1 = Cpuid(1);
  const int base_family = static_cast<int>((leaf1.eax >> 8) & 0xF);
  const int base_model = static_cast<int>((leaf1.eax >> 4) & 0xF);
  cpu.family =
      base_family == 0xF ? base_family + static_cast<int>((leaf1.eax >> 20) & 0xFF) : base_family;
  cpu.model = (base_family == 0x6 || base_family == 0xF)
                  ? base_model + (static_cast<int>((leaf1.eax >> 16) & 0xF) << 4)
                  : base_model;

  cpu.sse42 = Bit(leaf1.ecx, 20);
  const bool osxsave = Bit(leaf1.ecx, 27);
  const uint64_t xcr0 = osxsave ? ReadXcr0() : 0;
  // SSE and AVX state (bits 1, 2); AVX-512's opmask and upper ZMM state (bits 5, 6, 7);
  // AMX's tile configuration and data (bits 17, 18).
  const bool os_avx = (xcr0 & 0x6) == 0x6;
  const bool os_avx512 = os_avx && (xcr0 & 0xE0) == 0xE0;
  const bool os_amx = (xcr0 & 0x60000) == 0x60000;

  cpu.avx = os_avx && Bit(leaf1.ecx, 28);
  cpu.fma = cpu.avx && Bit(leaf1.ecx, 12);
  if (max_leaf < 7) return cpu;

  const Registers leaf7 = Cpuid(7, 0);
  cpu.avx2 = cpu.avx && Bit(leaf7.ebx, 5);
  cpu.avx512f = os_avx512 && Bit(leaf7.ebx, 16);
  cpu.avx512dq = cpu.avx512f && Bit(leaf7.ebx, 17);
  cpu.avx512cd = cpu.avx512f && Bit(leaf7.ebx, 28);
  cpu.avx512bw = cpu.avx512f && Bit(leaf7.ebx, 30);
  cpu.avx512vl = cpu.avx512f && Bit(leaf7.ebx, 31);
  cpu.avx512_vnni = cpu.avx512f && Bit(leaf7.ecx, 11);
  cpu.avx512_fp16 = cpu.avx512f && Bit(leaf7.edx, 23);
  cpu.amx_bf16 = os_amx && Bit(leaf7.edx, 22);
  cpu.amx_tile = os_amx && Bit(leaf7.edx, 24);
  cpu.amx_int8 = os_amx && Bit(leaf7.edx, 25);
  if (leaf7.eax >= 1) {
    const Registers leaf7_1 = Cpuid(7, 1);
    cpu.avx_vnni = cpu.avx && Bit(leaf7_1.eax, 4);
    cpu.avx512_bf16 = cpu.avx512f && Bit(leaf7_1.eax, 5);
  }
  return cpu;
}

const CpuFeatures& CpuFeaturesOfThisMachine() {
  static const CpuFeatures* const features = new CpuFeatures(ReadCpuFeatures());
  return *features;
}

}  // namespace mtrain::cpu
