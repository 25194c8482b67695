#include "kernels/embedding.h"

#include <cstdint>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/test_util.h"

namespace mtrain::cpu {
namespace {

using kernel_testing::Dot;
using kernel_testing::ExpectGradientNear;
using kernel_testing::NumericalGradient;
using kernel_testing::RandomVector;

constexpr int kVocab = 10;
constexpr int kC = 4;
// Repeats (3, 7), both ends of the vocabulary, and ids outside every slice (-1, 10, and a
// value that would overflow `id - row_start` in 32 bits).
const std::vector<int32_t> kIds = {3, 0, 9, 7, 3, -1, 10, INT32_MIN, 7, 5};

TEST(EmbeddingTest, ForwardLooksUpRowsAndZeroesOutsideTheSlice) {
  std::mt19937_64 rng(1);
  const std::vector<double> table = RandomVector(kVocab * kC, rng);
  // This rank holds rows [4, 8).
  const int row_start = 4, num_rows = 4;
  const std::vector<double> slice(table.begin() + row_start * kC,
                                  table.begin() + (row_start + num_rows) * kC);
  const int n = static_cast<int>(kIds.size());
  std::vector<double> out(n * kC, 99.0);
  EmbeddingForward(kIds.data(), slice.data(), out.data(), n, kC, row_start, num_rows, false);
  for (int i = 0; i < n; ++i) {
    const bool inside = kIds[i] >= row_start && kIds[i] < row_start + num_rows;
    for (int c = 0; c < kC; ++c) {
      EXPECT_EQ(out[i * kC + c], inside ? table[kIds[i] * kC + c] : 0.0) << i;
    }
  }
}

TEST(EmbeddingTest, SlicesSumToTheFullLookup) {
  std::mt19937_64 rng(2);
  const std::vector<double> table = RandomVector(kVocab * kC, rng);
  const int n = static_cast<int>(kIds.size());
  std::vector<double> full(n * kC);
  EmbeddingForward(kIds.data(), table.data(), full.data(), n, kC, 0, kVocab, false);
  // Three uneven slices [0, 3), [3, 8), [8, 10): the first overwrites, the others accumulate.
  std::vector<double> summed(n * kC, -5.0);
  const int bounds[] = {0, 3, 8, kVocab};
  for (int s = 0; s < 3; ++s) {
    EmbeddingForward(kIds.data(), table.data() + bounds[s] * kC, summed.data(), n, kC, bounds[s],
                     bounds[s + 1] - bounds[s], /*accumulate=*/s > 0);
  }
  EXPECT_EQ(summed, full);
}

TEST(EmbeddingTest, AccumulateAddsToExistingOutput) {
  std::mt19937_64 rng(3);
  const std::vector<double> table = RandomVector(kVocab * kC, rng);
  const std::vector<double> positions = RandomVector(kIds.size() * kC, rng);
  const int n = static_cast<int>(kIds.size());
  std::vector<double> out = positions;
  EmbeddingForward(kIds.data(), table.data(), out.data(), n, kC, 0, kVocab, true);
  for (int i = 0; i < n; ++i) {
    const bool inside = kIds[i] >= 0 && kIds[i] < kVocab;
    for (int c = 0; c < kC; ++c) {
      EXPECT_EQ(out[i * kC + c], positions[i * kC + c] + (inside ? table[kIds[i] * kC + c] : 0));
    }
  }
}

TEST(EmbeddingTest, BackwardMatchesFiniteDifferencesAndAccumulates) {
  std::mt19937_64 rng(4);
  const int row_start = 2, num_rows = 6;  // rows [2, 8): some ids fall outside
  std::vector<double> table = RandomVector(num_rows * kC, rng);
  const int n = static_cast<int>(kIds.size());
  const std::vector<double> r = RandomVector(n * kC, rng);
  std::vector<double> d_table(table.size(), 0.0);
  EmbeddingBackward(kIds.data(), r.data(), d_table.data(), n, kC, row_start, num_rows);
  auto objective = [&] {
    std::vector<double> out(n * kC);
    EmbeddingForward(kIds.data(), table.data(), out.data(), n, kC, row_start, num_rows, false);
    return Dot(out, r);
  };
  ExpectGradientNear(d_table, NumericalGradient(&table, objective), "d_table");
  // Rows no id hits (local rows 0, 2 and 4: ids 2, 4 and 6) get nothing.
  for (int local_row : {0, 2, 4}) {
    for (int c = 0; c < kC; ++c) EXPECT_EQ(d_table[local_row * kC + c], 0.0) << local_row;
  }
  // Repeated ids add in token order, so a second call matches twice the first up to rounding.
  const std::vector<double> once = d_table;
  EmbeddingBackward(kIds.data(), r.data(), d_table.data(), n, kC, row_start, num_rows);
  for (size_t i = 0; i < d_table.size(); ++i) EXPECT_DOUBLE_EQ(d_table[i], 2 * once[i]);
}

}  // namespace
}  // namespace mtrain::cpu
