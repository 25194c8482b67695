// Times the CUDA LayerNorm on bf16 at GPT-2-small and wider training shapes and prints one
// table row per pass: median milliseconds per call, the bytes the pass must move per
// millisecond (GB/s), and that as a fraction of the device-to-device cudaMemcpy bandwidth
// measured in the same run (the practical ceiling of a bandwidth-bound kernel).
//   bazel run -c opt //kernels/cuda:layernorm_bench
// Without a GPU it says so and exits 0.
//
// Bytes counted (the minimum each pass must move; scratch traffic inside the backward,
// its per-block partial parameter gradients, is not counted):
//   forward:  reads x, gamma, beta; writes y, mean, rstd.
//   backward: reads d_y, x, d_residual, gamma, mean, rstd; writes d_x; reads and writes
//             d_gamma, d_beta (float). "accumulate" is d_residual = null (d_x += ...),
//             which reads d_x in its place: the same bytes.
// cudaMemcpy device-to-device of N bytes moves 2N (a read and a write).
// Timing: 10 warm-up calls, then the median of 50 calls enqueued back to back, each between
// two CUDA events. Like the CUDA engine, the bench keeps freed stream-ordered memory in the
// device's pool (the backward's scratch comes from cudaMallocAsync).
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <random>
#include <vector>

#include "kernels/cuda/layernorm.h"

namespace mtrain::cuda {
namespace {

constexpr int kWarmups = 10;
constexpr int kTimed = 50;

bool Check(cudaError_t error, const char* what) {
  if (error == cudaSuccess) return true;
  std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(error));
  return false;
}

bool Check(const absl::Status& status) {
  if (status.ok()) return true;
  std::fprintf(stderr, "%s\n", status.ToString().c_str());
  return false;
}

// Device buffer of n elements of T; bf16 ones filled uniform in [lo, hi].
template <typename T>
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t n) : n_(n) {
    ok_ = Check(cudaMalloc(&data_, std::max<size_t>(n, 1) * sizeof(T)), "cudaMalloc");
  }
  DeviceBuffer(size_t n, uint32_t seed, float lo, float hi) : DeviceBuffer(n) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> uniform(lo, hi);
    std::vector<T> host(n);
    for (T& v : host) v = T(uniform(rng));
    ok_ = ok_ && Check(cudaMemcpy(data_, host.data(), n * sizeof(T), cudaMemcpyHostToDevice),
                       "cudaMemcpy");
  }
  ~DeviceBuffer() { cudaFree(data_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  T* get() { return static_cast<T*>(data_); }
  bool ok() const { return ok_; }

 private:
  size_t n_;
  void* data_ = nullptr;
  bool ok_ = false;
};

// Median milliseconds of `call` (which returns false on failure), or a negative value.
// The timed calls are enqueued back to back, each between two events, and waited for once
// at the end: each time is the GPU's, not the host's time to launch it.
double MedianMilliseconds(const std::function<bool()>& call) {
  for (int i = 0; i < kWarmups; ++i) {
    if (!call()) return -1;
  }
  std::vector<cudaEvent_t> events(2 * kTimed);
  for (cudaEvent_t& event : events) {
    if (!Check(cudaEventCreate(&event), "cudaEventCreate")) return -1;
  }
  bool ok = true;
  for (int i = 0; i < kTimed && ok; ++i) {
    ok = Check(cudaEventRecord(events[2 * i], nullptr), "cudaEventRecord") && call() &&
         Check(cudaEventRecord(events[2 * i + 1], nullptr), "cudaEventRecord");
  }
  ok = ok && Check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  std::vector<double> times;
  for (int i = 0; i < kTimed && ok; ++i) {
    float ms = 0;
    ok = Check(cudaEventElapsedTime(&ms, events[2 * i], events[2 * i + 1]), "cudaEventElapsedTime");
    times.push_back(ms);
  }
  for (cudaEvent_t event : events) cudaEventDestroy(event);
  if (!ok) return -1;
  std::sort(times.begin(), times.end());
  return (times[kTimed / 2 - 1] + times[kTimed / 2]) / 2;
}

// GB/s of a device-to-device cudaMemcpy of 1 GiB (a read and a write of each byte).
double MemcpyGigabytesPerSecond() {
  constexpr size_t kBytes = size_t{1} << 30;
  DeviceBuffer<char> from(kBytes), to(kBytes);
  if (!from.ok() || !to.ok()) return -1;
  const double ms = MedianMilliseconds([&] {
    return Check(cudaMemcpyAsync(to.get(), from.get(), kBytes, cudaMemcpyDeviceToDevice, nullptr),
                 "cudaMemcpyAsync");
  });
  return ms > 0 ? 2.0 * kBytes / (ms * 1e-3) * 1e-9 : -1;
}

void PrintRow(int rows, int C, const char* pass, double ms, double bytes, double memcpy_gbps) {
  const double gbps = bytes / (ms * 1e-3) * 1e-9;
  std::printf("| %5d x %-5d | %-20s | %7.4f | %7.0f | %5.2f |\n", rows, C, pass, ms, gbps,
              gbps / memcpy_gbps);
}

bool Bench(int rows, int C, double memcpy_gbps) {
  using T = __nv_bfloat16;
  const size_t n = size_t(rows) * C;
  DeviceBuffer<T> x(n, 1, -3, 5), gamma(C, 2, 0.5, 1.5), beta(C, 3, -0.5, 0.5), y(n),
      d_y(n, 4, -1, 1), d_residual(n, 5, -0.1f, 0.1f), d_x(n, 6, -0.1f, 0.1f);
  DeviceBuffer<float> mean(rows), rstd(rows), d_gamma(C), d_beta(C);
  if (!x.ok() || !gamma.ok() || !beta.ok() || !y.ok() || !d_y.ok() || !d_residual.ok() ||
      !d_x.ok() || !mean.ok() || !rstd.ok() || !d_gamma.ok() || !d_beta.ok() ||
      !Check(cudaMemset(d_gamma.get(), 0, C * sizeof(float)), "cudaMemset") ||
      !Check(cudaMemset(d_beta.get(), 0, C * sizeof(float)), "cudaMemset")) {
    return false;
  }
  const double forward_ms = MedianMilliseconds([&] {
    return Check(LayerNormForward<T>(x.get(), gamma.get(), beta.get(), y.get(), mean.get(),
                                     rstd.get(), rows, C, 1e-5f, nullptr));
  });
  const double residual_ms = MedianMilliseconds([&] {
    return Check(LayerNormBackward<T>(d_y.get(), x.get(), gamma.get(), mean.get(), rstd.get(),
                                      d_residual.get(), d_x.get(), d_gamma.get(), d_beta.get(),
                                      rows, C, nullptr));
  });
  const double accumulate_ms = MedianMilliseconds([&] {
    return Check(LayerNormBackward<T>(d_y.get(), x.get(), gamma.get(), mean.get(), rstd.get(),
                                      /*d_residual=*/nullptr, d_x.get(), d_gamma.get(),
                                      d_beta.get(), rows, C, nullptr));
  });
  if (forward_ms < 0 || residual_ms < 0 || accumulate_ms < 0) return false;
  const double activations = double(n) * sizeof(T), stats = 2.0 * rows * sizeof(float);
  const double forward_bytes = 2 * activations + stats + 2.0 * C * sizeof(T);
  const double backward_bytes = 4 * activations + stats + C * sizeof(T) + 4.0 * C * sizeof(float);
  PrintRow(rows, C, "forward", forward_ms, forward_bytes, memcpy_gbps);
  PrintRow(rows, C, "backward, d_residual", residual_ms, backward_bytes, memcpy_gbps);
  PrintRow(rows, C, "backward, accumulate", accumulate_ms, backward_bytes, memcpy_gbps);
  return true;
}

int Main() {
  int devices = 0;
  const cudaError_t error = cudaGetDeviceCount(&devices);
  if (error != cudaSuccess || devices == 0) {
    std::printf("layernorm_bench: needs a GPU (%s); nothing to time\n",
                error != cudaSuccess ? cudaGetErrorString(error) : "no CUDA device");
    return 0;
  }
  cudaDeviceProp prop;
  if (!Check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties")) return 1;
  // As the CUDA engine does (cuda_engine.cc): keep freed stream-ordered memory in the pool,
  // so the backward's scratch is not mapped afresh after every synchronisation.
  cudaMemPool_t pool = nullptr;
  uint64_t keep_everything = UINT64_MAX;
  if (!Check(cudaDeviceGetDefaultMemPool(&pool, 0), "cudaDeviceGetDefaultMemPool") ||
      !Check(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep_everything),
             "cudaMemPoolSetAttribute")) {
    return 1;
  }
  const double memcpy_gbps = MemcpyGigabytesPerSecond();
  if (memcpy_gbps < 0) return 1;
  std::printf("LayerNorm, bf16, on %s; device-to-device cudaMemcpy: %.0f GB/s\n", prop.name,
              memcpy_gbps);
  std::printf("| %-13s | %-20s | %7s | %7s | %5s |\n", "rows x C", "pass", "ms", "GB/s", "/copy");
  std::printf("|---------------|----------------------|---------|---------|-------|\n");
  // GPT-2 124M's activations (B=16, S=1024, C=768), and a wider model's (B=8, C=2048).
  if (!Bench(16384, 768, memcpy_gbps)) return 1;
  if (!Bench(8192, 2048, memcpy_gbps)) return 1;
  return 0;
}

}  // namespace
}  // namespace mtrain::cuda

int main() { return mtrain::cuda::Main(); }
