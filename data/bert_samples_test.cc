#include "data/bert_samples.h"

#include <cstdlib>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "data/indexed_dataset.h"
#include "data/indexed_dataset_writer.h"
#include "gtest/gtest.h"

namespace mtrain {
namespace {

// Ids: 0 [PAD], 1 [CLS], 2 [SEP], 3 [MASK]; words are ids 10..99, continuing pieces
// 100..199 (id 100 + w continues a word). Sentence s of document d holds words whose ids
// encode (d, s), so a sample's original tokens tell where they came from.
constexpr int32_t kVocab = 200;

std::vector<bool> ContinuesWord() {
  std::vector<bool> continues(kVocab, false);
  for (int32_t id = 100; id < 200; ++id) continues[id] = true;
  return continues;
}

class BertSamplesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* tmp = std::getenv("TEST_TMPDIR");
    prefix_ = std::string(tmp != nullptr ? tmp : "/tmp") + "/bert_sentences";
    auto writer = IndexedDatasetWriter::Create(prefix_, IndexedDtype::kUint16);
    ASSERT_TRUE(writer.ok()) << writer.status();
    // 40 documents of 1 to 9 sentences of 3 to 14 tokens; document 0 has one sentence.
    for (int d = 0; d < 40; ++d) {
      const int sentences = d == 0 ? 1 : 1 + (d * 7) % 9;
      for (int s = 0; s < sentences; ++s) {
        std::vector<int32_t> tokens;
        const int length = 3 + (d + s * 5) % 12;
        for (int t = 0; t < length; ++t) {
          // Every third token continues the word before it.
          tokens.push_back(t % 3 == 2 ? 100 + (d + s) % 90 : 10 + (d * 10 + s) % 90);
        }
        sentence_of_.push_back({d, s});
        ASSERT_TRUE((*writer)->AddSequence(tokens).ok());
      }
      (*writer)->EndDocument();
    }
    ASSERT_TRUE((*writer)->Finish().ok());
    auto data = IndexedDataset::Open(prefix_);
    ASSERT_TRUE(data.ok()) << data.status();
    data_ = std::move(*data);
  }

  BertSamplesOptions Options() const {
    BertSamplesOptions o;
    o.seq_length = 32;
    o.seed = 7;
    o.documents = {0, data_->num_documents()};
    o.special = {1, 2, 3, 0};
    o.vocab_size = kVocab;
    o.continues_word = ContinuesWord();
    return o;
  }

  std::string prefix_;
  std::vector<std::pair<int, int>> sentence_of_;
  std::unique_ptr<IndexedDataset> data_;
};

TEST_F(BertSamplesTest, SamplesAreFramedTypedPaddedAndDrawnAgainForTheSameIndex) {
  auto samples = BertSamples::Create(data_.get(), Options());
  ASSERT_TRUE(samples.ok()) << samples.status();
  EXPECT_GT((*samples)->samples_per_epoch(), 20);
  auto again = BertSamples::Create(data_.get(), Options());
  ASSERT_TRUE(again.ok());
  for (int64_t i : {0, 1, 5, 77, 1000, 3}) {
    BertSample s, t;
    ASSERT_TRUE((*samples)->Fill(i, &s).ok());
    ASSERT_TRUE((*again)->Fill(i, &t).ok());
    EXPECT_EQ(s.tokens, t.tokens) << i;
    EXPECT_EQ(s.labels, t.labels) << i;
    EXPECT_EQ(s.swapped, t.swapped) << i;
    ASSERT_EQ(s.tokens.size(), 32u);
    EXPECT_EQ(s.tokens[0], 1);
    EXPECT_LE(s.length, 32);
    // Two [SEP]s: the second ends the sample; types 0 up to the first, 1 after it.
    std::vector<int> seps;
    for (int p = 0; p < s.length; ++p) {
      if (s.tokens[p] == 2 && s.labels[p] < 0) seps.push_back(p);
    }
    ASSERT_GE(seps.size(), 2u) << i;
    EXPECT_EQ(seps.back(), s.length - 1);
    for (int p = 0; p < 32; ++p) {
      const int want_type = p > seps.front() && p < s.length ? 1 : 0;
      EXPECT_EQ(s.token_types[p], want_type) << "sample " << i << " position " << p;
      if (p >= s.length) {
        EXPECT_EQ(s.tokens[p], 0);
        EXPECT_EQ(s.labels[p], -1);
      }
    }
  }
}

TEST_F(BertSamplesTest, SentenceOrderMasksAndWholeWordsFollowTheRules) {
  auto samples = BertSamples::Create(data_.get(), Options());
  ASSERT_TRUE(samples.ok()) << samples.status();
  int swapped = 0, total = 0, masked = 0, as_mask = 0, kept = 0, multiword = 0;
  for (int64_t i = 0; i < 3000; ++i) {
    BertSample s;
    ASSERT_TRUE((*samples)->Fill(i, &s).ok());
    ++total;
    swapped += s.swapped;
    // The original tokens (labels where masked) of A and B.
    std::vector<int32_t> original = s.tokens;
    int count = 0;
    for (int p = 0; p < s.length; ++p) {
      if (s.labels[p] < 0) continue;
      original[p] = s.labels[p];
      ++count;
      as_mask += s.tokens[p] == 3;
      kept += s.tokens[p] == s.labels[p];
    }
    masked += count;
    // The budget: round(0.15 x length), at least one, at most 0.15 x 32 = 4.
    const int budget = std::min(4, std::max(1, static_cast<int>(std::lround(s.length * 0.15))));
    EXPECT_LE(count, budget) << i;
    EXPECT_GE(count, 1) << i;
    // Whole words: a continuing piece is masked exactly when the token before it is.
    for (int p = 1; p < s.length; ++p) {
      if (original[p] >= 100 && original[p - 1] != 2 && original[p - 1] != 1) {
        EXPECT_EQ(s.labels[p] >= 0, s.labels[p - 1] >= 0) << "sample " << i << " position " << p;
      }
    }
    // Masked runs of more than one word happen (n-grams).
    for (int p = 1; p + 1 < s.length; ++p) {
      if (s.labels[p] >= 0 && s.labels[p + 1] >= 0 && original[p + 1] < 100) ++multiword;
    }
  }
  EXPECT_NEAR(static_cast<double>(swapped) / total, 0.5, 0.04);
  EXPECT_NEAR(static_cast<double>(as_mask) / masked, 0.8, 0.03);
  // Kept: the 10% kept plus random draws that hit the same id (1 in 200).
  EXPECT_NEAR(static_cast<double>(kept) / masked, 0.1, 0.03);
  EXPECT_GT(multiword, 0);
}

TEST_F(BertSamplesTest, SegmentsAreConsecutiveSentencesInTextOrderUnlessSwapped) {
  BertSamplesOptions o = Options();
  o.masked_lm_prob = 0.0;  // budget 1: nearly all tokens stay
  o.seq_length = 256;      // no truncation of these short documents
  o.short_seq_prob = 0.0;
  auto samples = BertSamples::Create(data_.get(), o);
  ASSERT_TRUE(samples.ok()) << samples.status();
  for (int64_t i = 0; i < 200; ++i) {
    BertSample s;
    ASSERT_TRUE((*samples)->Fill(i, &s).ok());
    std::vector<int32_t> original = s.tokens;
    for (int p = 0; p < s.length; ++p) {
      if (s.labels[p] >= 0) original[p] = s.labels[p];
    }
    // Word ids 10 + (10 d + s) % 90: the first word of A and of B say which sentence began
    // each segment; in text order A's comes first, so (mod 90) B's is larger.
    int first_sep = 1;
    while (original[first_sep] != 2) ++first_sep;
    const int a_word = original[1] - 10;
    const int b_word = original[first_sep + 1] - 10;
    const int forward = ((b_word - a_word) % 90 + 90) % 90;
    if (s.swapped) {
      EXPECT_GT(((a_word - b_word) % 90 + 90) % 90, 0) << i;
    } else {
      EXPECT_GT(forward, 0) << i;
      EXPECT_LT(forward, 10) << i;  // same document: sentences s < s' < s + 9
    }
  }
}

TEST_F(BertSamplesTest, RefusesOptionsNamingTheRule) {
  BertSamplesOptions o = Options();
  o.seq_length = 4;
  EXPECT_NE(BertSamples::Create(data_.get(), o).status().ToString().find("seq_length"),
            std::string::npos);
  o = Options();
  o.special.mask = kVocab;
  EXPECT_NE(BertSamples::Create(data_.get(), o).status().ToString().find("[MASK]"),
            std::string::npos);
  o = Options();
  o.continues_word.resize(3);
  EXPECT_NE(BertSamples::Create(data_.get(), o).status().ToString().find("continues_word"),
            std::string::npos);
  o = Options();
  o.documents = {0, 1};  // one document of one sentence
  const absl::Status s = BertSamples::Create(data_.get(), o).status();
  EXPECT_NE(s.ToString().find("two sentences"), std::string::npos) << s;
  o = Options();
  o.masked_lm_prob = 1.5;
  EXPECT_NE(BertSamples::Create(data_.get(), o).status().ToString().find("masked_lm_prob"),
            std::string::npos);
}

}  // namespace
}  // namespace mtrain
