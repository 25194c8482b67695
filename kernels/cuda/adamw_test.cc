#include "kernels/cuda/adamw.h"

#include <algorithm>
#include <cstring>

#include "kernels/adamw.h"
#include "kernels/cuda/test_support.h"

namespace mtrain::cuda {
namespace {

using testing::DeviceArray;

// Three steps of AdamW on fp32 masters from G gradients, against the CPU update in double
// on the same (rounded) gradients.
template <typename G, typename P>
void CheckAdamW(double tolerance) {
  const size_t n = 65537;
  std::vector<float> master = testing::RandomFloats(n, 31, -1, 1);
  std::vector<float> m(n, 0.0f), v(n, 0.0f);
  DeviceArray<float> dmaster(master), dm(m), dv(v);
  DeviceArray<P> dcopy(n);
  std::vector<double> ref_p = testing::ToDouble(master), ref_m(n, 0), ref_v(n, 0);
  cpu::AdamWHyperparameters h;
  h.lr = 1e-2f;
  h.weight_decay = 0.1f;
  h.grad_scale = 0.5f;
  for (int step = 1; step <= 3; ++step) {
    h.step = step;
    const std::vector<float> grad =
        testing::RoundedTo<G>(testing::RandomFloats(n, 40 + step, -2, 2));
    DeviceArray<G> dgrad(grad);
    const absl::Status updated = AdamWUpdate<G, P>(dmaster.get(), dgrad.get(), dm.get(), dv.get(),
                                                   dcopy.get(), n, h, nullptr);
    ASSERT_TRUE(updated.ok()) << updated;
    const std::vector<double> gd = testing::ToDouble(grad);
    cpu::AdamWUpdate<double>(ref_p.data(), gd.data(), ref_m.data(), ref_v.data(), n, h);
  }
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const double master_error = testing::RelativeError(dmaster.Download(), ref_p);
  const double moment_error = testing::RelativeError(dv.Download(), ref_v);
  const double copy_error = testing::RelativeError(dcopy.Download(), ref_p);
  std::printf("adamw grads %s copy %s: master %.2e, v %.2e, copy %.2e\n", testing::TypeName<G>(),
              testing::TypeName<P>(), master_error, moment_error, copy_error);
  // The masters and moments are fp32 whatever the gradients' storage.
  EXPECT_LT(master_error, testing::kFp32Tolerance);
  EXPECT_LT(moment_error, testing::kFp32Tolerance);
  EXPECT_LT(copy_error, tolerance);
}

TEST(CudaAdamWTest, Fp32MatchesTheCpu) {
  MTRAIN_SKIP_WITHOUT_GPU();
  CheckAdamW<float, float>(testing::kFp32Tolerance);
}

TEST(CudaAdamWTest, Bf16GradientsAndCopyOverFp32Masters) {
  MTRAIN_SKIP_WITHOUT_GPU();
  CheckAdamW<__nv_bfloat16, __nv_bfloat16>(testing::kBf16Tolerance);
  CheckAdamW<float, __nv_bfloat16>(testing::kBf16Tolerance);
}

// fp16 mixed precision: fp32 gradients (or fp16 ones) into an fp16 working copy.
TEST(CudaAdamWTest, Fp16CopyOverFp32Masters) {
  MTRAIN_SKIP_WITHOUT_GPU();
  CheckAdamW<float, __half>(testing::kFp16Tolerance);
  CheckAdamW<__half, __half>(testing::kFp16Tolerance);
}

// The whole-model launch equals one launch per range bit for bit: ranges of alternating
// weight decay (some over several chunks, one partial), the first not at the buffer's start,
// moments indexed from the optimizer range's start, two steps.
template <typename P>
void CheckChunksEqualRanges() {
  const size_t n = 300007, range_begin = 1001;
  const std::vector<AdamWRange> ranges = {
      {1001, 1769, 0.1f}, {1769, 150000, 0.0f}, {150000, 150768, 0.1f}, {150768, 300007, 0.0f}};
  const std::vector<float> master = testing::RandomFloats(n, 51, -1, 1);
  const std::vector<float> zeros(n - range_begin, 0.0f);
  DeviceArray<float> per_range(master), chunked(master), m1(zeros), v1(zeros), m2(zeros), v2(zeros);
  DeviceArray<P> copy1(n), copy2(n);
  const std::vector<AdamWChunk> chunks = MakeAdamWChunks(ranges);
  size_t covered = 0;
  for (const AdamWChunk& c : chunks) covered += c.count;
  ASSERT_EQ(covered, n - range_begin);
  ASSERT_GT(chunks.size(), ranges.size());
  std::vector<float> chunk_words(chunks.size() * sizeof(AdamWChunk) / sizeof(float));
  std::memcpy(chunk_words.data(), chunks.data(), chunks.size() * sizeof(AdamWChunk));
  DeviceArray<float> device_chunks(chunk_words);
  cpu::AdamWHyperparameters h;
  h.lr = 1e-2f;
  h.grad_scale = 0.5f;
  for (int step = 1; step <= 2; ++step) {
    h.step = step;
    DeviceArray<float> grad(testing::RandomFloats(n, 60 + step, -2, 2));
    for (const AdamWRange& r : ranges) {
      h.weight_decay = r.weight_decay;
      const absl::Status s = AdamWUpdate<float, P>(
          per_range.get() + r.begin, grad.get() + r.begin, m1.get() + (r.begin - range_begin),
          v1.get() + (r.begin - range_begin), copy1.get() + r.begin, r.end - r.begin, h, nullptr);
      ASSERT_TRUE(s.ok()) << s;
    }
    const absl::Status s = AdamWUpdateChunks<float, P>(
        chunked.get(), grad.get(), m2.get(), v2.get(), copy2.get(), range_begin,
        reinterpret_cast<const AdamWChunk*>(device_chunks.get()), static_cast<int>(chunks.size()),
        h, nullptr);
    ASSERT_TRUE(s.ok()) << s;
  }
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(chunked.Download(), per_range.Download());
  EXPECT_EQ(m2.Download(), m1.Download());
  EXPECT_EQ(v2.Download(), v1.Download());
  const std::vector<float> c1 = copy1.Download(), c2 = copy2.Download();
  EXPECT_TRUE(std::equal(c1.begin() + range_begin, c1.end(), c2.begin() + range_begin));
  std::printf("adamw chunks %s: %zu chunks over %zu ranges equal the per-range launches\n",
              testing::TypeName<P>(), chunks.size(), ranges.size());
}

TEST(CudaAdamWTest, OneLaunchOverChunksEqualsOneLaunchPerRange) {
  MTRAIN_SKIP_WITHOUT_GPU();
  CheckChunksEqualRanges<float>();
  CheckChunksEqualRanges<__nv_bfloat16>();
}

}  // namespace
}  // namespace mtrain::cuda
