// The fp32 GEMM libraries side by side as the engine calls them (issue 32): MatmulForward and
// MatmulBackward (rows sliced across the OpenMP threads) at the linear layers' shapes of the
// CPU benchmark's three widths (tests/bench/cpu_vs_pytorch.py: 2,048 tokens; QKV, attention
// projection, FC, FC projection, a 256-wide head), each through OpenBLAS and through oneDNN,
// interleaved, three rounds. Prints GFLOP/s a width and overall, and the library
// cpu_gemm_library.h chose for this processor: the measurement behind that choice.
//   bazel run -c opt //kernels/bench:gemm_libraries_bench
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <vector>

#include "kernels/cpu_gemm_library.h"
#include "kernels/matmul.h"

namespace mtrain::cpu {
namespace {

struct LinearShape {
  int in;
  int out;
};

std::vector<float> RandomFloats(size_t n, std::mt19937_64& rng) {
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<float> values(n);
  for (float& value : values) value = uniform(rng);
  return values;
}

// Seconds of the fastest of 6 calls (after one untimed) of forward + backward at one shape.
double LayerSeconds(const LinearShape& shape, int tokens) {
  std::mt19937_64 rng(1);
  const std::vector<float> in = RandomFloats(static_cast<size_t>(tokens) * shape.in, rng);
  const std::vector<float> weight = RandomFloats(static_cast<size_t>(shape.out) * shape.in, rng);
  const std::vector<float> d_out = RandomFloats(static_cast<size_t>(tokens) * shape.out, rng);
  std::vector<float> out(d_out.size()), d_in(in.size()), d_weight(weight.size());
  auto step = [&] {
    MatmulForward<float>(in.data(), weight.data(), nullptr, out.data(), tokens, shape.in,
                         shape.out);
    MatmulBackward<float>(d_out.data(), in.data(), weight.data(), d_in.data(), d_weight.data(),
                          nullptr, tokens, shape.in, shape.out);
  };
  step();
  double fastest = 1e30;
  for (int call = 0; call < 6; ++call) {
    const auto start = std::chrono::steady_clock::now();
    step();
    fastest = std::min(
        fastest, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  return fastest;
}

void Run() {
  const GemmKernelChoice& choice = EnsureBestGemmKernel();
  std::printf("%s\nOpenMP threads %d; GFLOP/s of forward + backward (3 GEMMs a layer)\n\n",
              choice.Describe().c_str(), omp_get_max_threads());
  constexpr int kTokens = 2048;
  const Fp32GemmLibrary libraries[] = {Fp32GemmLibrary::kOpenBlas, Fp32GemmLibrary::kOneDnn};
  const char* names[] = {"OpenBLAS", "oneDNN"};
  for (int round = 1; round <= 3; ++round) {
    double total_flops = 0, total_seconds[2] = {0, 0};
    for (const int h : {256, 512, 768}) {
      const LinearShape layers[] = {{h, 3 * h}, {h, h}, {h, 4 * h}, {4 * h, h}, {h, 256}};
      double flops = 0, seconds[2] = {0, 0};
      for (const LinearShape& layer : layers) {
        flops += 6.0 * kTokens * layer.in * layer.out;
        for (int library = 0; library < 2; ++library) {
          UseFp32GemmLibraryForTesting(libraries[library]);
          seconds[library] += LayerSeconds(layer, kTokens);
        }
      }
      std::printf("round %d h%-4d %s %6.1f   %s %6.1f\n", round, h, names[0],
                  flops / seconds[0] * 1e-9, names[1], flops / seconds[1] * 1e-9);
      total_flops += flops;
      total_seconds[0] += seconds[0];
      total_seconds[1] += seconds[1];
    }
    std::printf("round %d all   %s %6.1f   %s %6.1f\n\n", round, names[0],
                total_flops / total_seconds[0] * 1e-9, names[1],
                total_flops / total_seconds[1] * 1e-9);
  }
  UseFp32GemmLibraryForTesting(choice.fp32_library);
}

}  // namespace
}  // namespace mtrain::cpu

int main() {
  mtrain::cpu::Run();
  return 0;
}
