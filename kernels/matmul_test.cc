#include "kernels/matmul.h"

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu_threads.h"
#include "kernels/test_util.h"

namespace mtrain::cpu {
namespace {

using kernel_testing::Dot;
using kernel_testing::ExpectGradientNear;
using kernel_testing::NumericalGradient;
using kernel_testing::RandomFloatVector;
using kernel_testing::RandomVector;

// out = in @ weight^T + bias by the definition, one output element at a time.
template <typename T>
std::vector<double> NaiveLinear(const std::vector<T>& in, const std::vector<T>& weight,
                                const T* bias, int M, int K, int N) {
  std::vector<double> out(static_cast<size_t>(M) * N);
  for (int m = 0; m < M; ++m) {
    for (int n = 0; n < N; ++n) {
      double sum = bias != nullptr ? static_cast<double>(bias[n]) : 0.0;
      for (int k = 0; k < K; ++k) {
        sum += static_cast<double>(in[m * K + k]) * static_cast<double>(weight[n * K + k]);
      }
      out[m * N + n] = sum;
    }
  }
  return out;
}

// The GEMMs are sliced by rows across the OpenMP threads (matmul.cc). A thread count gives
// the same bits every time; another count may round differently in the last bits (so did
// OpenBLAS's own threading: its blocking follows the count), never by more.
TEST(MatmulTest, ResultsAreRepeatableAndAgreeAcrossThreadCounts) {
  struct Shape {
    int M, K, N;
  };
  for (const Shape shape :
       {Shape{2048, 256, 768}, Shape{517, 96, 300}, Shape{130, 64, 64}, Shape{64, 64, 64}}) {
    const int M = shape.M, K = shape.K, N = shape.N;
    std::mt19937_64 rng(M + K + N);
    const std::vector<float> in = RandomFloatVector(static_cast<size_t>(M) * K, rng);
    const std::vector<float> weight = RandomFloatVector(static_cast<size_t>(N) * K, rng);
    const std::vector<float> bias = RandomFloatVector(N, rng);
    const std::vector<float> d_out = RandomFloatVector(static_cast<size_t>(M) * N, rng);
    auto run = [&](int threads) {
      SetCpuThreads(threads);
      std::vector<std::vector<float>> outputs = {
          std::vector<float>(static_cast<size_t>(M) * N), std::vector<float>(in.size(), 0.5f),
          std::vector<float>(weight.size(), 0.25f), std::vector<float>(N, 0.0f)};
      MatmulForward(in.data(), weight.data(), bias.data(), outputs[0].data(), M, K, N);
      MatmulBackward(d_out.data(), in.data(), weight.data(), outputs[1].data(), outputs[2].data(),
                     outputs[3].data(), M, K, N);
      return outputs;
    };
    const auto one = run(1);
    for (int threads : {2, 3, 4}) {
      const auto many = run(threads);
      const auto again = run(threads);
      for (size_t i = 0; i < one.size(); ++i) {
        EXPECT_EQ(std::memcmp(many[i].data(), again[i].data(), many[i].size() * sizeof(float)), 0)
            << "output " << i << " at " << M << "x" << K << "x" << N << ", " << threads
            << " threads, twice";
        // Sums of up to 2048 products of numbers in [-1, 1): a few float roundings apart.
        for (size_t j = 0; j < one[i].size(); ++j) {
          ASSERT_NEAR(one[i][j], many[i][j], 1e-4f * (1.0f + std::fabs(one[i][j])))
              << "output " << i << "[" << j << "] at " << M << "x" << K << "x" << N << ", "
              << threads << " threads";
        }
      }
    }
  }
  SetCpuThreads(AvailableCores());
}

TEST(MatmulTest, ForwardMatchesTripleLoopInDouble) {
  std::mt19937_64 rng(1);
  const int M = 7, K = 5, N = 3;
  std::vector<double> in = RandomVector(M * K, rng);
  std::vector<double> weight = RandomVector(N * K, rng);
  std::vector<double> bias = RandomVector(N, rng);
  for (const double* b :
       {static_cast<const double*>(bias.data()), static_cast<const double*>(nullptr)}) {
    std::vector<double> out(M * N, 123.0);  // overwritten, not accumulated
    MatmulForward(in.data(), weight.data(), b, out.data(), M, K, N);
    const std::vector<double> expected = NaiveLinear(in, weight, b, M, K, N);
    for (int i = 0; i < M * N; ++i) EXPECT_NEAR(out[i], expected[i], 1e-14) << i;
  }
}

TEST(MatmulTest, ForwardMatchesTripleLoopInFloatAtBlockingSizes) {
  // Sizes that are not multiples of any GEMM block, and a K past OpenBLAS's K-blocking.
  std::mt19937_64 rng(2);
  const int M = 67, K = 333, N = 129;
  std::vector<float> in = RandomFloatVector(M * K, rng);
  std::vector<float> weight = RandomFloatVector(N * K, rng);
  std::vector<float> bias = RandomFloatVector(N, rng);
  std::vector<float> out(M * N);
  MatmulForward(in.data(), weight.data(), bias.data(), out.data(), M, K, N);
  const std::vector<double> expected = NaiveLinear(in, weight, bias.data(), M, K, N);
  for (int i = 0; i < M * N; ++i) EXPECT_NEAR(out[i], expected[i], 1e-4) << i;
}

TEST(MatmulTest, ForwardWithEmptyInnerDimensionIsBias) {
  const std::vector<double> bias = {1.5, -2.0};
  std::vector<double> out(3 * 2, 7.0);
  MatmulForward<double>(nullptr, nullptr, bias.data(), out.data(), 3, 0, 2);
  for (int m = 0; m < 3; ++m) {
    EXPECT_EQ(out[m * 2], 1.5);
    EXPECT_EQ(out[m * 2 + 1], -2.0);
  }
}

// Everything a gradient check needs: inputs, the random projection R of the output, and the
// analytic gradients of L = <out, R>.
struct LinearProblem {
  int M = 4, K = 6, N = 5;
  std::vector<double> in, weight, bias, r;

  explicit LinearProblem(uint64_t seed) {
    std::mt19937_64 rng(seed);
    in = RandomVector(M * K, rng);
    weight = RandomVector(N * K, rng);
    bias = RandomVector(N, rng);
    r = RandomVector(M * N, rng);
  }

  double Objective() const {
    std::vector<double> out(M * N);
    MatmulForward(in.data(), weight.data(), bias.data(), out.data(), M, K, N);
    return Dot(out, r);
  }
};

TEST(MatmulTest, BackwardMatchesFiniteDifferences) {
  LinearProblem problem(3);
  std::vector<double> d_in(problem.M * problem.K, 0.0);
  std::vector<double> d_weight(problem.N * problem.K, 0.0);
  std::vector<double> d_bias(problem.N, 0.0);
  MatmulBackward(problem.r.data(), problem.in.data(), problem.weight.data(), d_in.data(),
                 d_weight.data(), d_bias.data(), problem.M, problem.K, problem.N);
  auto objective = [&] { return problem.Objective(); };
  ExpectGradientNear(d_in, NumericalGradient(&problem.in, objective), "d_in");
  ExpectGradientNear(d_weight, NumericalGradient(&problem.weight, objective), "d_weight");
  ExpectGradientNear(d_bias, NumericalGradient(&problem.bias, objective), "d_bias");
}

TEST(MatmulTest, BackwardAccumulates) {
  LinearProblem problem(4);
  std::vector<double> d_in(problem.M * problem.K, 0.0);
  std::vector<double> d_weight(problem.N * problem.K, 0.0);
  std::vector<double> d_bias(problem.N, 0.0);
  auto backward = [&] {
    MatmulBackward(problem.r.data(), problem.in.data(), problem.weight.data(), d_in.data(),
                   d_weight.data(), d_bias.data(), problem.M, problem.K, problem.N);
  };
  backward();
  const std::vector<double> once_in = d_in, once_weight = d_weight, once_bias = d_bias;
  backward();
  for (size_t i = 0; i < d_in.size(); ++i) EXPECT_NEAR(d_in[i], 2 * once_in[i], 1e-14);
  for (size_t i = 0; i < d_weight.size(); ++i) {
    EXPECT_NEAR(d_weight[i], 2 * once_weight[i], 1e-14);
  }
  for (size_t i = 0; i < d_bias.size(); ++i) EXPECT_EQ(d_bias[i], 2 * once_bias[i]);
}

// kOverwrite replaces what d_in held with the same bits accumulating into zeros gives, in
// float at a sliced shape (the engine's layers) and in double.
TEST(MatmulTest, OverwrittenInputGradientEqualsOneAccumulatedIntoZeros) {
  std::mt19937_64 rng(11);
  const int M = 2048, K = 256, N = 768;
  const std::vector<float> in = RandomFloatVector(static_cast<size_t>(M) * K, rng);
  const std::vector<float> weight = RandomFloatVector(static_cast<size_t>(N) * K, rng);
  const std::vector<float> d_out = RandomFloatVector(static_cast<size_t>(M) * N, rng);
  std::vector<float> accumulated(in.size(), 0.0f);
  MatmulBackward<float>(d_out.data(), in.data(), weight.data(), accumulated.data(), nullptr,
                        nullptr, M, K, N);
  std::vector<float> overwritten(in.size(), 7.0f);  // stale values, as a reused buffer holds
  MatmulBackward<float>(d_out.data(), in.data(), weight.data(), overwritten.data(), nullptr,
                        nullptr, M, K, N, InputGradient::kOverwrite);
  EXPECT_EQ(0, std::memcmp(accumulated.data(), overwritten.data(), in.size() * sizeof(float)));

  LinearProblem problem(7);
  std::vector<double> d_in(problem.M * problem.K, -3.0);
  MatmulBackward<double>(problem.r.data(), problem.in.data(), problem.weight.data(), d_in.data(),
                         nullptr, nullptr, problem.M, problem.K, problem.N,
                         InputGradient::kOverwrite);
  std::vector<double> expected(problem.M * problem.K, 0.0);
  MatmulBackward<double>(problem.r.data(), problem.in.data(), problem.weight.data(),
                         expected.data(), nullptr, nullptr, problem.M, problem.K, problem.N);
  EXPECT_EQ(d_in, expected);
}

TEST(MatmulTest, BackwardSkipsNullInputAndBiasGradients) {
  LinearProblem problem(5);
  std::vector<double> d_weight(problem.N * problem.K, 0.0);
  MatmulBackward<double>(problem.r.data(), problem.in.data(), problem.weight.data(), nullptr,
                         d_weight.data(), nullptr, problem.M, problem.K, problem.N);
  std::vector<double> d_weight_full(problem.N * problem.K, 0.0);
  std::vector<double> d_in(problem.M * problem.K, 0.0);
  std::vector<double> d_bias(problem.N, 0.0);
  MatmulBackward(problem.r.data(), problem.in.data(), problem.weight.data(), d_in.data(),
                 d_weight_full.data(), d_bias.data(), problem.M, problem.K, problem.N);
  EXPECT_EQ(d_weight, d_weight_full);
}

TEST(MatmulTest, FloatBackwardMatchesDouble) {
  std::mt19937_64 rng(6);
  const int M = 33, K = 40, N = 17;
  std::vector<float> in = RandomFloatVector(M * K, rng);
  std::vector<float> weight = RandomFloatVector(N * K, rng);
  std::vector<float> d_out = RandomFloatVector(M * N, rng);
  std::vector<float> d_in(M * K, 0.0f), d_weight(N * K, 0.0f), d_bias(N, 0.0f);
  MatmulBackward(d_out.data(), in.data(), weight.data(), d_in.data(), d_weight.data(),
                 d_bias.data(), M, K, N);
  const std::vector<double> in64(in.begin(), in.end());
  const std::vector<double> weight64(weight.begin(), weight.end());
  const std::vector<double> d_out64(d_out.begin(), d_out.end());
  std::vector<double> d_in64(M * K, 0.0), d_weight64(N * K, 0.0), d_bias64(N, 0.0);
  MatmulBackward(d_out64.data(), in64.data(), weight64.data(), d_in64.data(), d_weight64.data(),
                 d_bias64.data(), M, K, N);
  for (int i = 0; i < M * K; ++i) EXPECT_NEAR(d_in[i], d_in64[i], 1e-5);
  for (int i = 0; i < N * K; ++i) EXPECT_NEAR(d_weight[i], d_weight64[i], 1e-5);
  for (int i = 0; i < N; ++i) EXPECT_NEAR(d_bias[i], d_bias64[i], 1e-5);
}

}  // namespace
}  // namespace mtrain::cpu
