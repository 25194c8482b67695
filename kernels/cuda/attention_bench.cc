// Times the CUDA attention in bf16 at GPT-2-small training shapes, both implementations
// (the hand-written tensor-core kernels, and cuDNN's fused attention where it runs: without
// attention dropout), and prints one table row per pass: median milliseconds per call and
// TFLOP/s. The backward overwrites d_qkv, as the engine calls it.
//   bazel run -c opt //kernels/cuda:attention_bench
// Compare with PyTorch on the same GPU, e.g. for B=16, H=12, S=1024, D=64:
//   q, k, v = (torch.randn(16, 12, 1024, 64, device="cuda", dtype=torch.bfloat16,
//                          requires_grad=True) for _ in range(3))
//   o = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
//   o.backward(torch.randn_like(o))   # time each with CUDA events
//
// FLOP counts: causal attention computes half of the S x S scores; the forward does two
// products of 2 S^2 D / 2 FLOPs each (Q K^T and P V): 4 B H S^2 D / 2. The backward counts
// 2.5 times the forward (five products: dV, dP, dQ, dK and the recomputed scores), the
// usual FlashAttention convention. Ours recomputes the scores and dP a second time for dQ
// (seven products), so its TFLOP/s are per the conventional count, not per FLOPs executed.
// Timing: 5 warm-up calls, then the median of 20 calls, each between two CUDA events.
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda/attention.h"

namespace mtrain::cuda {
namespace {

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

// Device buffer of n bf16 values, uniform in [-1, 1].
class Bf16Buffer {
 public:
  Bf16Buffer(size_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
    std::vector<__nv_bfloat16> host(n);
    for (__nv_bfloat16& x : host) x = __float2bfloat16(uniform(rng));
    ok_ = Check(cudaMalloc(&data_, n * sizeof(__nv_bfloat16)), "cudaMalloc") &&
          Check(cudaMemcpy(data_, host.data(), n * sizeof(__nv_bfloat16), cudaMemcpyHostToDevice),
                "cudaMemcpy");
  }
  ~Bf16Buffer() { cudaFree(data_); }
  Bf16Buffer(const Bf16Buffer&) = delete;
  Bf16Buffer& operator=(const Bf16Buffer&) = delete;
  __nv_bfloat16* get() { return static_cast<__nv_bfloat16*>(data_); }
  bool ok() const { return ok_; }

 private:
  void* data_ = nullptr;
  bool ok_ = false;
};

// Median milliseconds of `call` (which returns false on failure), or a negative value.
double MedianMilliseconds(const std::function<bool()>& call) {
  constexpr int kWarmups = 5, kTimed = 20;
  for (int i = 0; i < kWarmups; ++i) {
    if (!call()) return -1;
  }
  cudaEvent_t start, stop;
  if (!Check(cudaEventCreate(&start), "cudaEventCreate") ||
      !Check(cudaEventCreate(&stop), "cudaEventCreate")) {
    return -1;
  }
  std::vector<double> times;
  for (int i = 0; i < kTimed; ++i) {
    float ms = 0;
    if (!Check(cudaEventRecord(start, nullptr), "cudaEventRecord") || !call() ||
        !Check(cudaEventRecord(stop, nullptr), "cudaEventRecord") ||
        !Check(cudaEventSynchronize(stop), "cudaEventSynchronize") ||
        !Check(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime")) {
      return -1;
    }
    times.push_back(ms);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  std::sort(times.begin(), times.end());
  return (times[kTimed / 2 - 1] + times[kTimed / 2]) / 2;
}

bool Bench(const AttentionShape& shape, float dropout_p, AttentionImplementation implementation) {
  SetAttentionImplementation(implementation);
  const std::string path = AttentionPathFor<__nv_bfloat16>(shape, dropout_p);
  if (implementation == AttentionImplementation::kAuto && path.rfind("cuDNN", 0) != 0) {
    std::printf("| B%d H%d S%d D%d p%.1f: cuDNN does not run it: %s |\n", shape.batch, shape.heads,
                shape.seq, shape.head_dim, dropout_p, path.c_str());
    return true;
  }
  const size_t qkv_size =
      size_t(shape.batch) * shape.seq * (shape.heads + 2 * shape.kv_head_count()) * shape.head_dim;
  const size_t out_size = size_t(shape.batch) * shape.seq * shape.heads * shape.head_dim;
  Bf16Buffer qkv(qkv_size, 1), out(out_size, 2), d_out(out_size, 3), d_qkv(qkv_size, 4);
  float* lse = nullptr;
  if (!qkv.ok() || !out.ok() || !d_out.ok() || !d_qkv.ok() ||
      !Check(cudaMalloc(reinterpret_cast<void**>(&lse),
                        size_t(shape.batch) * shape.heads * shape.seq * sizeof(float)),
             "cudaMalloc")) {
    return false;
  }
  AttentionDropout dropout;
  dropout.p = dropout_p;
  dropout.key = 0x5eed;
  const double forward_ms = MedianMilliseconds([&] {
    return Check(
        FlashAttentionForward<__nv_bfloat16>(qkv.get(), out.get(), lse, shape, dropout, nullptr));
  });
  const double backward_ms = MedianMilliseconds([&] {
    return Check(FlashAttentionBackward<__nv_bfloat16>(d_out.get(), qkv.get(), out.get(), lse,
                                                       d_qkv.get(), shape, dropout, nullptr,
                                                       /*accumulate=*/false));
  });
  cudaFree(lse);
  if (forward_ms < 0 || backward_ms < 0) return false;
  const double forward_flops =
      4.0 * shape.batch * shape.heads * double(shape.seq) * shape.seq * shape.head_dim / 2;
  char label[96];
  std::snprintf(label, sizeof(label), "%s B%d H%d S%d D%d p%.1f",
                implementation == AttentionImplementation::kAuto ? "cuDNN" : "ours", shape.batch,
                shape.heads, shape.seq, shape.head_dim, dropout_p);
  std::printf("| %-26s | forward  | %8.3f | %7.1f |\n", label, forward_ms,
              forward_flops / (forward_ms * 1e-3) * 1e-12);
  std::printf("| %-26s | backward | %8.3f | %7.1f |\n", label, backward_ms,
              2.5 * forward_flops / (backward_ms * 1e-3) * 1e-12);
  return true;
}

int Main() {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::fprintf(stderr, "attention_bench: needs a GPU\n");
    return 1;
  }
  cudaDeviceProp prop;
  if (!Check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties")) return 1;
  std::printf("attention, bf16, causal, on %s\n", prop.name);
  std::printf("| %-26s | pass     | %8s | %7s |\n", "shape", "ms", "TFLOP/s");
  std::printf("|%s|----------|----------|---------|\n", std::string(28, '-').c_str());
  // GPT-2 124M training: B=16, S=1024, 12 heads of 64; then the same width as 6 heads of
  // 128; each without and with attention dropout (which hashes every probability).
  // GPT 1.3B's (B=4, S=2048, 16 heads of 128) and a Llama-style GQA shape follow.
  const AttentionShape shapes[] = {
      {16, 1024, 12, 64}, {16, 1024, 6, 128}, {4, 2048, 16, 128}, {4, 2048, 32, 64, 8}};
  for (const AttentionShape& shape : shapes) {
    for (float p : {0.0f, 0.1f}) {
      if (shape.kv_heads > 0 && p > 0) continue;
      for (auto implementation :
           {AttentionImplementation::kHandWritten, AttentionImplementation::kAuto}) {
        if (p > 0 && implementation == AttentionImplementation::kAuto) continue;
        // Ours runs grouped-query heads on the scalar kernels: too slow to time here.
        if (shape.kv_heads > 0 && implementation == AttentionImplementation::kHandWritten) {
          continue;
        }
        if (!Bench(shape, p, implementation)) return 1;
      }
    }
  }
  return 0;
}

}  // namespace
}  // namespace mtrain::cuda

int main() { return mtrain::cuda::Main(); }
