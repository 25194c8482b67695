#include "kernels/array_ops.h"

#include <cstring>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu_threads.h"
#include "kernels/test_util.h"

namespace mtrain::cpu {
namespace {

using kernel_testing::RandomFloatVector;

// Sizes below and above the parallel threshold, and one not a multiple of a cache line.
constexpr size_t kSizes[] = {1, 1000, size_t{1} << 15, (size_t{1} << 20) + 37};

template <typename T>
bool SameBits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

TEST(ArrayOpsTest, ElementwiseOperationsMatchTheirDefinitionOnEveryThreadCount) {
  for (const int threads : {1, 2, 3}) {
    SetCpuThreads(threads);
    for (const size_t n : kSizes) {
      SCOPED_TRACE(testing::Message() << "threads " << threads << ", n " << n);
      std::mt19937_64 rng(n);
      const std::vector<float> a = RandomFloatVector(n, rng);
      const std::vector<float> b = RandomFloatVector(n, rng);

      std::vector<float> y = b;
      ZeroArray(y.data(), n);
      EXPECT_TRUE(SameBits(y, std::vector<float>(n, 0.0f)));

      CopyArray(a.data(), y.data(), n);
      EXPECT_TRUE(SameBits(y, a));

      std::vector<float> expected(n);
      for (size_t i = 0; i < n; ++i) expected[i] = a[i] + b[i];
      AddArrays(a.data(), b.data(), y.data(), n);
      EXPECT_TRUE(SameBits(y, expected));
      y = b;
      AddToArray(a.data(), y.data(), n);
      EXPECT_TRUE(SameBits(y, expected));
      y = a;
      AddArrays(y.data(), b.data(), y.data(), n);  // in place
      EXPECT_TRUE(SameBits(y, expected));
    }
  }
  SetCpuThreads(AvailableCores());
}

TEST(ArrayOpsTest, RowVectorAndColumnSumsMatchTheirDefinitionOnEveryThreadCount) {
  struct Shape {
    int rows, cols;
  };
  for (const int threads : {1, 2, 3}) {
    SetCpuThreads(threads);
    for (const Shape shape : {Shape{3, 5}, Shape{2048, 256}, Shape{517, 1000}, Shape{64, 70}}) {
      SCOPED_TRACE(testing::Message()
                   << "threads " << threads << ", " << shape.rows << " x " << shape.cols);
      const size_t n = static_cast<size_t>(shape.rows) * shape.cols;
      std::mt19937_64 rng(n);
      const std::vector<float> x = RandomFloatVector(n, rng);
      const std::vector<float> bias = RandomFloatVector(shape.cols, rng);

      std::vector<float> with_bias = x;
      AddRowVector(bias.data(), with_bias.data(), shape.rows, shape.cols);
      std::vector<float> expected = x;
      for (size_t i = 0; i < n; ++i) expected[i] += bias[i % shape.cols];
      EXPECT_TRUE(SameBits(with_bias, expected));

      // Each column summed in row order apart from `sums`, then added to it.
      std::vector<float> sums = bias;
      AccumulateColumnSums(x.data(), sums.data(), shape.rows, shape.cols);
      std::vector<float> expected_sums = bias;
      for (int col = 0; col < shape.cols; ++col) {
        float column = 0.0f;
        for (int row = 0; row < shape.rows; ++row) {
          column += x[static_cast<size_t>(row) * shape.cols + col];
        }
        expected_sums[col] += column;
      }
      EXPECT_TRUE(SameBits(sums, expected_sums));
    }
  }
  SetCpuThreads(AvailableCores());
}

TEST(ArrayOpsTest, DoublesToo) {
  const std::vector<double> a = {1.0, -2.5, 3.25}, b = {0.5, 0.5, -0.25};
  std::vector<double> y(3);
  AddArrays(a.data(), b.data(), y.data(), 3);
  EXPECT_EQ(y, (std::vector<double>{1.5, -2.0, 3.0}));
  std::vector<double> sums = {1.0};
  AccumulateColumnSums(a.data(), sums.data(), 3, 1);
  EXPECT_EQ(sums[0], 2.75);
}

}  // namespace
}  // namespace mtrain::cpu
