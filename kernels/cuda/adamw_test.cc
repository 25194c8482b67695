#include "kernels/cuda/adamw.h"

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

}  // namespace
}  // namespace mtrain::cuda
