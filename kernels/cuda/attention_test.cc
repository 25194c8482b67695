#include "kernels/cuda/attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "kernels/attention.h"
#include "kernels/cuda/test_support.h"

namespace mtrain::cuda {
namespace {

using testing::DeviceArray;

// Bound on |lse - reference| (natural-log units). Both sides see the same (bf16-rounded)
// inputs; the GPU sums the scores in fp32 (bf16 products are exact in fp32), so the error is
// fp32 rounding of sums of at most D products plus exp/log approximations: ~1e-6 at these
// input scales. 1e-3 leaves a wide margin and still catches a wrong row, mask or scale
// (those move lse by O(0.1) or more).
constexpr double kLseTolerance = 1e-3;

// qkv[B, S, H + 2 Hkv, D] and out[B, S, H, D].
size_t QkvSize(const AttentionShape& shape) {
  return size_t(shape.batch) * shape.seq * (shape.heads + 2 * shape.kv_head_count()) *
         shape.head_dim;
}
size_t OutSize(const AttentionShape& shape) {
  return size_t(shape.batch) * shape.seq * shape.heads * shape.head_dim;
}

// lse[b, h, i] = log sum_{j<=i} exp(q_i . k_j / sqrt(D)) in double, query head h reading
// key head h / (H / Hkv).
std::vector<double> ReferenceLse(const std::vector<double>& qkv, const AttentionShape& shape) {
  const int S = shape.seq, H = shape.heads, D = shape.head_dim, Hkv = shape.kv_head_count();
  const size_t row = size_t(H + 2 * Hkv) * D;
  std::vector<double> lse(size_t(shape.batch) * H * S);
  std::vector<double> scores(S);
  for (int b = 0; b < shape.batch; ++b) {
    for (int h = 0; h < H; ++h) {
      for (int i = 0; i < S; ++i) {
        const double* q = &qkv[(size_t(b) * S + i) * row + size_t(h) * D];
        double row_max = -INFINITY;
        for (int j = 0; j <= i; ++j) {
          const double* k = &qkv[(size_t(b) * S + j) * row + size_t(H + h / (H / Hkv)) * D];
          double dot = 0;
          for (int d = 0; d < D; ++d) dot += q[d] * k[d];
          scores[j] = dot / std::sqrt(double(D));
          row_max = std::max(row_max, scores[j]);
        }
        double sum = 0;
        for (int j = 0; j <= i; ++j) sum += std::exp(scores[j] - row_max);
        lse[(size_t(b) * H + h) * S + i] = row_max + std::log(sum);
      }
    }
  }
  return lse;
}

// max |got - want|; infinite where got is not finite (std::max would skip a NaN).
double MaxAbsError(const std::vector<float>& got, const std::vector<double>& want) {
  EXPECT_EQ(got.size(), want.size());
  double error = 0;
  for (size_t i = 0; i < got.size() && i < want.size(); ++i) {
    if (!std::isfinite(got[i])) return INFINITY;
    error = std::max(error, std::abs(double(got[i]) - want[i]));
  }
  return error;
}

// How many values are NaN or infinite (testing::RelativeError passes over NaNs).
size_t NonFinite(const std::vector<float>& values) {
  return std::count_if(values.begin(), values.end(), [](float x) { return !std::isfinite(x); });
}

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Forward and backward against the CPU attention in double, which materialises the S x S
// probabilities: the flash kernels must give the same numbers without them. With
// `repeat`, the forward and the backward run a second time on fresh outputs, which must
// match the first bit for bit (fixed summation orders, no atomics). d_out is uniform in
// [-d_out_scale, d_out_scale].
//
// With `overwrite`, the backward runs with accumulate = false into a d_qkv full of NaNs,
// which must all be replaced (the reference then starts from zero).
template <typename T>
void CheckAttention(const AttentionShape& shape, const AttentionDropout& dropout, double tolerance,
                    double lse_tolerance, bool repeat = false, float d_out_scale = 1.0f,
                    bool overwrite = false) {
  const size_t qkv_size = QkvSize(shape);
  const size_t out_size = OutSize(shape);
  const size_t lse_size = size_t(shape.batch) * shape.heads * shape.seq;
  // The inputs as T holds them (bf16 or fp16 rounding), so both sides see the same values.
  auto round = [](std::vector<float> v) { return testing::RoundedTo<T>(std::move(v)); };
  const std::vector<float> qkv = round(testing::RandomFloats(qkv_size, 91, -2, 2));
  const std::vector<float> d_out =
      round(testing::RandomFloats(out_size, 92, -d_out_scale, d_out_scale));
  const std::vector<float> d_qkv0 = overwrite
                                        ? std::vector<float>(qkv_size, 0.0f)
                                        : round(testing::RandomFloats(qkv_size, 93, -0.1, 0.1));
  const std::vector<float> d_qkv_start =
      overwrite ? std::vector<float>(qkv_size, std::nanf("")) : d_qkv0;
  DeviceArray<T> dqkv(qkv), dout(out_size), ddout(d_out), ddqkv(d_qkv_start);
  DeviceArray<float> dlse(lse_size);
  absl::Status s =
      FlashAttentionForward<T>(dqkv.get(), dout.get(), dlse.get(), shape, dropout, nullptr);
  ASSERT_TRUE(s.ok()) << s;
  s = FlashAttentionBackward<T>(ddout.get(), dqkv.get(), dout.get(), dlse.get(), ddqkv.get(), shape,
                                dropout, nullptr, /*accumulate=*/!overwrite);
  ASSERT_TRUE(s.ok()) << s;
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);

  const std::vector<double> qd = testing::ToDouble(qkv), dod = testing::ToDouble(d_out);
  std::vector<double> out(out_size), d_qkv = testing::ToDouble(d_qkv0);
  std::vector<double> cpu_lse(lse_size);
  cpu::AttentionForward<double>(qd.data(), out.data(), cpu_lse.data(), shape, dropout);
  cpu::AttentionBackward<double>(dod.data(), qd.data(), out.data(), cpu_lse.data(), d_qkv.data(),
                                 shape, dropout);
  const std::vector<float> got_out = dout.Download(), got_lse = dlse.Download();
  const std::vector<float> got_d_qkv = ddqkv.Download();
  const double out_error = testing::RelativeError(got_out, out);
  const double lse_error = MaxAbsError(got_lse, ReferenceLse(qd, shape));
  const double grad_error = testing::RelativeError(got_d_qkv, d_qkv);
  std::printf(
      "%s%s attention %s B%d S%d H%d Hkv%d D%d dropout %.2f (heads from %d of %d): out %.2e, "
      "lse %.2e (abs), d_qkv %.2e\n",
      AttentionPathFor<T>(shape, dropout.p).c_str(), overwrite ? " (gradient overwritten)" : "",
      testing::TypeName<T>(), shape.batch, shape.seq, shape.heads, shape.kv_head_count(),
      shape.head_dim, dropout.p, dropout.head_offset,
      dropout.total_heads > 0 ? dropout.total_heads : shape.heads, out_error, lse_error,
      grad_error);
  EXPECT_EQ(NonFinite(got_out), 0u);
  EXPECT_EQ(NonFinite(got_lse), 0u);
  EXPECT_EQ(NonFinite(got_d_qkv), 0u);
  EXPECT_LT(out_error, tolerance);
  EXPECT_LT(lse_error, lse_tolerance);
  EXPECT_LT(grad_error, tolerance);

  if (!repeat) return;
  DeviceArray<T> dout2(out_size), ddqkv2(d_qkv_start);
  DeviceArray<float> dlse2(lse_size);
  s = FlashAttentionForward<T>(dqkv.get(), dout2.get(), dlse2.get(), shape, dropout, nullptr);
  ASSERT_TRUE(s.ok()) << s;
  // The second backward uses the first forward's out and lse: only the backward varies.
  s = FlashAttentionBackward<T>(ddout.get(), dqkv.get(), dout.get(), dlse.get(), ddqkv2.get(),
                                shape, dropout, nullptr, /*accumulate=*/!overwrite);
  ASSERT_TRUE(s.ok()) << s;
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_TRUE(SameBits(dout2.Download(), got_out)) << "forward out differs between runs";
  EXPECT_TRUE(SameBits(dlse2.Download(), got_lse)) << "forward lse differs between runs";
  EXPECT_TRUE(SameBits(ddqkv2.Download(), got_d_qkv)) << "backward d_qkv differs between runs";
}

AttentionDropout Dropout(float p, int head_offset, int total_heads) {
  AttentionDropout dropout;
  dropout.p = p;
  dropout.key = 0x1234abcd;
  dropout.head_offset = head_offset;
  dropout.total_heads = total_heads;
  return dropout;
}

// The tests below hold the hand-written kernels to the CPU; the cuDNN tests at the end
// switch to cuDNN's fused attention for their scope.
const bool kHandWrittenByDefault =
    (SetAttentionImplementation(AttentionImplementation::kHandWritten), true);

class PreferCudnn {
 public:
  PreferCudnn() { SetAttentionImplementation(AttentionImplementation::kAuto); }
  ~PreferCudnn() { SetAttentionImplementation(AttentionImplementation::kHandWritten); }
};

TEST(CudaFlashAttentionTest, Fp32MatchesTheCpu) {
  MTRAIN_SKIP_WITHOUT_GPU();
  for (int head_dim : {32, 64, 128}) {
    CheckAttention<float>({2, 200, 3, head_dim}, {}, testing::kFp32Tolerance, 1e-4);
  }
}

TEST(CudaFlashAttentionTest, Fp32WithTheCpuDropoutMasks) {
  MTRAIN_SKIP_WITHOUT_GPU();
  // Heads 3..5 of 6, as tensor rank 1 of 2 holds them.
  CheckAttention<float>({2, 130, 3, 64}, Dropout(0.1f, 3, 6), testing::kFp32Tolerance, 1e-4);
}

// bf16 at head dims 64 and 128 runs on the tensor cores (mma.sync): sequence lengths off
// the tile sizes (64-key tiles, 64- or 128-query tiles, 16-row warp tiles) leave partial
// tiles on both sides of the causal diagonal.
TEST(CudaFlashAttentionTest, Bf16MatchesTheCpu) {
  MTRAIN_SKIP_WITHOUT_GPU();
  CheckAttention<__nv_bfloat16>({2, 256, 4, 64}, {}, testing::kBf16Tolerance, kLseTolerance);
}

TEST(CudaFlashAttentionTest, Bf16TensorCoresMatchTheCpu) {
  MTRAIN_SKIP_WITHOUT_GPU();
  for (int head_dim : {64, 128}) {
    for (int seq : {100, 257}) {
      CheckAttention<__nv_bfloat16>({2, seq, 3, head_dim}, {}, testing::kBf16Tolerance,
                                    kLseTolerance);
    }
  }
}

TEST(CudaFlashAttentionTest, Bf16TensorCoresAtTileEdges) {
  MTRAIN_SKIP_WITHOUT_GPU();
  // One row; less than one 16-row warp tile; exactly one and just over one 64-row tile;
  // exactly one and just over one 128-row forward tile (head dim 64).
  for (int seq : {1, 17, 64, 65, 128, 129}) {
    CheckAttention<__nv_bfloat16>({1, seq, 2, 64}, {}, testing::kBf16Tolerance, kLseTolerance);
  }
  for (int seq : {1, 31, 33, 64, 97}) {
    CheckAttention<__nv_bfloat16>({1, seq, 1, 128}, {}, testing::kBf16Tolerance, kLseTolerance);
  }
}

TEST(CudaFlashAttentionTest, Bf16TensorCoresWithTheCpuDropoutMasks) {
  MTRAIN_SKIP_WITHOUT_GPU();
  // Heads 3..5 of 6 (tensor rank 1 of 2): the mask index carries the global head.
  for (int head_dim : {64, 128}) {
    CheckAttention<__nv_bfloat16>({2, 257, 3, head_dim}, Dropout(0.1f, 3, 6),
                                  testing::kBf16Tolerance, kLseTolerance);
  }
  CheckAttention<__nv_bfloat16>({2, 100, 3, 64}, Dropout(0.2f, 0, 0), testing::kBf16Tolerance,
                                kLseTolerance);
}

TEST(CudaFlashAttentionTest, Bf16TensorCoresAreDeterministic) {
  MTRAIN_SKIP_WITHOUT_GPU();
  for (int head_dim : {64, 128}) {
    CheckAttention<__nv_bfloat16>({2, 257, 3, head_dim}, Dropout(0.1f, 1, 4),
                                  testing::kBf16Tolerance, kLseTolerance, /*repeat=*/true);
  }
}

TEST(CudaFlashAttentionTest, Bf16HeadDim32UsesTheScalarKernels) {
  MTRAIN_SKIP_WITHOUT_GPU();
  CheckAttention<__nv_bfloat16>({2, 100, 3, 32}, Dropout(0.1f, 0, 0), testing::kBf16Tolerance,
                                kLseTolerance, /*repeat=*/true);
}

// fp16 at head dims 64 and 128 takes the bf16 kernels' tensor-core code with fp16
// operands (mma .f16); head dim 32 the scalar kernels (fp32 arithmetic, fp16 storage).
TEST(CudaFlashAttentionTest, Fp16MatchesTheCpu) {
  MTRAIN_SKIP_WITHOUT_GPU();
  for (int head_dim : {32, 64, 128}) {
    CheckAttention<__half>({2, 130, 3, head_dim}, Dropout(0.1f, 1, 4), testing::kFp16Tolerance,
                           kLseTolerance);
  }
}

TEST(CudaFlashAttentionTest, Fp16TensorCoresAtTileEdgesAndDeterministic) {
  MTRAIN_SKIP_WITHOUT_GPU();
  for (int head_dim : {64, 128}) {
    for (int seq : {1, 17, 64, 65, 129, 257}) {
      CheckAttention<__half>({1, seq, 2, head_dim}, {}, testing::kFp16Tolerance, kLseTolerance);
    }
    CheckAttention<__half>({2, 257, 3, head_dim}, Dropout(0.1f, 3, 6), testing::kFp16Tolerance,
                           kLseTolerance, /*repeat=*/true);
  }
}

// Loss-scaled gradients: d_out in the thousands gives dS and d_qkv of order 1e4 (numpy's
// estimate for these shapes), a fifth of fp16's range; they stay finite and as accurate.
TEST(CudaFlashAttentionTest, Fp16TensorCoresWithLossScaledGradients) {
  MTRAIN_SKIP_WITHOUT_GPU();
  for (int head_dim : {64, 128}) {
    CheckAttention<__half>({1, 129, 2, head_dim}, {}, testing::kFp16Tolerance, kLseTolerance,
                           /*repeat=*/false, /*d_out_scale=*/4000.0f);
  }
}

// Grouped-query heads (Llama-style decoders): query head h reads key-value head h / (H / Hkv);
// the dK/dV of a key-value head sum its group's query heads. The scalar kernels run them at
// every T; twice for the bits.
TEST(CudaFlashAttentionTest, GroupedQueryHeadsMatchTheCpu) {
  MTRAIN_SKIP_WITHOUT_GPU();
  for (int kv_heads : {2, 1}) {
    CheckAttention<float>({2, 130, 4, 64, kv_heads}, {}, testing::kFp32Tolerance, 1e-4,
                          /*repeat=*/true);
    // Heads 4..7 of 8 (tensor rank 1 of 2) with the CPU's dropout masks.
    CheckAttention<float>({2, 97, 4, 32, kv_heads}, Dropout(0.1f, 4, 8), testing::kFp32Tolerance,
                          1e-4);
    CheckAttention<__nv_bfloat16>({2, 129, 4, 64, kv_heads}, {}, testing::kBf16Tolerance,
                                  kLseTolerance, /*repeat=*/true);
    CheckAttention<__half>({1, 100, 4, 128, kv_heads}, {}, testing::kFp16Tolerance, kLseTolerance);
  }
}

TEST(CudaFlashAttentionTest, RefusesKeyValueHeadsThatDoNotDivideTheHeads) {
  MTRAIN_SKIP_WITHOUT_GPU();
  DeviceArray<float> buffer(1024), lse(64);
  const absl::Status s = FlashAttentionForward<float>(buffer.get(), buffer.get(), lse.get(),
                                                      {1, 4, 4, 32, 3}, {}, nullptr);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(std::string(s.message()).find("kv_heads 3 must divide heads 4"), std::string::npos)
      << s;
}

TEST(CudaFlashAttentionTest, RefusesUnsupportedHeadDims) {
  EXPECT_EQ(
      FlashAttentionForward<float>(nullptr, nullptr, nullptr, {1, 4, 1, 48}, {}, nullptr).code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      FlashAttentionForward<__nv_bfloat16>(nullptr, nullptr, nullptr, {1, 4, 1, 96}, {}, nullptr)
          .code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(FlashAttentionBackward<__nv_bfloat16>(nullptr, nullptr, nullptr, nullptr, nullptr,
                                                  {1, 4, 1, 256}, {}, nullptr)
                .code(),
            absl::StatusCode::kInvalidArgument);
}

// cuDNN's fused attention (bf16/fp16 without attention dropout), at GPT-2's head size and
// Llama's, off the tile sizes, with grouped-query heads; twice for the bits (the backward
// uses cuDNN's deterministic algorithm), accumulating and overwriting the gradient.
TEST(CudnnAttentionTest, RunsWhereItCanAndSaysWhyNot) {
  MTRAIN_SKIP_WITHOUT_GPU();
  ASSERT_TRUE(kHandWrittenByDefault);
  PreferCudnn prefer;
  const std::string path = AttentionPathFor<__nv_bfloat16>({2, 256, 4, 64}, 0.0f);
  std::printf("bf16 B2 S256 H4 D64: %s\n", path.c_str());
  EXPECT_EQ(path.rfind("cuDNN ", 0), 0u) << path;
  EXPECT_NE(AttentionPathFor<__nv_bfloat16>({2, 256, 4, 64}, 0.1f).find("attention dropout"),
            std::string::npos);
  EXPECT_NE(AttentionPathFor<float>({2, 256, 4, 64}, 0.0f).find("fp32"), std::string::npos);
  SetAttentionImplementation(AttentionImplementation::kHandWritten);
  EXPECT_NE(AttentionPathFor<__nv_bfloat16>({2, 256, 4, 64}, 0.0f).find("handwritten"),
            std::string::npos);
}

TEST(CudnnAttentionTest, Bf16MatchesTheCpu) {
  MTRAIN_SKIP_WITHOUT_GPU();
  PreferCudnn prefer;
  for (int head_dim : {64, 128}) {
    for (int seq : {1, 17, 100, 257}) {
      CheckAttention<__nv_bfloat16>({2, seq, 3, head_dim}, {}, testing::kBf16Tolerance,
                                    kLseTolerance, /*repeat=*/seq == 257);
    }
  }
  CheckAttention<__nv_bfloat16>({2, 256, 4, 64}, {}, testing::kBf16Tolerance, kLseTolerance,
                                /*repeat=*/true, 1.0f, /*overwrite=*/true);
}

TEST(CudnnAttentionTest, Fp16AndGroupedQueryHeadsMatchTheCpu) {
  MTRAIN_SKIP_WITHOUT_GPU();
  PreferCudnn prefer;
  CheckAttention<__half>({2, 130, 3, 64}, {}, testing::kFp16Tolerance, kLseTolerance,
                         /*repeat=*/true);
  for (int kv_heads : {2, 1}) {
    CheckAttention<__nv_bfloat16>({2, 129, 4, 64, kv_heads}, {}, testing::kBf16Tolerance,
                                  kLseTolerance, /*repeat=*/true, 1.0f, /*overwrite=*/true);
    CheckAttention<__half>({1, 100, 4, 128, kv_heads}, {}, testing::kFp16Tolerance, kLseTolerance);
  }
}

}  // namespace
}  // namespace mtrain::cuda
