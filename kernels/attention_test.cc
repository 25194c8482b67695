#include "kernels/attention.h"

#include <omp.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/attention_isa.h"
#include "kernels/bidirectional_attention.h"
#include "kernels/cpu_isa.h"
#include "kernels/dropout.h"
#include "kernels/test_util.h"

namespace mtrain::cpu {
namespace {

using kernel_testing::Dot;
using kernel_testing::ExpectGradientNear;
using kernel_testing::NumericalGradient;
using kernel_testing::RandomFloatVector;
using kernel_testing::RandomVector;

size_t QkvSize(const AttentionShape& s) {
  return static_cast<size_t>(s.batch) * s.seq * (s.heads + 2 * s.kv_head_count()) * s.head_dim;
}
size_t OutSize(const AttentionShape& s) {
  return static_cast<size_t>(s.batch) * s.seq * s.heads * s.head_dim;
}
size_t LseSize(const AttentionShape& s) { return static_cast<size_t>(s.batch) * s.heads * s.seq; }

// Offset of element d of block (0 = q, 1 = k, 2 = v) of head h at token (b, i): a query
// head in block 0, a key-value head in blocks 1 and 2.
size_t QkvIndex(const AttentionShape& s, int b, int i, int block, int h, int d) {
  const int kv = s.kv_head_count();
  const size_t head = block == 0 ? h : s.heads + (block - 1) * kv + h;
  return ((static_cast<size_t>(b) * s.seq + i) * (s.heads + 2 * kv) + head) * s.head_dim + d;
}

// The documented math, one head and one query at a time, in double.
template <typename T>
void NaiveAttention(const std::vector<T>& qkv, const AttentionShape& s,
                    const AttentionDropout& dropout, std::vector<double>* out,
                    std::vector<double>* lse) {
  const int total_heads = dropout.total_heads > 0 ? dropout.total_heads : s.heads;
  const int group = s.heads / s.kv_head_count();
  out->assign(OutSize(s), 0.0);
  lse->assign(LseSize(s), 0.0);
  for (int b = 0; b < s.batch; ++b) {
    for (int h = 0; h < s.heads; ++h) {
      const int kv = h / group;  // the key-value head query head h reads
      for (int i = 0; i < s.seq; ++i) {
        std::vector<double> scores(i + 1);
        double max_score = -INFINITY;
        for (int j = 0; j <= i; ++j) {
          double dot = 0;
          for (int d = 0; d < s.head_dim; ++d) {
            dot += static_cast<double>(qkv[QkvIndex(s, b, i, 0, h, d)]) *
                   static_cast<double>(qkv[QkvIndex(s, b, j, 1, kv, d)]);
          }
          scores[j] = dot / std::sqrt(static_cast<double>(s.head_dim));
          max_score = std::max(max_score, scores[j]);
        }
        double sum = 0;
        for (int j = 0; j <= i; ++j) sum += std::exp(scores[j] - max_score);
        (*lse)[(static_cast<size_t>(b) * s.heads + h) * s.seq + i] = max_score + std::log(sum);
        for (int j = 0; j <= i; ++j) {
          const double probability = std::exp(scores[j] - max_score) / sum;
          const uint64_t index =
              ((static_cast<uint64_t>(b) * total_heads + dropout.head_offset + h) * s.seq + i) *
                  s.seq +
              j;
          double weight = probability;
          if (dropout.p > 0) {
            weight = DropoutKeep(dropout.key, index, dropout.p) ? weight / (1.0 - dropout.p) : 0;
          }
          for (int d = 0; d < s.head_dim; ++d) {
            (*out)[((static_cast<size_t>(b) * s.seq + i) * s.heads + h) * s.head_dim + d] +=
                weight * static_cast<double>(qkv[QkvIndex(s, b, j, 2, kv, d)]);
          }
        }
      }
    }
  }
}

template <typename T>
bool BitIdentical(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

uint32_t BitsOf(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return bits;
}

const AttentionShape kSmallShape{/*batch=*/2, /*seq=*/5, /*heads=*/3, /*head_dim=*/4};

TEST(AttentionTest, ForwardMatchesNaiveInDouble) {
  std::mt19937_64 rng(1);
  const std::vector<double> qkv = RandomVector(QkvSize(kSmallShape), rng, -2.0, 2.0);
  for (float p : {0.0f, 0.3f}) {
    const AttentionDropout dropout{p, DropoutKey(1, 2, 3), 0, 0};
    std::vector<double> out(OutSize(kSmallShape)), lse(LseSize(kSmallShape), 9.0);
    AttentionForward(qkv.data(), out.data(), lse.data(), kSmallShape, dropout);
    std::vector<double> expected_out, expected_lse;
    NaiveAttention(qkv, kSmallShape, dropout, &expected_out, &expected_lse);
    for (size_t i = 0; i < out.size(); ++i) EXPECT_NEAR(out[i], expected_out[i], 1e-13) << i;
    for (size_t i = 0; i < lse.size(); ++i) EXPECT_NEAR(lse[i], expected_lse[i], 1e-13) << i;
  }
}

TEST(AttentionTest, ForwardMatchesNaiveInFloat) {
  const AttentionShape shape{2, 37, 2, 16};
  std::mt19937_64 rng(2);
  const std::vector<float> qkv = RandomFloatVector(QkvSize(shape), rng, -2.0, 2.0);
  const AttentionDropout dropout{0.1f, DropoutKey(4, 5), 0, 0};
  std::vector<float> out(OutSize(shape)), lse(LseSize(shape));
  AttentionForward(qkv.data(), out.data(), lse.data(), shape, dropout);
  std::vector<double> expected_out, expected_lse;
  NaiveAttention(qkv, shape, dropout, &expected_out, &expected_lse);
  for (size_t i = 0; i < out.size(); ++i) EXPECT_NEAR(out[i], expected_out[i], 2e-5) << i;
  for (size_t i = 0; i < lse.size(); ++i) EXPECT_NEAR(lse[i], expected_lse[i], 2e-6) << i;
}

TEST(AttentionTest, FutureTokensDoNotChangeEarlierOutputs) {
  const AttentionShape shape{1, 8, 2, 4};
  std::mt19937_64 rng(3);
  const std::vector<double> qkv = RandomVector(QkvSize(shape), rng);
  const AttentionDropout dropout{0.3f, DropoutKey(6, 0), 0, 0};
  std::vector<double> out(OutSize(shape)), lse(LseSize(shape));
  AttentionForward(qkv.data(), out.data(), lse.data(), shape, dropout);
  const size_t token_width = static_cast<size_t>(shape.heads) * shape.head_dim;
  for (int i = 0; i < shape.seq - 1; ++i) {
    // Replace q, k and v of every token after i.
    std::vector<double> changed = qkv;
    for (size_t e = static_cast<size_t>(i + 1) * 3 * token_width; e < changed.size(); ++e) {
      changed[e] = 10.0 * std::sin(static_cast<double>(e));
    }
    std::vector<double> changed_out(out.size()), changed_lse(lse.size());
    AttentionForward(changed.data(), changed_out.data(), changed_lse.data(), shape, dropout);
    for (size_t e = 0; e < (i + 1) * token_width; ++e) {
      EXPECT_EQ(out[e], changed_out[e]) << "position " << i << " element " << e;
    }
    // ...while the last position does see the change.
    EXPECT_NE(out.back(), changed_out.back()) << i;
  }
}

TEST(AttentionTest, HeadSliceDropsWhatASingleRankDrops) {
  // A rank holding heads [2, 4) of 4 must reproduce exactly those heads of the full run.
  const AttentionShape full{2, 6, 4, 3};
  const AttentionShape slice{2, 6, 2, 3};
  const int head_offset = 2;
  std::mt19937_64 rng(4);
  const std::vector<double> qkv = RandomVector(QkvSize(full), rng);
  std::vector<double> slice_qkv(QkvSize(slice));
  for (int b = 0; b < full.batch; ++b) {
    for (int i = 0; i < full.seq; ++i) {
      for (int block = 0; block < 3; ++block) {
        for (int h = 0; h < slice.heads; ++h) {
          for (int d = 0; d < full.head_dim; ++d) {
            slice_qkv[QkvIndex(slice, b, i, block, h, d)] =
                qkv[QkvIndex(full, b, i, block, head_offset + h, d)];
          }
        }
      }
    }
  }
  const uint64_t key = DropoutKey(8, 9);
  std::vector<double> out(OutSize(full)), lse(LseSize(full));
  AttentionForward(qkv.data(), out.data(), lse.data(), full, AttentionDropout{0.4f, key, 0, 0});
  std::vector<double> slice_out(OutSize(slice)), slice_lse(LseSize(slice));
  AttentionForward(slice_qkv.data(), slice_out.data(), slice_lse.data(), slice,
                   AttentionDropout{0.4f, key, head_offset, full.heads});
  for (int b = 0; b < full.batch; ++b) {
    for (int i = 0; i < full.seq; ++i) {
      for (int h = 0; h < slice.heads; ++h) {
        for (int d = 0; d < full.head_dim; ++d) {
          const size_t full_index =
              ((static_cast<size_t>(b) * full.seq + i) * full.heads + head_offset + h) *
                  full.head_dim +
              d;
          const size_t slice_index =
              ((static_cast<size_t>(b) * slice.seq + i) * slice.heads + h) * slice.head_dim + d;
          EXPECT_EQ(out[full_index], slice_out[slice_index]);
        }
      }
    }
  }
}

// L = <AttentionForward(qkv), R>, and its analytic gradient from AttentionBackward.
struct AttentionProblem {
  AttentionShape shape;
  AttentionDropout dropout;
  std::vector<double> qkv, r;

  AttentionProblem(uint64_t seed, float p, AttentionShape problem_shape = {2, 4, 2, 3})
      : shape(problem_shape), dropout{p, DropoutKey(seed, 77), 0, 0} {
    std::mt19937_64 rng(seed);
    qkv = RandomVector(QkvSize(shape), rng, -1.5, 1.5);
    r = RandomVector(OutSize(shape), rng);
  }

  double Objective() const {
    std::vector<double> out(OutSize(shape)), lse(LseSize(shape));
    AttentionForward(qkv.data(), out.data(), lse.data(), shape, dropout);
    return Dot(out, r);
  }

  void Backward(std::vector<double>* d_qkv) const {
    std::vector<double> out(OutSize(shape)), lse(LseSize(shape));
    AttentionForward(qkv.data(), out.data(), lse.data(), shape, dropout);
    AttentionBackward(r.data(), qkv.data(), out.data(), lse.data(), d_qkv->data(), shape, dropout);
  }
};

TEST(AttentionTest, BackwardMatchesFiniteDifferencesWithoutDropout) {
  AttentionProblem problem(5, 0.0f);
  std::vector<double> d_qkv(problem.qkv.size(), 0.0);
  problem.Backward(&d_qkv);
  ExpectGradientNear(d_qkv, NumericalGradient(&problem.qkv, [&] { return problem.Objective(); }),
                     "d_qkv");
}

TEST(AttentionTest, BackwardMatchesFiniteDifferencesWithDropout) {
  AttentionProblem problem(6, 0.3f);
  std::vector<double> d_qkv(problem.qkv.size(), 0.0);
  problem.Backward(&d_qkv);
  ExpectGradientNear(d_qkv, NumericalGradient(&problem.qkv, [&] { return problem.Objective(); }),
                     "d_qkv");
}

TEST(AttentionTest, BackwardMatchesFiniteDifferencesOnTiledShape) {
  // Long and wide enough for the kernel's full register tiles as well as its row and column
  // remainders.
  AttentionProblem problem(9, 0.3f, AttentionShape{1, 11, 2, 10});
  std::vector<double> d_qkv(problem.qkv.size(), 0.0);
  problem.Backward(&d_qkv);
  ExpectGradientNear(d_qkv, NumericalGradient(&problem.qkv, [&] { return problem.Objective(); }),
                     "d_qkv");
}

TEST(AttentionTest, BackwardMatchesFiniteDifferencesAcrossQueryBlocks) {
  // Three blocks of 64 queries, the last one partial: the backward recomputes each block's
  // probabilities from the saved log-sum-exp against every key before it.
  AttentionProblem problem(10, 0.2f, AttentionShape{1, 150, 1, 4});
  std::vector<double> d_qkv(problem.qkv.size(), 0.0);
  problem.Backward(&d_qkv);
  ExpectGradientNear(d_qkv, NumericalGradient(&problem.qkv, [&] { return problem.Objective(); }),
                     "d_qkv");
}

// Grouped-query attention (4 query heads reading 2 key-value heads) and multi-query
// attention (3 reading 1): the documented math, and gradients whose key-value parts sum the
// group's contributions.
TEST(AttentionTest, GroupedQueryForwardMatchesNaive) {
  for (const AttentionShape shape :
       {AttentionShape{2, 6, 4, 4, 2}, AttentionShape{1, 7, 3, 8, 1}}) {
    std::mt19937_64 rng(21);
    const std::vector<double> qkv = RandomVector(QkvSize(shape), rng, -2.0, 2.0);
    for (const AttentionDropout dropout :
         {AttentionDropout{}, AttentionDropout{0.3f, DropoutKey(4, 5), 0, 0}}) {
      std::vector<double> out(OutSize(shape)), lse(LseSize(shape));
      AttentionForward(qkv.data(), out.data(), lse.data(), shape, dropout);
      std::vector<double> expected_out, expected_lse;
      NaiveAttention(qkv, shape, dropout, &expected_out, &expected_lse);
      for (size_t i = 0; i < out.size(); ++i) EXPECT_NEAR(out[i], expected_out[i], 1e-12) << i;
      for (size_t i = 0; i < lse.size(); ++i) EXPECT_NEAR(lse[i], expected_lse[i], 1e-12) << i;
    }
  }
}

TEST(AttentionTest, GroupedQueryBackwardMatchesFiniteDifferences) {
  for (const AttentionShape shape :
       {AttentionShape{2, 5, 4, 3, 2}, AttentionShape{1, 70, 3, 4, 1}}) {
    AttentionProblem problem(11, 0.25f, shape);
    std::vector<double> d_qkv(problem.qkv.size(), 0.0);
    problem.Backward(&d_qkv);
    ExpectGradientNear(d_qkv, NumericalGradient(&problem.qkv, [&] { return problem.Objective(); }),
                       "d_qkv");
  }
}

TEST(AttentionTest, BackwardAccumulates) {
  AttentionProblem problem(7, 0.3f);
  std::vector<double> d_qkv(problem.qkv.size(), 0.0);
  problem.Backward(&d_qkv);
  const std::vector<double> once = d_qkv;
  problem.Backward(&d_qkv);
  for (size_t i = 0; i < d_qkv.size(); ++i) EXPECT_EQ(d_qkv[i], 2 * once[i]) << i;
}

struct AttentionRun {
  std::vector<float> out, lse, d_qkv;
};

// `isa`: which build of the core runs (kChosen: the one AttentionForward picks).
enum class Isa { kChosen, kGeneric, kAvx2, kAvx512 };

// `lengths` (one per sequence): the bidirectional core over those real positions
// (kChosen then runs BidirectionalAttentionForward/Backward); null: causal.
// `dropout_p` 0: the AVX-512 build runs its own register tiles (attention_tiles_avx512.inc)
// at head dimensions 32, 64 and 128.
AttentionRun RunAttention(int threads, Isa isa = Isa::kChosen,
                          const AttentionShape& shape = {2, 48, 3, 16},
                          const int32_t* lengths = nullptr, float dropout_p = 0.2f) {
  const AttentionDropout dropout{dropout_p, DropoutKey(10, 11), 0, 0};
  std::mt19937_64 rng(8);
  const std::vector<float> qkv = RandomFloatVector(QkvSize(shape), rng, -2.0, 2.0);
  const std::vector<float> d_out = RandomFloatVector(OutSize(shape), rng);
  AttentionRun run{std::vector<float>(OutSize(shape)), std::vector<float>(LseSize(shape)),
                   std::vector<float>(QkvSize(shape), 0.0f)};
  const int previous_threads = omp_get_max_threads();
  omp_set_num_threads(threads);
  switch (isa) {
    case Isa::kChosen:
      if (lengths != nullptr) {
        BidirectionalAttentionForward(qkv.data(), lengths, run.out.data(), run.lse.data(), shape,
                                      dropout);
        BidirectionalAttentionBackward(d_out.data(), qkv.data(), run.out.data(), run.lse.data(),
                                       lengths, run.d_qkv.data(), shape, dropout);
        break;
      }
      AttentionForward(qkv.data(), run.out.data(), run.lse.data(), shape, dropout);
      AttentionBackward(d_out.data(), qkv.data(), run.out.data(), run.lse.data(), run.d_qkv.data(),
                        shape, dropout);
      break;
    case Isa::kGeneric:
      generic::Forward(qkv.data(), lengths, run.out.data(), run.lse.data(), shape, dropout);
      generic::Backward(d_out.data(), qkv.data(), run.out.data(), run.lse.data(), lengths,
                        run.d_qkv.data(), shape, dropout);
      break;
    case Isa::kAvx2:
      avx2::Forward(qkv.data(), lengths, run.out.data(), run.lse.data(), shape, dropout);
      avx2::Backward(d_out.data(), qkv.data(), run.out.data(), run.lse.data(), lengths,
                     run.d_qkv.data(), shape, dropout);
      break;
    case Isa::kAvx512:
      avx512::Forward(qkv.data(), lengths, run.out.data(), run.lse.data(), shape, dropout);
      avx512::Backward(d_out.data(), qkv.data(), run.out.data(), run.lse.data(), lengths,
                       run.d_qkv.data(), shape, dropout);
      break;
  }
  omp_set_num_threads(previous_threads);
  return run;
}

TEST(AttentionTest, BitIdenticalForAnyThreadCount) {
  // Without dropout at head_dim 64 the AVX-512 build runs its register tiles.
  for (const float p : {0.2f, 0.0f}) {
    for (const AttentionShape shape :
         {AttentionShape{2, 48, 3, 16}, AttentionShape{2, 40, 4, 16, 2},
          AttentionShape{2, 100, 3, 64}, AttentionShape{1, 90, 4, 64, 2}}) {
      const AttentionRun one = RunAttention(1, Isa::kChosen, shape, nullptr, p);
      for (int threads : {2, 3}) {
        const AttentionRun many = RunAttention(threads, Isa::kChosen, shape, nullptr, p);
        EXPECT_TRUE(BitIdentical(one.out, many.out)) << threads << " p " << p;
        EXPECT_TRUE(BitIdentical(one.lse, many.lse)) << threads << " p " << p;
        EXPECT_TRUE(BitIdentical(one.d_qkv, many.d_qkv)) << threads << " p " << p;
      }
    }
  }
}

// Largest |a - b| over the tensor, relative to its largest |b| (at least 1).
double RelativeDifference(const std::vector<float>& a, const std::vector<float>& b) {
  double largest = 1.0, difference = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    largest = std::max(largest, std::fabs(static_cast<double>(b[i])));
    difference = std::max(difference, std::fabs(static_cast<double>(a[i]) - b[i]));
  }
  return difference / largest;
}

// The AVX-512 build's own tiles (fp32, head_dim 32/64/128) sum in their own order: the
// same results as the library GEMMs of the generic build to float rounding, with and
// without dropout (the same masks), on shapes with partial query blocks and key tiles,
// grouped-query heads, causal and bidirectional over padded sequences. The generic build's
// gradients are checked against finite differences above (in double, through the same
// code).
TEST(AttentionTest, Avx512TilesAgreeWithTheGenericBuild) {
  if (CpuSupportedKernelIsa() < KernelIsa::kAvx512) {
    GTEST_SKIP() << "this CPU has no AVX-512: the tiles cannot run here";
  }
  const int32_t lengths[2] = {29, 131};
  for (const float p : {0.0f, 0.2f}) {
    for (const int32_t* sequence_lengths : {static_cast<const int32_t*>(nullptr), lengths}) {
      const char* kind = sequence_lengths == nullptr ? "causal" : "bidirectional";
      for (const AttentionShape shape :
           {AttentionShape{2, 150, 2, 64}, AttentionShape{2, 137, 3, 32},
            AttentionShape{2, 133, 4, 128, 2}, AttentionShape{2, 64, 2, 64, 1}}) {
        const AttentionRun generic_run = RunAttention(2, Isa::kGeneric, shape, sequence_lengths, p);
        const AttentionRun tiled = RunAttention(2, Isa::kAvx512, shape, sequence_lengths, p);
        const std::string where = std::string(kind) + " S " + std::to_string(shape.seq) + " D " +
                                  std::to_string(shape.head_dim) + " p " + std::to_string(p);
        EXPECT_LT(RelativeDifference(tiled.out, generic_run.out), 2e-6) << where;
        EXPECT_LT(RelativeDifference(tiled.lse, generic_run.lse), 2e-6) << where;
        EXPECT_LT(RelativeDifference(tiled.d_qkv, generic_run.d_qkv), 1e-5) << where;
      }
    }
  }
}

// The tiles against the documented math in double (the causal forward at head_dim 64).
TEST(AttentionTest, Avx512TilesMatchNaiveForward) {
  if (CpuSupportedKernelIsa() < KernelIsa::kAvx512) {
    GTEST_SKIP() << "this CPU has no AVX-512: the tiles cannot run here";
  }
  const AttentionShape shape{1, 140, 2, 64};
  std::mt19937_64 rng(12);
  const std::vector<float> qkv = RandomFloatVector(QkvSize(shape), rng, -2.0, 2.0);
  std::vector<float> out(OutSize(shape)), lse(LseSize(shape));
  avx512::Forward(qkv.data(), nullptr, out.data(), lse.data(), shape, AttentionDropout{});
  std::vector<double> expected_out, expected_lse;
  NaiveAttention(qkv, shape, AttentionDropout{}, &expected_out, &expected_lse);
  for (size_t i = 0; i < out.size(); ++i) EXPECT_NEAR(out[i], expected_out[i], 2e-5) << i;
  for (size_t i = 0; i < lse.size(); ++i) EXPECT_NEAR(lse[i], expected_lse[i], 1e-5) << i;
}

// The SSE, AVX2 and AVX-512 builds of the core must agree bit for bit (attention_core.inc
// says why), on shapes whose sequence is and is not a multiple of any tile width. At
// head_dim 32, 64 and 128 the AVX-512 build runs its own tiles instead of the others' GEMM
// calls: compared to a tolerance below.
TEST(AttentionTest, VectorBuildsAreBitIdenticalToTheGenericOne) {
  const KernelIsa supported = CpuSupportedKernelIsa();
  if (supported == KernelIsa::kGeneric) {
    GTEST_SKIP() << "this CPU has no AVX2: only the generic build can run here";
  }
  if (supported < KernelIsa::kAvx512) {
    std::printf("this CPU has no AVX-512: comparing the AVX2 build only\n");
  }
  // The bidirectional core too, over padded sequences (lengths below, across a 64-query
  // block in the last shape).
  const int32_t lengths[2] = {29, 67};
  for (const int32_t* sequence_lengths : {static_cast<const int32_t*>(nullptr), lengths}) {
    const char* kind = sequence_lengths == nullptr ? "causal" : "bidirectional";
    for (const AttentionShape shape : {AttentionShape{2, 48, 3, 16}, AttentionShape{1, 37, 2, 64},
                                       AttentionShape{2, 70, 1, 24}}) {
      const AttentionRun generic_run = RunAttention(2, Isa::kGeneric, shape, sequence_lengths);
      for (const Isa isa : {Isa::kAvx2, Isa::kAvx512}) {
        if (isa == Isa::kAvx512 && supported < KernelIsa::kAvx512) continue;
        // The tiles' head dimensions (attention_tiles_avx512.inc's TilesFit).
        const bool tiled = shape.head_dim == 32 || shape.head_dim == 64 || shape.head_dim == 128;
        if (isa == Isa::kAvx512 && tiled) continue;
        const AttentionRun run = RunAttention(2, isa, shape, sequence_lengths);
        const int width = isa == Isa::kAvx2 ? 256 : 512;
        EXPECT_TRUE(BitIdentical(generic_run.out, run.out))
            << kind << width << " seq " << shape.seq;
        EXPECT_TRUE(BitIdentical(generic_run.lse, run.lse))
            << kind << width << " seq " << shape.seq;
        EXPECT_TRUE(BitIdentical(generic_run.d_qkv, run.d_qkv))
            << kind << width << " seq " << shape.seq;
      }
    }
  }
}

// A tensor-parallel rank holding heads [head_offset, head_offset + H) must compute exactly
// the bits a single rank computes for those heads (its qkv rows are narrower, the products
// the same), so that layouts differ only where their reductions do.
TEST(AttentionTest, HeadSliceIsBitIdenticalToTheFullComputation) {
  for (const AttentionShape full : {AttentionShape{2, 16, 4, 8}, AttentionShape{2, 70, 4, 24}}) {
    const AttentionDropout dropout{0.1f, DropoutKey(3, 4), 0, 0};
    std::mt19937_64 rng(21);
    const std::vector<float> qkv = RandomFloatVector(QkvSize(full), rng, -2.0, 2.0);
    const std::vector<float> d_out = RandomFloatVector(OutSize(full), rng);
    std::vector<float> out(OutSize(full)), lse(LseSize(full)), d_qkv(QkvSize(full), 0.0f);
    AttentionForward(qkv.data(), out.data(), lse.data(), full, dropout);
    AttentionBackward(d_out.data(), qkv.data(), out.data(), lse.data(), d_qkv.data(), full,
                      dropout);

    const int half = full.heads / 2;
    const AttentionShape slice{full.batch, full.seq, half, full.head_dim};
    for (int offset : {0, half}) {
      // The rank's own columns of qkv and d_out, as a column-parallel QKV layer leaves them.
      std::vector<float> qkv_slice(QkvSize(slice)), d_out_slice(OutSize(slice));
      for (int b = 0; b < full.batch; ++b) {
        for (int i = 0; i < full.seq; ++i) {
          for (int h = 0; h < half; ++h) {
            for (int d = 0; d < full.head_dim; ++d) {
              for (int block = 0; block < 3; ++block) {
                qkv_slice[QkvIndex(slice, b, i, block, h, d)] =
                    qkv[QkvIndex(full, b, i, block, offset + h, d)];
              }
              d_out_slice[((static_cast<size_t>(b) * full.seq + i) * half + h) * full.head_dim +
                          d] =
                  d_out[((static_cast<size_t>(b) * full.seq + i) * full.heads + offset + h) *
                            full.head_dim +
                        d];
            }
          }
        }
      }
      const AttentionDropout slice_dropout{dropout.p, dropout.key, offset, full.heads};
      std::vector<float> out_slice(OutSize(slice)), lse_slice(LseSize(slice));
      std::vector<float> d_qkv_slice(QkvSize(slice), 0.0f);
      AttentionForward(qkv_slice.data(), out_slice.data(), lse_slice.data(), slice, slice_dropout);
      AttentionBackward(d_out_slice.data(), qkv_slice.data(), out_slice.data(), lse_slice.data(),
                        d_qkv_slice.data(), slice, slice_dropout);
      for (int b = 0; b < full.batch; ++b) {
        for (int i = 0; i < full.seq; ++i) {
          for (int h = 0; h < half; ++h) {
            for (int d = 0; d < full.head_dim; ++d) {
              const size_t got_out =
                  ((static_cast<size_t>(b) * full.seq + i) * half + h) * full.head_dim + d;
              const size_t want_out =
                  ((static_cast<size_t>(b) * full.seq + i) * full.heads + offset + h) *
                      full.head_dim +
                  d;
              ASSERT_EQ(BitsOf(out_slice[got_out]), BitsOf(out[want_out]))
                  << "out b=" << b << " i=" << i << " head " << offset + h << " d=" << d;
              for (int block = 0; block < 3; ++block) {
                ASSERT_EQ(BitsOf(d_qkv_slice[QkvIndex(slice, b, i, block, h, d)]),
                          BitsOf(d_qkv[QkvIndex(full, b, i, block, offset + h, d)]))
                    << "d_qkv block " << block << " b=" << b << " i=" << i << " head " << offset + h
                    << " d=" << d << " seq " << full.seq;
              }
            }
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace mtrain::cpu
