// Megatron's tensor-parallel layers on 2 ranks (threads of this process, each with a real
// Gloo group over loopback) against the same layers unsplit on one rank: outputs, input
// gradients and every weight-gradient slice agree, and the vocab-parallel cross-entropy
// never communicates more than per-token scalars.
#include "worker/parallel/tensor_parallel.h"

#include <atomic>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <random>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "kernels/gelu.h"
#include "worker/parallel/gloo_communicator.h"
#include "worker/parallel/key_value_store.h"

namespace mtrain {
namespace {

constexpr int kRanks = 2;
constexpr float kTolerance = 1e-5f;

std::vector<float> Random(size_t n, uint64_t seed, float scale = 1.0f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = normal(rng);
  return v;
}

// Rows [begin, begin + count) of a row-major [rows, cols] matrix.
std::vector<float> Rows(const std::vector<float>& m, int cols, int begin, int count) {
  return std::vector<float>(m.begin() + static_cast<size_t>(begin) * cols,
                            m.begin() + static_cast<size_t>(begin + count) * cols);
}

// Columns [begin, begin + count) of a row-major [rows, cols] matrix.
std::vector<float> Cols(const std::vector<float>& m, int rows, int cols, int begin, int count) {
  std::vector<float> out;
  for (int r = 0; r < rows; ++r) {
    for (int c = begin; c < begin + count; ++c) out.push_back(m[static_cast<size_t>(r) * cols + c]);
  }
  return out;
}

void ExpectNear(const std::vector<float>& got, const std::vector<float>& want,
                const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], kTolerance * std::max(1.0f, std::fabs(want[i])))
        << what << " [" << i << "]";
  }
}

// Runs body(rank, group) on kRanks threads joined in one tensor-parallel group. Counts the
// elements every all-reduce carries in `reduced_counts` (rank 0's calls).
void RunOnRanks(const std::function<void(int, const TensorParallelGroup<float>&)>& body,
                std::vector<size_t>* reduced_counts = nullptr) {
  static std::atomic<int> run{0};
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/tp-", run++, "-",
                                       ::testing::UnitTest::GetInstance()->random_seed());
  absl::StatusOr<std::unique_ptr<DirectoryStore>> store = DirectoryStore::Open(dir);
  ASSERT_TRUE(store.ok()) << store.status();
  std::vector<std::thread> threads;
  for (int rank = 0; rank < kRanks; ++rank) {
    threads.emplace_back([&, rank] {
      absl::StatusOr<GlooDevice> device = CreateGlooDevice("127.0.0.1");
      ASSERT_TRUE(device.ok()) << device.status();
      GroupSpec spec;
      spec.name = "tensor-0";
      spec.members = {0, 1};
      spec.global_rank = rank;
      spec.timeout = absl::Seconds(30);
      absl::StatusOr<std::unique_ptr<Communicator>> comm = ConnectGlooGroup(**store, *device, spec);
      ASSERT_TRUE(comm.ok()) << comm.status();
      Communicator* c = comm->get();
      TensorParallelGroup<float> group;
      group.size = kRanks;
      group.rank = rank;
      group.all_reduce = [c, rank, reduced_counts](float* d, size_t n, ReduceOp op) {
        if (rank == 0 && reduced_counts != nullptr) reduced_counts->push_back(n);
        return c->AllReduce(d, n, op);
      };
      group.all_gather = [c](const float* in, float* out, size_t n) {
        return c->AllGather(in, out, n);
      };
      group.reduce_scatter = [c](const float* in, float* out, size_t n) {
        return c->ReduceScatter(in, out, n, ReduceOp::kSum);
      };
      body(rank, group);
    });
  }
  for (std::thread& t : threads) t.join();
}

// Megatron's MLP: Y = GeLU(X A^T) B^T + b, A column-parallel, B row-parallel.
TEST(TensorParallelTest, ColumnThenRowParallelMlpMatchesTheUnsplitMlp) {
  const int N = 6, C = 8, F = 16, Fl = F / kRanks;
  const auto x = Random(N * C, 1), A = Random(F * C, 2, 0.3f), a_bias = Random(F, 3, 0.1f);
  const auto B = Random(C * F, 4, 0.3f), b_bias = Random(C, 5, 0.1f), dy = Random(N * C, 6);
  // Unsplit reference on one "rank" (a group of one never communicates).
  const TensorParallelGroup<float> solo;
  std::vector<float> h(N * F), g(N * F), y(N * C);
  tp::ColumnParallelLinearForward<float>(x.data(), A.data(), a_bias.data(), h.data(), N, C, F);
  cpu::GeluForward<float>(h.data(), g.data(), N * F);
  ASSERT_TRUE(tp::RowParallelLinearForward<float>(solo, g.data(), B.data(), b_bias.data(), y.data(),
                                                  N, F, C)
                  .ok());
  std::vector<float> dg(N * F, 0), dh(N * F, 0), dx(N * C, 0), dA(F * C, 0), dA_bias(F, 0),
      dB(C * F, 0), dB_bias(C, 0);
  tp::RowParallelLinearBackward<float>(dy.data(), g.data(), B.data(), dg.data(), dB.data(),
                                       dB_bias.data(), N, F, C);
  cpu::GeluBackward<float>(dg.data(), h.data(), dh.data(), N * F);
  ASSERT_TRUE(tp::ColumnParallelLinearBackward<float>(solo, dh.data(), x.data(), A.data(),
                                                      dx.data(), dA.data(), dA_bias.data(), N, C, F)
                  .ok());

  RunOnRanks([&](int rank, const TensorParallelGroup<float>& group) {
    const auto A_r = Rows(A, C, rank * Fl, Fl);
    const auto a_bias_r =
        std::vector<float>(a_bias.begin() + rank * Fl, a_bias.begin() + (rank + 1) * Fl);
    const auto B_r = Cols(B, C, F, rank * Fl, Fl);
    std::vector<float> h_r(N * Fl), g_r(N * Fl), y_r(N * C);
    tp::ColumnParallelLinearForward<float>(x.data(), A_r.data(), a_bias_r.data(), h_r.data(), N, C,
                                           Fl);
    cpu::GeluForward<float>(h_r.data(), g_r.data(), N * Fl);
    ASSERT_TRUE(tp::RowParallelLinearForward<float>(group, g_r.data(), B_r.data(), b_bias.data(),
                                                    y_r.data(), N, Fl, C)
                    .ok());
    ExpectNear(y_r, y, absl::StrCat("rank ", rank, " output"));
    std::vector<float> dg_r(N * Fl, 0), dh_r(N * Fl, 0), dx_r(N * C, 0), dA_r(Fl * C, 0),
        dA_bias_r(Fl, 0), dB_r(C * Fl, 0), dB_bias_r(C, 0);
    tp::RowParallelLinearBackward<float>(dy.data(), g_r.data(), B_r.data(), dg_r.data(),
                                         dB_r.data(), dB_bias_r.data(), N, Fl, C);
    cpu::GeluBackward<float>(dg_r.data(), h_r.data(), dh_r.data(), N * Fl);
    ASSERT_TRUE(tp::ColumnParallelLinearBackward<float>(group, dh_r.data(), x.data(), A_r.data(),
                                                        dx_r.data(), dA_r.data(), dA_bias_r.data(),
                                                        N, C, Fl)
                    .ok());
    ExpectNear(dx_r, dx, absl::StrCat("rank ", rank, " input gradient"));
    ExpectNear(dA_r, Rows(dA, C, rank * Fl, Fl), "column-parallel weight gradient");
    ExpectNear(dB_r, Cols(dB, C, F, rank * Fl, Fl), "row-parallel weight gradient");
    ExpectNear(dB_bias_r, dB_bias, "replicated bias gradient");
  });
}

TEST(TensorParallelTest, VocabParallelEmbeddingMatchesTheFullTable) {
  const int N = 10, C = 4, V = 16, Vl = V / kRanks;
  const auto table = Random(V * C, 7);
  std::vector<int32_t> ids = {0, 15, 7, 8, 3, 12, 8, 1, 9, 15};
  const auto d_out = Random(N * C, 8);
  const TensorParallelGroup<float> solo;
  std::vector<float> out(N * C), d_table(V * C, 0);
  ASSERT_TRUE(tp::VocabParallelEmbeddingForward<float>(solo, ids.data(), table.data(), out.data(),
                                                       N, C, 0, V)
                  .ok());
  tp::VocabParallelEmbeddingBackward<float>(ids.data(), d_out.data(), d_table.data(), N, C, 0, V);
  RunOnRanks([&](int rank, const TensorParallelGroup<float>& group) {
    const auto table_r = Rows(table, C, rank * Vl, Vl);
    std::vector<float> out_r(N * C), d_table_r(Vl * C, 0);
    ASSERT_TRUE(tp::VocabParallelEmbeddingForward<float>(group, ids.data(), table_r.data(),
                                                         out_r.data(), N, C, rank * Vl, Vl)
                    .ok());
    ExpectNear(out_r, out, "embedding output");
    tp::VocabParallelEmbeddingBackward<float>(ids.data(), d_out.data(), d_table_r.data(), N, C,
                                              rank * Vl, Vl);
    ExpectNear(d_table_r, Rows(d_table, C, rank * Vl, Vl), "embedding gradient slice");
  });
}

// 13 real tokens padded to 16 columns, split 8 + 8: the second shard holds 5 real columns.
TEST(TensorParallelTest, VocabParallelCrossEntropyCommunicatesOnlyPerTokenScalars) {
  const int N = 7, V = 16, real = 13, Vl = V / kRanks;
  const auto logits = Random(N * V, 9, 3.0f);
  std::vector<int32_t> targets = {0, 12, 5, 8, 7, 9, 3};
  const TensorParallelGroup<float> solo;
  std::vector<float> max(N), sum(N), target(N), losses(N), d_logits(N * V, 0);
  const tp::CrossEntropyStats<float> stats{max.data(), sum.data(), target.data()};
  ASSERT_TRUE(tp::VocabParallelCrossEntropyForward<float>(solo, logits.data(), targets.data(),
                                                          {N, V, real, 0}, stats, losses.data())
                  .ok());
  tp::VocabParallelCrossEntropyBackward<float>(logits.data(), targets.data(), {N, V, real, 0},
                                               stats, 1.0f / N, d_logits.data());
  std::vector<size_t> reduced;
  RunOnRanks(
      [&](int rank, const TensorParallelGroup<float>& group) {
        const auto logits_r = Cols(logits, N, V, rank * Vl, Vl);
        const int valid = std::clamp(real - rank * Vl, 0, Vl);
        const cpu::VocabShard shard{N, Vl, valid, rank * Vl};
        std::vector<float> max_r(N), sum_r(N), target_r(N), losses_r(N), d_r(N * Vl, 0);
        const tp::CrossEntropyStats<float> stats_r{max_r.data(), sum_r.data(), target_r.data()};
        ASSERT_TRUE(tp::VocabParallelCrossEntropyForward<float>(
                        group, logits_r.data(), targets.data(), shard, stats_r, losses_r.data())
                        .ok());
        ExpectNear(losses_r, losses, "per-token losses");
        tp::VocabParallelCrossEntropyBackward<float>(logits_r.data(), targets.data(), shard,
                                                     stats_r, 1.0f / N, d_r.data());
        ExpectNear(d_r, Cols(d_logits, N, V, rank * Vl, Vl), "logit gradient slice");
      },
      &reduced);
  // max, sum of exponentials, target logit: three reductions of N scalars, never logits.
  EXPECT_EQ(reduced, (std::vector<size_t>{N, N, N}));
}

TEST(TensorParallelTest, GatherAndSplitAlongTheLastDimensionAreInverse) {
  const int rows = 3, cols = 2;
  RunOnRanks([&](int rank, const TensorParallelGroup<float>& group) {
    std::vector<float> local(rows * cols);
    for (int i = 0; i < rows * cols; ++i) local[i] = 100.0f * rank + i;
    std::vector<float> full(rows * cols * kRanks);
    ASSERT_TRUE(tp::GatherLastDim<float>(group, local.data(), full.data(), rows, cols).ok());
    // Row r of the full matrix is [rank 0's row r, rank 1's row r].
    EXPECT_EQ(full[0], 0.0f);
    EXPECT_EQ(full[2], 100.0f);
    EXPECT_EQ(full[4], 2.0f);
    std::vector<float> back(rows * cols);
    tp::SplitLastDim<float>(group, full.data(), back.data(), rows, cols, false);
    EXPECT_EQ(back, local);
  });
}

// Sequence parallelism's mappings: a row-parallel block's partial outputs reduce-scattered
// give each rank its rows of the all-reduced sum, and all-gathering the rows rebuilds it.
TEST(TensorParallelTest, ReduceScatterAndGatherAlongTheSequenceAreConjugate) {
  const int rows = 3, cols = 4;  // per rank; the full sequence has kRanks * rows rows
  RunOnRanks([&](int rank, const TensorParallelGroup<float>& group) {
    const std::vector<float> partial = Random(kRanks * rows * cols, 40 + rank);
    std::vector<float> summed = partial;
    ASSERT_TRUE(tp::AllReduceSum<float>(group, summed.data(), summed.size()).ok());
    std::vector<float> mine(rows * cols);
    ASSERT_TRUE(
        tp::ReduceScatterSequence<float>(group, partial.data(), mine.data(), rows, cols).ok());
    ExpectNear(mine, Rows(summed, cols, rank * rows, rows), "reduce-scattered rows");
    std::vector<float> full(kRanks * rows * cols);
    ASSERT_TRUE(tp::GatherSequence<float>(group, mine.data(), full.data(), rows, cols).ok());
    ExpectNear(full, summed, "gathered sequence");
  });
}

}  // namespace
}  // namespace mtrain
