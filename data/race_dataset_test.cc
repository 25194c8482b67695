// RACE's format and its sequences (race_dataset.h): parsing with errors that name the line
// and the field, the question-option text, the [CLS] qa [SEP] passage [SEP] layout and its
// truncation, and the order of the samples (shuffled per epoch for training, deterministic).
#include "data/race_dataset.h"

#include <fstream>
#include <iterator>
#include <set>

#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace mtrain {
namespace {

using ::testing::HasSubstr;

constexpr char kPassage[] =
    R"({"article": "tom went home.", "questions": ["where did tom go?", "tom has a _ dog."],)"
    R"( "options": [["home", "away", "out", "in"], ["red", "old", "big", "fair"]],)"
    R"( "answers": ["A", "C"], "id": "x.txt"})";

TEST(RaceDatasetTest, ParsesRacesFieldsOnePassageALine) {
  absl::StatusOr<std::vector<RacePassage>> parsed =
      ParseRace(absl::StrCat(kPassage, "\n\n", kPassage, "\n"), "f.jsonl");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  ASSERT_EQ(parsed->size(), 2u);
  const RacePassage& p = (*parsed)[0];
  EXPECT_EQ(p.article, "tom went home.");
  ASSERT_EQ(p.questions.size(), 2u);
  EXPECT_EQ(p.questions[1].question, "tom has a _ dog.");
  EXPECT_EQ(p.questions[1].options[2], "big");
  EXPECT_EQ(p.questions[0].answer, 0);
  EXPECT_EQ(p.questions[1].answer, 2);
}

TEST(RaceDatasetTest, RefusesMalformedLinesNamingTheLineAndField) {
  const std::pair<std::string, std::string> cases[] = {
      {"not json", "f.jsonl:1: not a JSON object"},
      {R"({"questions": [], "options": [], "answers": []})", "\"article\" is missing"},
      {R"({"article": 3, "questions": [], "options": [], "answers": []})",
       "\"article\" is not a string"},
      {R"({"article": "a", "questions": ["q"], "options": [["a","b","c","d"]], "answers": []})",
       "differ in length"},
      {R"({"article": "a", "questions": ["q"], "options": [["a","b","c"]], "answers": ["A"]})",
       "\"options[0]\" holds 3 options"},
      {R"({"article": "a", "questions": ["q"], "options": [["a","b","c","d"]], "answers": ["E"]})",
       "\"answers[0]\" is \"E\" [rule: A to D]"},
      {R"({"article": "a", "questions": ["q"], "options": [["a","b","c",4]], "answers": ["A"]})",
       "\"options[0]\" holds a non-string"},
      {R"({"article": "a", "questions": [], "options": [], "answers": []})", "holds no question"},
  };
  for (const auto& [line, expected] : cases) {
    absl::StatusOr<std::vector<RacePassage>> parsed = ParseRace(line, "f.jsonl");
    ASSERT_FALSE(parsed.ok()) << line;
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(parsed.status().message(), HasSubstr(expected)) << line;
  }
  // The line number counts blank lines too.
  EXPECT_THAT(ParseRace(absl::StrCat(kPassage, "\n\nbad"), "f.jsonl").status().message(),
              HasSubstr("f.jsonl:3:"));
}

TEST(RaceDatasetTest, FillsTheBlankOrAppendsTheOption) {
  EXPECT_EQ(QuestionWithOption("tom has a _ dog.", "red"), "tom has a red dog.");
  EXPECT_EQ(QuestionWithOption("where did tom go?", "home"), "where did tom go? home");
}

constexpr BertSpecialIds kSpecial{/*cls=*/1, /*sep=*/2, /*mask=*/3, /*pad=*/0};

TEST(RaceDatasetTest, SequencesAreClsQaSepPassageSepAndThePassageGivesWayFirst) {
  BertSample sample;
  FillRaceSequence({10, 11}, {20, 21, 22}, 10, kSpecial, &sample);
  EXPECT_EQ(sample.tokens, (std::vector<int32_t>{1, 10, 11, 2, 20, 21, 22, 2, 0, 0}));
  EXPECT_EQ(sample.token_types, (std::vector<int32_t>{0, 0, 0, 0, 1, 1, 1, 1, 0, 0}));
  EXPECT_EQ(sample.length, 8);
  EXPECT_EQ(sample.labels, std::vector<int32_t>(10, -1));
  // Too long: the passage loses its end, both [SEP]s stay.
  FillRaceSequence({10, 11}, {20, 21, 22, 23, 24, 25, 26}, 8, kSpecial, &sample);
  EXPECT_EQ(sample.tokens, (std::vector<int32_t>{1, 10, 11, 2, 20, 21, 22, 2}));
  EXPECT_EQ(sample.length, 8);
  // A question longer than the room: the passage is gone and the question cut.
  FillRaceSequence({10, 11, 12, 13, 14, 15, 16}, {20}, 8, kSpecial, &sample);
  EXPECT_EQ(sample.tokens, (std::vector<int32_t>{1, 10, 11, 12, 13, 14, 2, 2}));
  EXPECT_EQ(sample.token_types, (std::vector<int32_t>{0, 0, 0, 0, 0, 0, 0, 1}));
}

// Characters as ids: enough for the order and layout checks.
std::vector<int32_t> Chars(absl::string_view text) {
  std::vector<int32_t> ids;
  for (char c : text) ids.push_back(static_cast<unsigned char>(c) % 100 + 4);
  return ids;
}

RaceSamplesOptions Options(bool shuffle) {
  RaceSamplesOptions options;
  options.seq_length = 64;
  options.special = kSpecial;
  options.vocab_size = 128;
  options.seed = 9;
  options.shuffle = shuffle;
  return options;
}

std::string ReadShipped(const std::string& name) {
  std::ifstream in("tests/data/" + name);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

TEST(RaceDatasetTest, TheShippedFilesParseWithThreeQuestionsAPassage) {
  for (const char* name : {"race_small.jsonl", "race_small_dev.jsonl"}) {
    absl::StatusOr<std::vector<RacePassage>> parsed = ParseRace(ReadShipped(name), name);
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_GE(parsed->size(), 40u) << name;
    std::set<int> answers;
    for (const RacePassage& p : *parsed) {
      EXPECT_EQ(p.questions.size(), 3u);
      for (const RaceQuestion& q : p.questions) answers.insert(q.answer);
    }
    EXPECT_EQ(answers.size(), 4u) << name << ": every letter is somewhere an answer";
  }
}

TEST(RaceDatasetTest, SamplesAreAQuestionsFourOptionsInAnOrderFixedBySeedAndEpoch) {
  absl::StatusOr<std::vector<RacePassage>> parsed =
      ParseRace(ReadShipped("race_small_dev.jsonl"), "dev");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  auto make = [&](bool shuffle) {
    absl::StatusOr<std::unique_ptr<RaceSamples>> samples =
        RaceSamples::Create(EncodeRace(*parsed, Chars), Options(shuffle));
    EXPECT_TRUE(samples.ok()) << samples.status();
    return *std::move(samples);
  };
  std::unique_ptr<RaceSamples> ordered = make(false);
  const int64_t n = ordered->num_questions();
  EXPECT_EQ(n, static_cast<int64_t>(parsed->size()) * 3);
  // File order: sample 4 q + j is option j of question q, every option with q's answer.
  BertSample sample;
  const RaceQuestion& second = (*parsed)[0].questions[1];
  for (int j = 0; j < kRaceChoices; ++j) {
    ASSERT_TRUE(ordered->Fill(kRaceChoices + j, &sample).ok());
    EXPECT_EQ(sample.answer, second.answer);
    const std::vector<int32_t> qa = Chars(QuestionWithOption(second.question, second.options[j]));
    EXPECT_TRUE(std::equal(qa.begin(), qa.end(), sample.tokens.begin() + 1)) << j;
  }
  // Shuffled: each epoch a permutation of the questions, the same for the same seed, another
  // for the next epoch; a fresh object (a resumed job) draws the same.
  std::unique_ptr<RaceSamples> shuffled = make(true);
  std::unique_ptr<RaceSamples> again = make(true);
  std::vector<std::vector<int32_t>> epoch0, epoch1;
  for (int64_t q = 0; q < 2 * n; ++q) {
    ASSERT_TRUE(shuffled->Fill(q * kRaceChoices + 1, &sample).ok());
    (q < n ? epoch0 : epoch1).push_back(sample.tokens);
  }
  for (int64_t q = 2 * n - 1; q >= 0; q -= 7) {  // out of order, across epochs
    ASSERT_TRUE(again->Fill(q * kRaceChoices + 1, &sample).ok());
    EXPECT_EQ(sample.tokens, q < n ? epoch0[q] : epoch1[q - n]) << q;
  }
  std::vector<std::vector<int32_t>> file_order;
  for (int64_t q = 0; q < n; ++q) {
    ASSERT_TRUE(ordered->Fill(q * kRaceChoices + 1, &sample).ok());
    file_order.push_back(sample.tokens);
  }
  EXPECT_NE(epoch0, file_order);
  EXPECT_NE(epoch0, epoch1);
  std::sort(epoch0.begin(), epoch0.end());
  std::sort(file_order.begin(), file_order.end());
  EXPECT_EQ(epoch0, file_order) << "an epoch holds every question once";
}

TEST(RaceDatasetTest, RefusesIdsOutsideTheVocabularyAndEmptySplits) {
  absl::StatusOr<std::vector<RacePassage>> parsed = ParseRace(kPassage, "p");
  ASSERT_TRUE(parsed.ok());
  RaceSamplesOptions options = Options(false);
  options.vocab_size = 50;  // Chars gives ids up to 103
  EXPECT_THAT(RaceSamples::Create(EncodeRace(*parsed, Chars), options).status().message(),
              HasSubstr("outside the vocabulary"));
  EXPECT_THAT(
      RaceSamples::Create(EncodeRace(*parsed, Chars, 0, 0), Options(false)).status().message(),
      HasSubstr("no question"));
  options = Options(false);
  options.seq_length = 7;
  EXPECT_THAT(RaceSamples::Create(EncodeRace(*parsed, Chars), options).status().message(),
              HasSubstr("seq_length must be >= 8"));
}

}  // namespace
}  // namespace mtrain
