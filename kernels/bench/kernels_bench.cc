// Benchmarks the CPU matmul and attention kernels at GPT-2-small-like shapes (scaled down
// in batch) and prints one table row per kernel: milliseconds per call and GFLOP/s.
//
// The element-wise kernels (GeLU, SwiGLU) are timed on normally distributed inputs, as a
// layer's activations are, and reported in GB/s of the bytes they must move (the last
// column then reads GB/s, not GFLOP/s): they are bandwidth-bound when nothing goes wrong.
// Run on an Intel processor, these rows are what caught GCC's partial-redundancy
// elimination turning the exp clamp into denormal products (kernels/BUILD, FAST_EXP_COPTS).
//
// FLOP counts: a multiply-add is 2 FLOPs. Matmul forward 2 M K N, backward 4 M K N (d_in and
// d_weight). Attention counts only the causal half of the S x S scores it computes: forward
// 4 D per (query, key) pair (q.k and p v), backward 8 D (dP, dV, dQ, dK).
#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "kernels/attention.h"
#include "kernels/bidirectional_attention.h"
#include "kernels/dropout.h"
#include "kernels/gelu.h"
#include "kernels/matmul.h"
#include "kernels/swiglu.h"

namespace mtrain::cpu {
namespace {

std::vector<float> RandomFloats(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<float> values(n);
  for (float& value : values) value = uniform(rng);
  return values;
}

// Median seconds per call: two untimed warm-up calls (page faults, BLAS buffers), then as
// many timed calls as fit in about two seconds, at least five. The median shrugs off calls
// slowed down by other work on the machine.
double SecondsPerCall(const std::function<void()>& call) {
  call();
  call();
  using Clock = std::chrono::steady_clock;
  std::vector<double> seconds;
  double total = 0;
  while (seconds.size() < 5 || total < 2.0) {
    const Clock::time_point start = Clock::now();
    call();
    seconds.push_back(std::chrono::duration<double>(Clock::now() - start).count());
    total += seconds.back();
  }
  std::nth_element(seconds.begin(), seconds.begin() + seconds.size() / 2, seconds.end());
  return seconds[seconds.size() / 2];
}

void PrintRow(const std::string& kernel, const std::string& shape, double flops, double seconds) {
  std::printf("| %-22s | %-26s | %9.3f | %8.1f |\n", kernel.c_str(), shape.c_str(), seconds * 1e3,
              flops / seconds * 1e-9);
}

std::vector<float> NormalFloats(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> values(n);
  for (float& value : values) value = normal(rng);
  return values;
}

// GeLU on the FFN's activations of 2,048 tokens at h768 (2,048 x 3,072), and SwiGLU on a
// Llama FFN of the same width; bytes are every element read and written once.
void BenchElementwise() {
  const int rows = 2048, width = 3072;
  const size_t n = static_cast<size_t>(rows) * width;
  const std::vector<float> x = NormalFloats(2 * n, 7);
  const std::vector<float> d_y = NormalFloats(n, 8);
  std::vector<float> y(n), d_x(2 * n, 0.0f);
  const std::string shape = "2048 x 3072, N(0,1)";
  const double bytes = 4.0 * n;
  PrintRow("gelu forward (GB/s)", shape, 2 * bytes,
           SecondsPerCall([&] { GeluForward(x.data(), y.data(), n); }));
  PrintRow("gelu backward (GB/s)", shape, 4 * bytes,
           SecondsPerCall([&] { GeluBackward(d_y.data(), x.data(), d_x.data(), n); }));
  PrintRow("swiglu forward (GB/s)", shape, 3 * bytes,
           SecondsPerCall([&] { SwiGluForward(x.data(), y.data(), rows, width); }));
  PrintRow("swiglu backward (GB/s)", shape, 6 * bytes,
           SecondsPerCall([&] { SwiGluBackward(d_y.data(), x.data(), d_x.data(), rows, width); }));
}

void BenchMatmul() {
  const int M = 1024, K = 768, N = 3072;
  const std::vector<float> in = RandomFloats(static_cast<size_t>(M) * K, 1);
  const std::vector<float> weight = RandomFloats(static_cast<size_t>(N) * K, 2);
  const std::vector<float> bias = RandomFloats(N, 3);
  const std::vector<float> d_out = RandomFloats(static_cast<size_t>(M) * N, 4);
  std::vector<float> out(static_cast<size_t>(M) * N);
  std::vector<float> d_in(in.size(), 0.0f), d_weight(weight.size(), 0.0f), d_bias(N, 0.0f);
  const std::string shape = "M=1024 K=768 N=3072";
  const double mkn = static_cast<double>(M) * K * N;
  PrintRow("matmul forward", shape, 2 * mkn, SecondsPerCall([&] {
             MatmulForward(in.data(), weight.data(), bias.data(), out.data(), M, K, N);
           }));
  PrintRow("matmul backward", shape, 4 * mkn, SecondsPerCall([&] {
             MatmulBackward(d_out.data(), in.data(), weight.data(), d_in.data(), d_weight.data(),
                            d_bias.data(), M, K, N);
           }));
}

void BenchAttention(const AttentionShape& shape, float dropout_p) {
  const size_t tokens = static_cast<size_t>(shape.batch) * shape.seq;
  const size_t width = static_cast<size_t>(shape.heads) * shape.head_dim;
  const size_t lse_size = static_cast<size_t>(shape.batch) * shape.heads * shape.seq;
  const std::vector<float> qkv = RandomFloats(tokens * 3 * width, 5);
  const std::vector<float> d_out = RandomFloats(tokens * width, 6);
  std::vector<float> out(tokens * width), lse(lse_size);
  std::vector<float> d_qkv(qkv.size(), 0.0f);
  const AttentionDropout dropout{dropout_p, DropoutKey(1, 2), 0, 0};
  const double pairs =
      static_cast<double>(shape.batch) * shape.heads * shape.seq * (shape.seq + 1) / 2;
  char shape_text[64];
  std::snprintf(shape_text, sizeof(shape_text), "B=%d S=%d H=%d D=%d p=%.1f", shape.batch,
                shape.seq, shape.heads, shape.head_dim, dropout_p);
  PrintRow("attention forward", shape_text, 4.0 * shape.head_dim * pairs, SecondsPerCall([&] {
             AttentionForward(qkv.data(), out.data(), lse.data(), shape, dropout);
           }));
  AttentionForward(qkv.data(), out.data(), lse.data(), shape, dropout);
  PrintRow("attention backward", shape_text, 8.0 * shape.head_dim * pairs, SecondsPerCall([&] {
             AttentionBackward(d_out.data(), qkv.data(), out.data(), lse.data(), d_qkv.data(),
                               shape, dropout);
           }));
}

// BERT's bidirectional core over sequences whose real lengths are `fill` of S (the rest
// padding): FLOPs count the real query-key pairs only.
void BenchBidirectionalAttention(const AttentionShape& shape, double fill) {
  const size_t tokens = static_cast<size_t>(shape.batch) * shape.seq;
  const size_t width = static_cast<size_t>(shape.heads) * shape.head_dim;
  const size_t lse_size = static_cast<size_t>(shape.batch) * shape.heads * shape.seq;
  const std::vector<float> qkv = RandomFloats(tokens * 3 * width, 7);
  const std::vector<float> d_out = RandomFloats(tokens * width, 8);
  std::vector<float> out(tokens * width), lse(lse_size);
  std::vector<float> d_qkv(qkv.size(), 0.0f);
  const AttentionDropout dropout{0.1f, DropoutKey(1, 2), 0, 0};
  std::vector<int32_t> lengths(shape.batch, static_cast<int32_t>(fill * shape.seq));
  double pairs = 0;
  for (int32_t length : lengths) pairs += static_cast<double>(shape.heads) * length * length;
  char shape_text[64];
  std::snprintf(shape_text, sizeof(shape_text), "B=%d S=%d H=%d D=%d len=%d", shape.batch,
                shape.seq, shape.heads, shape.head_dim, lengths[0]);
  PrintRow("bidirectional forward", shape_text, 4.0 * shape.head_dim * pairs, SecondsPerCall([&] {
             BidirectionalAttentionForward(qkv.data(), lengths.data(), out.data(), lse.data(),
                                           shape, dropout);
           }));
  PrintRow("bidirectional backward", shape_text, 8.0 * shape.head_dim * pairs, SecondsPerCall([&] {
             BidirectionalAttentionBackward(d_out.data(), qkv.data(), out.data(), lse.data(),
                                            lengths.data(), d_qkv.data(), shape, dropout);
           }));
}

}  // namespace
}  // namespace mtrain::cpu

// `kernels_bench [GROUP]`: only the rows of one group (matmul, elementwise, attention,
// bidirectional), e.g. to profile one kernel under `perf record`.
int main(int argc, char** argv) {
  const std::string only = argc > 1 ? argv[1] : "";
  const auto wanted = [&](const char* group) { return only.empty() || only == group; };
  std::printf("float32; OpenMP threads %d, OpenBLAS threads %d\n\n", omp_get_max_threads(),
              openblas_get_num_threads());
  std::printf("| %-22s | %-26s | %9s | %8s |\n", "kernel", "shape", "ms/call", "GFLOP/s");
  std::printf("|%s|%s|%s|%s|\n", std::string(24, '-').c_str(), std::string(28, '-').c_str(),
              std::string(11, '-').c_str(), std::string(10, '-').c_str());
  if (wanted("matmul")) mtrain::cpu::BenchMatmul();
  if (wanted("elementwise")) mtrain::cpu::BenchElementwise();
  // The h768 model's heads at two sequence lengths (issue 17's small and large shapes).
  for (const mtrain::cpu::AttentionShape shape : {mtrain::cpu::AttentionShape{4, 256, 12, 64},
                                                  mtrain::cpu::AttentionShape{2, 1024, 12, 64}}) {
    if (!wanted("attention")) break;
    mtrain::cpu::BenchAttention(shape, 0.0f);
    mtrain::cpu::BenchAttention(shape, 0.1f);
  }
  // BERT-base's heads at BERT's sequence lengths, full and 80% filled.
  for (const mtrain::cpu::AttentionShape shape :
       {mtrain::cpu::AttentionShape{8, 128, 12, 64}, mtrain::cpu::AttentionShape{2, 512, 12, 64}}) {
    if (!wanted("bidirectional")) break;
    mtrain::cpu::BenchBidirectionalAttention(shape, 1.0);
    mtrain::cpu::BenchBidirectionalAttention(shape, 0.8);
  }
  return 0;
}
