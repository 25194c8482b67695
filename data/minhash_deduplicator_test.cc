#include "data/minhash_deduplicator.h"

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace mtrain {
namespace {

std::string RandomDocument(std::mt19937_64& rng, int words) {
  std::string text;
  for (int i = 0; i < words; ++i) absl::StrAppend(&text, "w", rng() % 20000, " ");
  return text;
}

// `text` with `edits` words replaced by new ones.
std::string Edited(const std::string& text, std::mt19937_64& rng, int edits) {
  std::vector<std::string> words;
  size_t start = 0;
  for (size_t i = 0; i <= text.size(); ++i) {
    if (i == text.size() || text[i] == ' ') {
      if (i > start) words.push_back(text.substr(start, i - start));
      start = i + 1;
    }
  }
  for (int e = 0; e < edits; ++e) words[rng() % words.size()] = absl::StrCat("x", rng() % 100000);
  std::string out;
  for (const std::string& w : words) absl::StrAppend(&out, w, " ");
  return out;
}

TEST(MinHashDeduplicatorTest, OptimalBandsAndRowsSeparateAroundTheThreshold) {
  const auto [bands, rows] = OptimalBandsAndRows(0.7, 128);
  EXPECT_LE(bands * rows, 128);
  auto candidate = [&](double j) { return 1 - std::pow(1 - std::pow(j, rows), bands); };
  EXPECT_LT(candidate(0.4), 0.05);
  EXPECT_GT(candidate(0.9), 0.99);
  EXPECT_NEAR(candidate(0.7), 0.5, 0.3);
}

TEST(MinHashDeduplicatorTest, SignaturesAreDeterministicAndIdenticalTextsCollide) {
  MinHashOptions options;
  MinHashDeduplicator a(options), b(options);
  const std::string text = "the same words in the same order make the same signature here";
  EXPECT_EQ(a.Signature(text), b.Signature(text));
  EXPECT_FALSE(a.IsNearDuplicateAndRemember(a.Signature(text)));
  EXPECT_TRUE(a.IsNearDuplicateAndRemember(a.Signature(text)));
}

// Planted near-duplicates (Jaccard >= 0.8 of 5-word shingles) among distinct documents:
// the issue asks recall >= 0.95 of the planted ones and >= 0.99 of the distinct kept.
TEST(MinHashDeduplicatorTest, FindsPlantedNearDuplicatesAndKeepsDistinctDocuments) {
  std::mt19937_64 rng(7);
  MinHashOptions options;
  std::tie(options.bands, options.rows) = OptimalBandsAndRows(0.7, 128);
  MinHashDeduplicator dedup(options);
  std::vector<std::string> originals;
  for (int i = 0; i < 600; ++i) originals.push_back(RandomDocument(rng, 300));
  int distinct_kept = 0, planted = 0, planted_found = 0;
  for (const std::string& doc : originals) {
    distinct_kept += dedup.IsNearDuplicateAndRemember(dedup.Signature(doc)) ? 0 : 1;
  }
  for (int i = 0; i < 300; ++i) {
    const std::string& original = originals[static_cast<size_t>(i)];
    const std::string copy = Edited(original, rng, 1 + static_cast<int>(rng() % 4));
    if (ShingleJaccard(original, copy, ShingleKind::kWords, 5) < 0.8) continue;
    ++planted;
    planted_found += dedup.IsNearDuplicateAndRemember(dedup.Signature(copy)) ? 1 : 0;
  }
  ASSERT_GT(planted, 200);
  EXPECT_GE(planted_found, 0.95 * planted) << planted_found << " of " << planted;
  EXPECT_GE(distinct_kept, 0.99 * originals.size());
}

TEST(MinHashDeduplicatorTest, CharacterShinglesAndShortTexts) {
  EXPECT_DOUBLE_EQ(ShingleJaccard("abcdef", "abcdef", ShingleKind::kCharacters, 3), 1.0);
  EXPECT_DOUBLE_EQ(ShingleJaccard("abcd", "wxyz", ShingleKind::kCharacters, 3), 0.0);
  MinHashOptions options;
  options.shingles = ShingleKind::kCharacters;
  MinHashDeduplicator dedup(options);
  EXPECT_FALSE(dedup.IsNearDuplicateAndRemember(dedup.Signature("ab")));  // shorter than n
  EXPECT_TRUE(dedup.IsNearDuplicateAndRemember(dedup.Signature("ab")));
}

}  // namespace
}  // namespace mtrain
