#include "kernels/cuda/embedding.h"

#include <algorithm>
#include <cstring>

#include "kernels/cuda/test_support.h"
#include "kernels/embedding.h"

namespace mtrain::cuda {
namespace {

using testing::DeviceArray;

// Device copy of int32 data (token ids, a gradient plan's arrays).
class DeviceInts {
 public:
  explicit DeviceInts(const std::vector<int32_t>& values) {
    EXPECT_EQ(cudaMalloc(&data_, std::max<size_t>(1, values.size()) * 4), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(data_, values.data(), values.size() * 4, cudaMemcpyHostToDevice),
              cudaSuccess);
  }
  ~DeviceInts() { cudaFree(data_); }
  DeviceInts(const DeviceInts&) = delete;
  DeviceInts& operator=(const DeviceInts&) = delete;
  const int32_t* get() const { return static_cast<const int32_t*>(data_); }

 private:
  void* data_ = nullptr;
};

size_t BitMismatches(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  size_t count = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    count += std::memcmp(&a[i], &b[i], sizeof(float)) != 0;
  }
  return count;
}

constexpr int kBatch = 4, kSeq = 67, kMaxSeq = 80, kC = 96, kVocab = 1000;
constexpr int kVocabStart = 400, kLocalVocab = 350;  // this rank's shard: [400, 750)

// Tokens over the whole vocabulary (so some belong to other shards), with a few ids
// repeated many times, as real text repeats common tokens.
std::vector<int32_t> Tokens(int n) {
  std::mt19937 rng(61);
  std::vector<int32_t> tokens(n);
  for (int i = 0; i < n; ++i) tokens[i] = rng() % kVocab;
  for (int i = 0; i < n; i += 5) tokens[i] = 500;
  for (int i = 3; i < n; i += 11) tokens[i] = kVocabStart;                    // first row
  for (int i = 7; i < n; i += 13) tokens[i] = kVocabStart + kLocalVocab - 1;  // last row
  for (int i = 2; i < n; i += 17) tokens[i] = kVocabStart + kLocalVocab;      // just outside
  return tokens;
}

// Forward and both backwards against the CPU kernels in float on the same (rounded) inputs:
// the CPU's token lookup, then its position lookup accumulated; its sequential backward
// loops. Gradients are fp32 from the same d_out values whatever T, so they must match bit
// for bit, as must the fp32 forward.
template <typename T>
void CheckEmbedding(double tolerance) {
  const int n = kBatch * kSeq;
  const std::vector<int32_t> tokens = Tokens(n);
  const std::vector<float> wte =
      testing::RoundedTo<T>(testing::RandomFloats(size_t(kLocalVocab) * kC, 62, -1, 1));
  const std::vector<float> wpe =
      testing::RoundedTo<T>(testing::RandomFloats(size_t(kMaxSeq) * kC, 63, -1, 1));
  const std::vector<float> d_out =
      testing::RoundedTo<T>(testing::RandomFloats(size_t(n) * kC, 64, -1, 1));
  const std::vector<float> d_wte0 = testing::RandomFloats(size_t(kLocalVocab) * kC, 65, -1, 1);
  const std::vector<float> d_wpe0 = testing::RandomFloats(size_t(kMaxSeq) * kC, 66, -1, 1);
  const EmbeddingGradPlan plan = PlanEmbeddingGrad(tokens.data(), n, kVocabStart, kLocalVocab);

  DeviceInts dtokens(tokens), drows(plan.rows), dstarts(plan.starts), dpositions(plan.positions);
  DeviceArray<T> dwte(wte), dwpe(wpe), dout(size_t(n) * kC), ddout(d_out);
  DeviceArray<float> ddwte(d_wte0), ddwpe(d_wpe0);
  absl::Status s =
      TokenPositionEmbeddingForward<T>(dtokens.get(), dwte.get(), dwpe.get(), dout.get(), kBatch,
                                       kSeq, kC, kVocabStart, kLocalVocab, nullptr);
  ASSERT_TRUE(s.ok()) << s;
  s = TokenEmbeddingBackward<T>(ddout.get(), drows.get(), dstarts.get(), dpositions.get(),
                                static_cast<int>(plan.rows.size()), kC, ddwte.get(), nullptr);
  ASSERT_TRUE(s.ok()) << s;
  s = PositionEmbeddingBackward<T>(ddout.get(), kBatch, kSeq, kC, ddwpe.get(), nullptr);
  ASSERT_TRUE(s.ok()) << s;
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);

  std::vector<int32_t> positions(n);
  for (int i = 0; i < n; ++i) positions[i] = i % kSeq;
  std::vector<float> out_ref(size_t(n) * kC), d_wte_ref = d_wte0, d_wpe_ref = d_wpe0;
  cpu::EmbeddingForward<float>(tokens.data(), wte.data(), out_ref.data(), n, kC, kVocabStart,
                               kLocalVocab, /*accumulate=*/false);
  cpu::EmbeddingForward<float>(positions.data(), wpe.data(), out_ref.data(), n, kC, 0, kMaxSeq,
                               /*accumulate=*/true);
  cpu::EmbeddingBackward<float>(tokens.data(), d_out.data(), d_wte_ref.data(), n, kC, kVocabStart,
                                kLocalVocab);
  cpu::EmbeddingBackward<float>(positions.data(), d_out.data(), d_wpe_ref.data(), n, kC, 0,
                                kMaxSeq);
  for (float& e : out_ref) e = testing::RoundTo<T>(e);  // the GPU rounds its float sum once
  const std::vector<float> out = dout.Download();
  const std::vector<float> d_wte = ddwte.Download(), d_wpe = ddwpe.Download();
  const double forward_error = testing::RelativeError(out, testing::ToDouble(out_ref));
  const double d_wte_error = testing::RelativeError(d_wte, testing::ToDouble(d_wte_ref));
  const double d_wpe_error = testing::RelativeError(d_wpe, testing::ToDouble(d_wpe_ref));
  std::printf(
      "embedding %s B%d S%d C%d shard [%d, %d), %zu rows used: forward %.2e (%zu bits differ), "
      "d_wte %.2e (%zu), d_wpe %.2e (%zu)\n",
      testing::TypeName<T>(), kBatch, kSeq, kC, kVocabStart, kVocabStart + kLocalVocab,
      plan.rows.size(), forward_error, BitMismatches(out, out_ref), d_wte_error,
      BitMismatches(d_wte, d_wte_ref), d_wpe_error, BitMismatches(d_wpe, d_wpe_ref));
  EXPECT_LT(forward_error, tolerance);
  EXPECT_LT(d_wte_error, tolerance);
  EXPECT_LT(d_wpe_error, tolerance);
  if constexpr (sizeof(T) == 4) {
    EXPECT_EQ(BitMismatches(out, out_ref), 0u);
  }
  EXPECT_EQ(BitMismatches(d_wte, d_wte_ref), 0u);
  EXPECT_EQ(BitMismatches(d_wpe, d_wpe_ref), 0u);
}

TEST(CudaEmbeddingTest, Fp32IsBitIdenticalToTheCpu) {
  MTRAIN_SKIP_WITHOUT_GPU();
  CheckEmbedding<float>(testing::kFp32Tolerance);
}

TEST(CudaEmbeddingTest, Bf16MatchesTheCpu) {
  MTRAIN_SKIP_WITHOUT_GPU();
  CheckEmbedding<__nv_bfloat16>(testing::kBf16Tolerance);
}

TEST(CudaEmbeddingTest, Fp16MatchesTheCpu) {
  MTRAIN_SKIP_WITHOUT_GPU();
  CheckEmbedding<__half>(testing::kFp16Tolerance);
}

// Host-only: the plan is the CPU's accumulation order, grouped by row.
TEST(CudaEmbeddingTest, PlanGroupsTokenIndicesByRowInOrder) {
  const std::vector<int32_t> tokens = {7, 3, 12, 7, 5, 3, 7, 2, 9};
  const EmbeddingGradPlan plan = PlanEmbeddingGrad(tokens.data(), 9, /*vocab_start=*/3,
                                                   /*local_vocab=*/7);  // ids [3, 10)
  EXPECT_EQ(plan.rows, (std::vector<int32_t>{0, 2, 4, 6}));
  EXPECT_EQ(plan.starts, (std::vector<int32_t>{0, 2, 3, 6, 7}));
  EXPECT_EQ(plan.positions, (std::vector<int32_t>{1, 5, 4, 0, 3, 6, 8}));
  const EmbeddingGradPlan empty = PlanEmbeddingGrad(tokens.data(), 9, 100, 10);
  EXPECT_TRUE(empty.rows.empty());
  EXPECT_EQ(empty.starts, (std::vector<int32_t>{0}));
  EXPECT_TRUE(empty.positions.empty());
}

TEST(CudaEmbeddingTest, RefusesBadSizes) {
  EXPECT_EQ(TokenPositionEmbeddingForward<float>(nullptr, nullptr, nullptr, nullptr, 1, 1, 0, 0, 1,
                                                 nullptr)
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(TokenPositionEmbeddingForward<float>(nullptr, nullptr, nullptr, nullptr, -1, 1, 8, 0, 1,
                                                 nullptr)
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      TokenEmbeddingBackward<float>(nullptr, nullptr, nullptr, nullptr, -1, 8, nullptr, nullptr)
          .code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(PositionEmbeddingBackward<float>(nullptr, 1, 1, 0, nullptr, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace mtrain::cuda
