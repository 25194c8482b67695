#include "kernels/cpu_gemm_library.h"

#include <cblas.h>
#include <dlfcn.h>
#include <oneapi/dnnl/dnnl.h>
#include <strings.h>

#include <atomic>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

// OpenBLAS's DYNAMIC_ARCH start-up, exported by its shared library but not declared in
// cblas.h: quit forgets the chosen kernel table, init chooses again (reading
// OPENBLAS_CORETYPE). Weak, so that a build of OpenBLAS without DYNAMIC_ARCH (one kernel,
// fixed at its build) links too; the choice is then reported, not changed.
extern "C" {
void gotoblas_dynamic_init(void) __attribute__((weak));
void gotoblas_dynamic_quit(void) __attribute__((weak));
}

namespace mtrain::cpu {
namespace {

bool SameName(const std::string& a, const std::string& b) {
  return strcasecmp(a.c_str(), b.c_str()) == 0;
}

// The library's version from its configuration string ("OpenBLAS 0.3.21 NO_LAPACKE
// DYNAMIC_ARCH ...").
std::string LibraryName() {
  const std::vector<std::string> words = absl::StrSplit(openblas_get_config(), ' ');
  if (words.size() >= 2 && words[0] == "OpenBLAS") return absl::StrCat(words[0], " ", words[1]);
  return "OpenBLAS";
}

// Whether this OpenBLAS was built with `core`'s kernels: each is a table named
// gotoblas_<CORE> in its dynamic symbols.
bool LibraryHasCore(const std::string& core) {
  const std::string symbol = absl::StrCat("gotoblas_", absl::AsciiStrToUpper(core));
  return dlsym(RTLD_DEFAULT, symbol.c_str()) != nullptr;
}

// Runs OpenBLAS's kernel choice again with OPENBLAS_CORETYPE=`core` (which must exist in
// the library: OpenBLAS exits the process on a name it does not know).
bool ReselectOpenBlasCore(const std::string& core) {
  if (gotoblas_dynamic_init == nullptr || gotoblas_dynamic_quit == nullptr) return false;
  if (!LibraryHasCore(core)) return false;
  const char* previous = std::getenv("OPENBLAS_CORETYPE");
  const std::string saved = previous != nullptr ? previous : "";
  setenv("OPENBLAS_CORETYPE", core.c_str(), 1);
  gotoblas_dynamic_quit();
  gotoblas_dynamic_init();
  // Child processes choose for themselves.
  if (previous != nullptr) {
    setenv("OPENBLAS_CORETYPE", saved.c_str(), 1);
  } else {
    unsetenv("OPENBLAS_CORETYPE");
  }
  return SameName(openblas_get_corename(), core);
}

std::string OneDnnName() {
  const dnnl_version_t* version = dnnl_version();
  return absl::StrCat("oneDNN ", version->major, ".", version->minor, ".", version->patch);
}

// oneDNN's name for the ISA it dispatches to on this processor (its own cpuid reading).
std::string OneDnnIsaName() {
  switch (dnnl_get_effective_cpu_isa()) {
    case dnnl_cpu_isa_sse41:
      return "sse41";
    case dnnl_cpu_isa_avx:
      return "avx";
    case dnnl_cpu_isa_avx2:
      return "avx2";
    case dnnl_cpu_isa_avx2_vnni:
      return "avx2_vnni";
    case dnnl_cpu_isa_avx512_mic:
    case dnnl_cpu_isa_avx512_mic_4ops:
      return "avx512_mic";
    case dnnl_cpu_isa_avx512_core:
      return "avx512_core";
    case dnnl_cpu_isa_avx512_core_vnni:
      return "avx512_core_vnni";
    case dnnl_cpu_isa_avx512_core_bf16:
      return "avx512_core_bf16";
    case dnnl_cpu_isa_avx512_core_amx:
      return "avx512_core_amx";
    default:
      return "unknown";
  }
}

// OpenBLAS's kernel, chosen from the processor's features (the header comment).
void ChooseOpenBlasKernel(const CpuFeatures& cpu, GemmKernelChoice& choice) {
  choice.openblas_library = LibraryName();
  choice.library_choice = openblas_get_corename();
  choice.how = "the library's own choice";
  const char* user_core = std::getenv("OPENBLAS_CORETYPE");
  if (user_core != nullptr && *user_core != '\0') {
    choice.how = absl::StrCat("OPENBLAS_CORETYPE=", user_core, " in the environment");
  } else {
    const std::string wanted = OpenBlasCoreFor(cpu);
    if (OpenBlasCoreIsa(wanted) > OpenBlasCoreIsa(choice.library_choice)) {
      if (ReselectOpenBlasCore(wanted)) {
        choice.how =
            absl::StrCat("forced from ", choice.library_choice, " by the processor's features");
      } else {
        choice.how = absl::StrCat("the library's own choice (", wanted,
                                  " is not in this build of it, or it cannot change kernels)");
      }
    }
  }
  choice.openblas_kernel = openblas_get_corename();
  choice.openblas_kernel_isa = OpenBlasCoreIsa(choice.openblas_kernel);
}

GemmKernelChoice Choose() {
  const CpuFeatures& cpu = CpuFeaturesOfThisMachine();
  GemmKernelChoice choice;
  choice.cpu_isa = BestFp32Isa(cpu);
  ChooseOpenBlasKernel(cpu, choice);

  choice.fp32_library = Fp32GemmLibraryFor(cpu);
  choice.library_how =
      absl::StrCat("by the processor's features (", VectorIsaName(choice.cpu_isa), ")");
  if (const char* user = std::getenv("MTRAIN_CPU_GEMM"); user != nullptr && *user != '\0') {
    if (SameName(user, "openblas")) {
      choice.fp32_library = Fp32GemmLibrary::kOpenBlas;
      choice.library_how = "MTRAIN_CPU_GEMM=openblas in the environment";
    } else if (SameName(user, "onednn")) {
      choice.fp32_library = Fp32GemmLibrary::kOneDnn;
      choice.library_how = "MTRAIN_CPU_GEMM=onednn in the environment";
    } else {
      choice.library_how = absl::StrCat(choice.library_how, "; MTRAIN_CPU_GEMM=", user,
                                        " ignored: neither openblas nor onednn");
    }
  }
  if (choice.fp32_library == Fp32GemmLibrary::kOneDnn) {
    choice.library = OneDnnName();
    choice.kernel = OneDnnIsaName();
    choice.kernel_isa = OneDnnIsa(choice.kernel);
  } else {
    choice.library = choice.openblas_library;
    choice.kernel = choice.openblas_kernel;
    choice.kernel_isa = choice.openblas_kernel_isa;
  }
  return choice;
}

// Tests' override of the library Sgemm runs: -1 for none.
std::atomic<int> sgemm_library_for_testing{-1};

// Chosen at load time, before main and before any thread: see the header.
[[maybe_unused]] const GemmKernelChoice& chosen_at_load = EnsureBestGemmKernel();

// fp32 FLOPs a cycle of a core with two vector FMA units (or a multiply and an add unit):
// what the warning compares.
int BestCaseFlopsPerCycle(VectorIsa isa) {
  return isa >= VectorIsa::kAvx2 ? 4 * Fp32Lanes(isa) : 2 * Fp32Lanes(isa);
}

}  // namespace

std::string GemmKernelChoice::Describe() const {
  const CpuFeatures& cpu = CpuFeaturesOfThisMachine();
  const std::string processor =
      absl::StrCat(", CPU ", VectorIsaName(BestVectorIsa(cpu)), " (",
                   cpu.model_name.empty() ? cpu.vendor : cpu.model_name, ")");
  if (fp32_library == Fp32GemmLibrary::kOpenBlas) {
    return absl::StrCat(library, ", kernel ", kernel, " (", VectorIsaName(kernel_isa), "; ", how,
                        "; the library ", library_how, ")", processor);
  }
  return absl::StrCat(library, ", kernel ", kernel, " (", VectorIsaName(kernel_isa),
                      "; the library ", library_how, "), ", openblas_library, " kernel ",
                      openblas_kernel, " for the rest (", how, ")", processor);
}

std::string GemmKernelChoice::Warning() const {
  if (!WeakerThanCpu()) return "";
  if (kernel_isa < cpu_isa && fp32_library == Fp32GemmLibrary::kOneDnn) {
    return absl::StrCat("oneDNN's GEMM kernel ", kernel, " uses ", VectorIsaName(kernel_isa),
                        " but this processor has ", VectorIsaName(cpu_isa),
                        ": matrix multiplies can run up to ",
                        BestCaseFlopsPerCycle(cpu_isa) / BestCaseFlopsPerCycle(kernel_isa),
                        "x slower than the hardware allows; unset ONEDNN_MAX_CPU_ISA or set "
                        "MTRAIN_CPU_GEMM=openblas");
  }
  return absl::StrCat("the GEMM kernel ", openblas_kernel, " uses ",
                      VectorIsaName(openblas_kernel_isa), " but this processor has ",
                      VectorIsaName(cpu_isa), " (", how, "): matrix multiplies can run up to ",
                      BestCaseFlopsPerCycle(cpu_isa) / BestCaseFlopsPerCycle(openblas_kernel_isa),
                      "x slower than the hardware allows; unset OPENBLAS_CORETYPE or set it to ",
                      OpenBlasCoreFor(CpuFeaturesOfThisMachine()));
}

VectorIsa OpenBlasCoreIsa(const std::string& core) {
  struct Entry {
    const char* core;
    VectorIsa isa;
  };
  // OpenBLAS's x86-64 cores (driver/others/dynamic.c) by the instructions of their SGEMM
  // kernels. Cooperlake and SapphireRapids run SkylakeX's SGEMM (their additions are bf16).
  static constexpr Entry kCores[] = {
      {"SapphireRapids", VectorIsa::kAvx512},
      {"Cooperlake", VectorIsa::kAvx512},
      {"SkylakeX", VectorIsa::kAvx512},
      {"Haswell", VectorIsa::kAvx2},
      {"Zen", VectorIsa::kAvx2},
      {"SandyBridge", VectorIsa::kAvx},
      {"Excavator", VectorIsa::kAvx},
      {"Steamroller", VectorIsa::kAvx},
      {"Piledriver", VectorIsa::kAvx},
      {"Bulldozer", VectorIsa::kAvx},
  };
  for (const Entry& entry : kCores) {
    if (SameName(core, entry.core)) return entry.isa;
  }
  return VectorIsa::kSse;  // Prescott, Core2, Penryn, Dunnington, Nehalem, Atom, Barcelona...
}

std::string OpenBlasCoreFor(const CpuFeatures& cpu) {
  switch (BestFp32Isa(cpu)) {
    case VectorIsa::kAvx512:
    case VectorIsa::kAvx512Bf16:
    case VectorIsa::kAmxBf16:
      return "SkylakeX";
    case VectorIsa::kAvx2:
      // The same kernels; Zen's blocking sizes suit AMD's caches.
      return cpu.vendor == "AuthenticAMD" || cpu.vendor == "HygonGenuine" ? "Zen" : "Haswell";
    case VectorIsa::kAvx:
      return "SandyBridge";
    case VectorIsa::kSse:
      break;
  }
  return "Prescott";
}

Fp32GemmLibrary Fp32GemmLibraryFor(const CpuFeatures& cpu) {
  return BestFp32Isa(cpu) >= VectorIsa::kAvx512 ? Fp32GemmLibrary::kOneDnn
                                                : Fp32GemmLibrary::kOpenBlas;
}

VectorIsa OneDnnIsa(const std::string& name) {
  if (name == "avx512_core_amx") return VectorIsa::kAmxBf16;
  if (name == "avx512_core_bf16") return VectorIsa::kAvx512Bf16;
  if (name == "avx512_core" || name == "avx512_core_vnni") return VectorIsa::kAvx512;
  if (name == "avx2" || name == "avx2_vnni") return VectorIsa::kAvx2;
  if (name == "avx") return VectorIsa::kAvx;
  return VectorIsa::kSse;  // sse41, avx512_mic (no BW/VL), unknown
}

void Sgemm(bool transpose_a, bool transpose_b, int m, int n, int k, float alpha, const float* a,
           int lda, const float* b, int ldb, float beta, float* c, int ldc) {
  const int forced = sgemm_library_for_testing.load(std::memory_order_relaxed);
  const Fp32GemmLibrary library =
      forced >= 0 ? static_cast<Fp32GemmLibrary>(forced) : EnsureBestGemmKernel().fp32_library;
  if (library == Fp32GemmLibrary::kOneDnn &&
      dnnl_sgemm(transpose_a ? 'T' : 'N', transpose_b ? 'T' : 'N', m, n, k, alpha, a, lda, b, ldb,
                 beta, c, ldc) == dnnl_success) {
    return;
  }
  // OpenBLAS, or oneDNN refused the arguments (it checks them as BLAS does; the callers
  // pass valid ones): OpenBLAS computes the same product.
  cblas_sgemm(CblasRowMajor, transpose_a ? CblasTrans : CblasNoTrans,
              transpose_b ? CblasTrans : CblasNoTrans, m, n, k, alpha, a, lda, b, ldb, beta, c,
              ldc);
}

void UseFp32GemmLibraryForTesting(Fp32GemmLibrary library) {
  sgemm_library_for_testing.store(static_cast<int>(library), std::memory_order_relaxed);
}

bool ReselectGemmKernelForTesting(const std::string& core) { return ReselectOpenBlasCore(core); }

const GemmKernelChoice& EnsureBestGemmKernel() {
  static const GemmKernelChoice* const choice = new GemmKernelChoice(Choose());
  return *choice;
}

}  // namespace mtrain::cpu
