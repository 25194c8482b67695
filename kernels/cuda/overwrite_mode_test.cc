// The backward kernels' overwrite mode (accumulate = false, which the CUDA model uses for
// temporaries that hold a single contribution) gives exactly what accumulating into a
// zeroed buffer gives: run both, the overwrite into a buffer full of garbage. Accumulating
// is what the kernels' own tests hold to the CPU.
#include <cuda_bf16.h>

#include <vector>

#include "kernels/cuda/cross_entropy.h"
#include "kernels/cuda/dropout.h"
#include "kernels/cuda/gelu.h"
#include "kernels/cuda/matmul.h"
#include "kernels/cuda/test_support.h"

namespace mtrain::cuda {
namespace {

using testing::DeviceArray;
using T = __nv_bfloat16;

std::vector<float> Garbage(size_t n) { return std::vector<float>(n, 7.0f); }
std::vector<float> Zeros(size_t n) { return std::vector<float>(n, 0.0f); }

TEST(OverwriteModeTest, GeluBackward) {
  MTRAIN_SKIP_WITHOUT_GPU();
  const size_t n = 100003;
  DeviceArray<T> x(testing::RandomFloats(n, 1, -4, 4)), d_y(testing::RandomFloats(n, 2, -1, 1));
  DeviceArray<T> accumulated(Zeros(n)), overwritten(Garbage(n));
  ASSERT_TRUE(GeluBackward<T>(d_y.get(), x.get(), accumulated.get(), n, nullptr).ok());
  ASSERT_TRUE(GeluBackward<T>(d_y.get(), x.get(), overwritten.get(), n, nullptr, false).ok());
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(overwritten.Download(), accumulated.Download());
}

TEST(OverwriteModeTest, DropoutBackwardWritesZerosWhereDropped) {
  MTRAIN_SKIP_WITHOUT_GPU();
  const size_t n = 100003;
  DeviceArray<T> d_y(testing::RandomFloats(n, 3, -1, 1));
  for (float p : {0.0f, 0.1f}) {
    DeviceArray<T> accumulated(Zeros(n)), overwritten(Garbage(n));
    ASSERT_TRUE(DropoutBackward<T>(d_y.get(), accumulated.get(), n, p, 42, 5, nullptr).ok());
    ASSERT_TRUE(DropoutBackward<T>(d_y.get(), overwritten.get(), n, p, 42, 5, nullptr, false).ok());
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(overwritten.Download(), accumulated.Download()) << "p " << p;
  }
}

TEST(OverwriteModeTest, CrossEntropyBackwardZeroesThePadding) {
  MTRAIN_SKIP_WITHOUT_GPU();
  const VocabShard shard{33, 80, 70, 0};  // 10 padding columns
  const size_t n = size_t(shard.rows) * shard.cols;
  std::vector<int32_t> host_targets(shard.rows);
  for (int r = 0; r < shard.rows; ++r) host_targets[r] = (r * 7) % shard.valid_cols;
  int32_t* targets = nullptr;
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&targets), shard.rows * sizeof(int32_t)),
            cudaSuccess);
  ASSERT_EQ(cudaMemcpy(targets, host_targets.data(), shard.rows * sizeof(int32_t),
                       cudaMemcpyHostToDevice),
            cudaSuccess);
  DeviceArray<T> logits(testing::RandomFloats(n, 4, -3, 3));
  DeviceArray<float> max(shard.rows), sum_exp(shard.rows), target_logit(shard.rows);
  ASSERT_TRUE(CrossEntropyLocalStats<T>(logits.get(), targets, shard, max.get(), sum_exp.get(),
                                        target_logit.get(), nullptr)
                  .ok());
  DeviceArray<T> accumulated(Zeros(n)), overwritten(Garbage(n));
  ASSERT_TRUE(CrossEntropyBackward<T>(logits.get(), targets, max.get(), sum_exp.get(), shard, 0.5f,
                                      accumulated.get(), nullptr)
                  .ok());
  ASSERT_TRUE(CrossEntropyBackward<T>(logits.get(), targets, max.get(), sum_exp.get(), shard, 0.5f,
                                      overwritten.get(), nullptr, false)
                  .ok());
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(overwritten.Download(), accumulated.Download());
  cudaFree(targets);
}

TEST(OverwriteModeTest, MatmulBackwardInputGradient) {
  MTRAIN_SKIP_WITHOUT_GPU();
  constexpr int M = 130, K = 64, N = 96;
  absl::StatusOr<std::unique_ptr<CublasLt>> blas = CublasLt::Create();
  ASSERT_TRUE(blas.ok()) << blas.status();
  DeviceArray<T> d_out(testing::RandomFloats(size_t(M) * N, 5, -1, 1)),
      in(testing::RandomFloats(size_t(M) * K, 6, -1, 1)),
      weight(testing::RandomFloats(size_t(N) * K, 7, -0.1, 0.1));
  DeviceArray<T> accumulated(Zeros(size_t(M) * K)), overwritten(Garbage(size_t(M) * K));
  DeviceArray<float> d_weight_a(Zeros(size_t(N) * K)), d_weight_b(Zeros(size_t(N) * K));
  ASSERT_TRUE(MatmulBackward<T>(**blas, d_out.get(), in.get(), weight.get(), accumulated.get(),
                                d_weight_a.get(), nullptr, M, K, N, nullptr)
                  .ok());
  ASSERT_TRUE(MatmulBackward<T>(**blas, d_out.get(), in.get(), weight.get(), overwritten.get(),
                                d_weight_b.get(), nullptr, M, K, N, nullptr, false)
                  .ok());
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(overwritten.Download(), accumulated.Download());
  EXPECT_EQ(d_weight_b.Download(), d_weight_a.Download());  // still accumulated
}

}  // namespace
}  // namespace mtrain::cuda
