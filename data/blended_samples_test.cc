// BlendedSamples against Megatron-Core: the normalised weights, the dataset every sample
// goes to and the per-dataset sizes equal what the installed Megatron computes, bit for bit;
// large indices agree with a plain sequential replay; Fill routes each sample to the right
// source and sample of it.
#include "data/blended_samples.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace mtrain {
namespace {

using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

constexpr int kSeqLength = 4;

// Writes who it is and which of its samples was asked for: [id, index low 31 bits, index
// high bits, seq_length, ...].
class FakeSource final : public SampleSource {
 public:
  FakeSource(int id, int seq_length) : id_(id), seq_length_(seq_length) {}
  int seq_length() const override { return seq_length_; }
  absl::Status Fill(int64_t index, absl::Span<int32_t> tokens) override {
    if (static_cast<int>(tokens.size()) != seq_length_ + 1) {
      return absl::InvalidArgumentError("size");
    }
    if (id_ < 0) return absl::DataLossError("fake read error");
    for (int32_t& token : tokens) token = seq_length_;
    tokens[0] = id_;
    tokens[1] = static_cast<int32_t>(index & 0x7fffffff);
    tokens[2] = static_cast<int32_t>(index >> 31);
    return absl::OkStatus();
  }
  std::string Describe() const override { return absl::StrCat("fake ", id_); }

 private:
  int id_;
  int seq_length_;
};

std::unique_ptr<BlendedSamples> MustBlend(const std::vector<double>& weights) {
  std::vector<std::unique_ptr<SampleSource>> sources;
  std::vector<std::string> names;
  for (size_t d = 0; d < weights.size(); ++d) {
    sources.push_back(std::make_unique<FakeSource>(static_cast<int>(d), kSeqLength));
    names.push_back(absl::StrCat("set", d));
  }
  auto blend = BlendedSamples::Create(std::move(sources), weights, std::move(names));
  EXPECT_TRUE(blend.ok()) << blend.status();
  return blend.ok() ? std::move(*blend) : nullptr;
}

// What the installed Megatron-Core computes for one weight vector. The numbers were
// produced by running it (megatron.core.datasets.helpers_cpp.build_blending_indices on
// normalize(normalize(weights)), 100000 samples) when this test was written:
//   first40      dataset_index[:40], one digit each
//   counts_777   per-dataset counts among the first 777 samples
//   counts_100k  ... among the first 100000
//   fingerprint  h = h * 1000003 + dataset_index[i] + 1 (mod 2^64) over the first 100000
struct MegatronBlend {
  std::vector<double> weights;
  std::vector<double> normalized;  // normalize(normalize(weights)), as hex floats
  std::string first40;
  std::vector<int64_t> counts_777;
  std::vector<int64_t> counts_100k;
  uint64_t fingerprint;
};

std::vector<MegatronBlend> MegatronBlends() {
  return {
      {{0.3, 0.7},
       {0x1.3333333333333p-2, 0x1.6666666666666p-1},
       "1011011011011101101101110110110111011011",
       {233, 544},
       {30000, 70000},
       1047128586813792002ULL},
      {{0.5, 0.25, 0.25},
       {0x1.0000000000000p-1, 0x1.0000000000000p-2, 0x1.0000000000000p-2},
       "0120012001200120012001200120012001200120",
       {389, 194, 194},
       {50000, 25000, 25000},
       4619973108350442840ULL},
      {{1.0 / 3, 1.0 / 3, 1.0 / 3},
       {0x1.5555555555555p-2, 0x1.5555555555555p-2, 0x1.5555555555555p-2},
       "0120120120120120120120120120120120120120",
       {259, 259, 259},
       {33334, 33333, 33333},
       9358733744588966439ULL},
      {{0.01, 0.99},
       {0x1.47ae147ae147bp-7, 0x1.fae147ae147aep-1},
       "1011111111111111111111111111111111111111",
       {8, 769},
       {1000, 99000},
       2358209337576567418ULL},
      {{2.0, 3.0, 5.0, 7.0, 11.0},
       {0x1.2492492492492p-4, 0x1.b6db6db6db6dbp-4, 0x1.6db6db6db6db7p-3, 0x1.0000000000000p-2,
        0x1.9249249249249p-2},
       "4321403424341234430421434234043241342434",
       {56, 83, 139, 194, 305},
       {7143, 10714, 17857, 25000, 39286},
       10262874779887727232ULL},
      {{0.1, 0.2, 0.3, 0.4},
       {0x1.999999999999ap-4, 0x1.999999999999ap-3, 0x1.3333333333333p-2, 0x1.999999999999ap-2},
       "3210323123032132312303213231230321323123",
       {78, 155, 233, 311},
       {10000, 20000, 30000, 40000},
       4198669135190814404ULL},
      // Here the second normalisation moves the last bits of every weight.
      {{7.42, 7.954, 9.425, 7.402, 9.224, 0.3},
       {0x1.6c32adb187319p-3, 0x1.86688f462bb23p-3, 0x1.ce9c256d0e925p-3, 0x1.6b5080b2453e8p-3,
        0x1.c4be844aae229p-3, 0x1.d73313c96514ap-8},
       "2410324103241032410324124035124032410324",
       {138, 148, 175, 138, 172, 6},
       {17783, 19063, 22588, 17740, 22107, 719},
       2616548376683772016ULL},
      // Ten datasets: numpy's eight-accumulator sum.
      {{1, 1, 1, 1, 1, 1, 1, 1, 1, 1.5},
       {0x1.8618618618618p-4, 0x1.8618618618618p-4, 0x1.8618618618618p-4, 0x1.8618618618618p-4,
        0x1.8618618618618p-4, 0x1.8618618618618p-4, 0x1.8618618618618p-4, 0x1.8618618618618p-4,
        0x1.8618618618618p-4, 0x1.2492492492492p-3},
       "9012345678901234567890912345678901234567",
       {74, 74, 74, 74, 74, 74, 74, 74, 74, 111},
       {9524, 9524, 9524, 9524, 9524, 9524, 9524, 9524, 9523, 14285},
       17945967409237491901ULL},
  };
}

TEST(BlendedSamplesTest, AssignmentsEqualMegatrons) {
  for (const MegatronBlend& expected : MegatronBlends()) {
    SCOPED_TRACE(::testing::PrintToString(expected.weights));
    auto blend = MustBlend(expected.weights);
    ASSERT_NE(blend, nullptr);
    EXPECT_THAT(blend->normalized_weights(), ElementsAreArray(expected.normalized));
    std::string first40;
    uint64_t fingerprint = 0;
    std::vector<int64_t> counts(expected.weights.size(), 0);
    for (int64_t i = 0; i < 100000; ++i) {
      const BlendedSamples::Assignment assignment = blend->Assign(i);
      if (i < 40) first40 += static_cast<char>('0' + assignment.dataset);
      fingerprint = fingerprint * 1000003ULL + static_cast<uint64_t>(assignment.dataset) + 1;
      // The sample within the dataset is how many that dataset had before.
      ASSERT_EQ(assignment.index, counts[assignment.dataset]) << i;
      ++counts[assignment.dataset];
    }
    EXPECT_EQ(first40, expected.first40);
    EXPECT_EQ(fingerprint, expected.fingerprint);
    EXPECT_EQ(counts, expected.counts_100k);
    EXPECT_EQ(blend->CountsBefore(777), expected.counts_777);
    EXPECT_EQ(blend->CountsBefore(100000), expected.counts_100k);
  }
}

TEST(BlendedSamplesTest, NormalizeSumsInNumpysOrder) {
  // Sums numpy computes pairwise and a left-to-right loop would not (hex floats from numpy).
  std::vector<double> thirteen;
  for (int i = 0; i < 13; ++i) thirteen.push_back(0.1 * (i + 1));
  std::vector<double> two_hundred;
  for (int i = 0; i < 200; ++i) two_hundred.push_back(1 + (i * 37 % 101) / 7.0);
  for (const auto& [weights, numpy_sum] : {std::make_pair(thirteen, 0x1.2333333333333p+3),
                                           std::make_pair(two_hundred, 0x1.9776db6db6db8p+10)}) {
    const std::vector<double> normalized = MegatronNormalize(weights);
    ASSERT_EQ(normalized.size(), weights.size());
    for (size_t i = 0; i < weights.size(); ++i) {
      ASSERT_EQ(normalized[i], weights[i] / numpy_sum) << i;
    }
  }
  // One pass of Megatron's normalize (numpy's bits), before the second moves them.
  EXPECT_THAT(MegatronNormalize({7.42, 7.954, 9.425, 7.402, 9.224, 0.3}),
              ElementsAre(0x1.6c32adb18731ap-3, 0x1.86688f462bb25p-3, 0x1.ce9c256d0e927p-3,
                          0x1.6b5080b2453e9p-3, 0x1.c4be844aae22bp-3, 0x1.d73313c96514cp-8));
}

// build_blending_indices, written out plainly: the assignment of samples [0, n).
std::vector<BlendedSamples::Assignment> SequentialReplay(const std::vector<double>& weights,
                                                         int64_t n) {
  std::vector<int64_t> counts(weights.size(), 0);
  std::vector<BlendedSamples::Assignment> out;
  out.reserve(n);
  for (int64_t i = 0; i < n; ++i) {
    const double position = std::max(static_cast<double>(i), 1.0);
    size_t best = 0;
    for (size_t d = 1; d < weights.size(); ++d) {
      if (weights[d] * position - static_cast<double>(counts[d]) >
          weights[best] * position - static_cast<double>(counts[best])) {
        best = d;
      }
    }
    out.push_back({static_cast<int>(best), counts[best]++});
  }
  return out;
}

TEST(BlendedSamplesTest, LargeIndicesAgreeWithASequentialReplay) {
  for (const std::vector<double>& weights :
       {std::vector<double>{0.3, 0.7},
        std::vector<double>{7.42, 7.954, 9.425, 7.402, 9.224, 0.3}}) {
    auto blend = MustBlend(weights);
    ASSERT_NE(blend, nullptr);
    const int64_t base = 1000000;
    const int64_t span = 2 * BlendedSamples::kCheckpointInterval + 5;  // crosses blocks
    const auto replay = SequentialReplay(blend->normalized_weights(), base + span);
    // Far first, so the table grows in one go; then back and forth between blocks.
    for (int64_t k : {span - 1, int64_t{0}, int64_t{4095}, int64_t{4096}, int64_t{17}}) {
      const auto got = blend->Assign(base + k);
      EXPECT_EQ(got.dataset, replay[base + k].dataset) << k;
      EXPECT_EQ(got.index, replay[base + k].index) << k;
    }
    EXPECT_EQ(blend->Assign(5).index, replay[5].index);
    for (int64_t k = 0; k < span; ++k) {
      const auto got = blend->Assign(base + k);
      ASSERT_EQ(got.dataset, replay[base + k].dataset) << k;
      ASSERT_EQ(got.index, replay[base + k].index) << k;
    }
    std::vector<int64_t> counts(weights.size(), 0);
    for (int64_t i = 0; i < base + 123; ++i) ++counts[replay[i].dataset];
    EXPECT_EQ(blend->CountsBefore(base + 123), counts);
    EXPECT_EQ(blend->CountsBefore(0), std::vector<int64_t>(weights.size(), 0));
  }
}

TEST(BlendedSamplesTest, FillRoutesToTheAssignedSample) {
  auto blend = MustBlend({0.2, 0.5, 0.3});
  ASSERT_NE(blend, nullptr);
  EXPECT_EQ(blend->seq_length(), kSeqLength);
  std::vector<int32_t> sample(kSeqLength + 1);
  for (int64_t i : {int64_t{0}, int64_t{1}, int64_t{2}, int64_t{9999}, int64_t{30000007}}) {
    ASSERT_TRUE(blend->Fill(i, absl::MakeSpan(sample)).ok());
    const BlendedSamples::Assignment assignment = blend->Assign(i);
    EXPECT_EQ(sample[0], assignment.dataset) << i;
    EXPECT_EQ(sample[1] + (int64_t{sample[2]} << 31), assignment.index) << i;
  }
  EXPECT_EQ(blend->Fill(-1, absl::MakeSpan(sample)).code(), absl::StatusCode::kInvalidArgument);
  std::vector<int32_t> wrong(kSeqLength);
  EXPECT_EQ(blend->Fill(0, absl::MakeSpan(wrong)).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(blend->Describe(),
            "blend of 3 datasets: weight 0.2 \"set0\": fake 0; weight 0.5 \"set1\": fake 1; "
            "weight 0.3 \"set2\": fake 2");
}

TEST(BlendedSamplesTest, SourceErrorsPassThrough) {
  std::vector<std::unique_ptr<SampleSource>> sources;
  sources.push_back(std::make_unique<FakeSource>(-1, kSeqLength));
  auto blend = BlendedSamples::Create(std::move(sources), {1.0}, {"broken"});
  ASSERT_TRUE(blend.ok()) << blend.status();
  std::vector<int32_t> sample(kSeqLength + 1);
  EXPECT_EQ((*blend)->Fill(3, absl::MakeSpan(sample)).code(), absl::StatusCode::kDataLoss);
}

TEST(BlendedSamplesTest, SizesPerDatasetEqualMegatrons) {
  // Python: int(math.ceil(math.ceil(target * w) * (1 + 0.005))) for the normalised weights.
  for (const auto& [weights, target, sizes] :
       std::vector<std::tuple<std::vector<double>, int64_t, std::vector<int64_t>>>{
           {{0x1.3333333333333p-2, 0x1.6666666666666p-1}, 1000, {302, 704}},
           {{0x1.3333333333333p-2, 0x1.6666666666666p-1}, 123457, {37224, 86853}},
           {{0x1.0000000000000p-1, 0x1.0000000000000p-2, 0x1.0000000000000p-2},
            123457,
            {62038, 31020, 31020}},
           {{0x1.5555555555555p-2, 0x1.5555555555555p-2, 0x1.5555555555555p-2},
            1000,
            {336, 336, 336}},
           {{0x1.47ae147ae147bp-7, 0x1.fae147ae147aep-1}, 1000, {11, 995}},
           {{0x1.47ae147ae147bp-7, 0x1.fae147ae147aep-1}, 123457, {1242, 122835}},
           {{0x1.2492492492492p-4, 0x1.b6db6db6db6dbp-4, 0x1.6db6db6db6db7p-3, 0x1.0000000000000p-2,
             0x1.9249249249249p-2},
            123457,
            {8864, 13295, 22157, 31020, 48744}},
       }) {
    EXPECT_EQ(MegatronSizesPerDataset(weights, target), sizes) << target;
  }
}

TEST(BlendedSamplesTest, BadBlendsAreRejected) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  for (double bad : {0.0, -0.5, nan, inf}) {
    std::vector<std::unique_ptr<SampleSource>> sources;
    sources.push_back(std::make_unique<FakeSource>(0, kSeqLength));
    sources.push_back(std::make_unique<FakeSource>(1, kSeqLength));
    auto blend = BlendedSamples::Create(std::move(sources), {1.0, bad}, {"web", "code"});
    ASSERT_EQ(blend.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(blend.status().message(),
                HasSubstr(absl::StrCat("data.paths: entry 1 (\"code\") has weight ", bad,
                                       " [rule: every weight is a finite number > 0]")));
  }
  {
    std::vector<std::unique_ptr<SampleSource>> sources;
    sources.push_back(std::make_unique<FakeSource>(0, kSeqLength));
    sources.push_back(std::make_unique<FakeSource>(1, kSeqLength + 1));
    auto blend = BlendedSamples::Create(std::move(sources), {1.0, 1.0}, {"web", "code"});
    EXPECT_EQ(blend.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(blend.status().message(), HasSubstr("seq_length"));
  }
  {
    std::vector<std::unique_ptr<SampleSource>> sources;
    sources.push_back(std::make_unique<FakeSource>(0, kSeqLength));
    EXPECT_EQ(BlendedSamples::Create(std::move(sources), {1.0, 2.0}, {"web"}).status().code(),
              absl::StatusCode::kInvalidArgument);
  }
  EXPECT_EQ(BlendedSamples::Create({}, {}, {}).status().code(), absl::StatusCode::kInvalidArgument);
  {
    // Each weight finite, their sum not.
    std::vector<std::unique_ptr<SampleSource>> sources;
    sources.push_back(std::make_unique<FakeSource>(0, kSeqLength));
    sources.push_back(std::make_unique<FakeSource>(1, kSeqLength));
    EXPECT_EQ(
        BlendedSamples::Create(std::move(sources), {1e308, 1e308}, {"a", "b"}).status().code(),
        absl::StatusCode::kInvalidArgument);
  }
}

}  // namespace
}  // namespace mtrain
