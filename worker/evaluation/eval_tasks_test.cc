#include "worker/evaluation/eval_tasks.h"

#include <cmath>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace mtrain {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// One id per byte.
std::vector<int32_t> Bytes(absl::string_view text) {
  return std::vector<int32_t>(text.begin(), text.end());
}

// Outputs whose loss at position i of sequence s is `loss(s, i)`; every target an argmax
// except where `wrong(s, i)`.
template <typename Loss, typename Wrong>
std::vector<TokenOutputs> Outputs(const std::vector<EvalSequence>& sequences, Loss loss,
                                  Wrong wrong) {
  std::vector<TokenOutputs> outputs(sequences.size());
  for (size_t s = 0; s < sequences.size(); ++s) {
    const size_t n = sequences[s].tokens.size() - 1;
    for (size_t i = 0; i < n; ++i) {
      outputs[s].loss.push_back(loss(s, i));
      outputs[s].argmax.push_back(wrong(s, i) ? 0 : 1);
    }
  }
  return outputs;
}

TEST(EvalTasksTest, OverlappingWindowsScoreEveryTargetOnceAsMegatronDoes) {
  // 21 tokens, seq_length 8, overlap 4: targets 0..19; windows start at 0, 4, 8, 12 (the
  // count is ceil((20 - 4) / 4) + 1 = 5: the fifth starts at 16 and scores nothing new
  // beyond the end, as Megatron's does).
  const std::string text = "abcdefghijklmnopqrstu";
  absl::StatusOr<std::vector<EvalSequence>> windows = PerplexitySequences(text, Bytes, 8, 4);
  ASSERT_TRUE(windows.ok()) << windows.status();
  ASSERT_EQ(windows->size(), 5u);
  std::vector<int> scored_times(20, 0);
  for (const EvalSequence& w : *windows) {
    const int begin = static_cast<int>(w.example) * 4;
    EXPECT_EQ(w.tokens.front(), text[begin]);
    for (size_t i = 0; i < w.scored.size(); ++i) scored_times[begin + i] += w.scored[i];
  }
  for (int t = 0; t < 20; ++t) EXPECT_EQ(scored_times[t], 1) << "target " << t;
  // No overlap (overlap = seq_length): plain consecutive windows.
  windows = PerplexitySequences(text, Bytes, 8, 8);
  ASSERT_TRUE(windows.ok());
  EXPECT_EQ(windows->size(), 3u);
  EXPECT_EQ(PerplexitySequences(text, Bytes, 8, 9).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(EvalTasksTest, PerplexityIsTheExpOfTheMeanScoredLossAndAdjustsByWords) {
  absl::StatusOr<std::vector<EvalSequence>> windows =
      PerplexitySequences("one two three four five six", Bytes, 8, 4);
  ASSERT_TRUE(windows.ok());
  // Loss 2 where scored; a large one where not, which must not count.
  const std::vector<TokenOutputs> outputs = Outputs(
      *windows, [&](size_t s, size_t i) { return (*windows)[s].scored[i] ? 2.0f : 100.0f; },
      [](size_t, size_t) { return false; });
  const EvalResult result = PerplexityResult(*windows, outputs, 6);
  EXPECT_EQ(result.scored_tokens, 26);  // 27 bytes
  EXPECT_DOUBLE_EQ(result.loss, 2.0);
  EXPECT_DOUBLE_EQ(result.perplexity, std::exp(2.0));
  EXPECT_DOUBLE_EQ(result.adjusted_perplexity, std::exp(2.0 * 26 / 5));
  EXPECT_THAT(result.ToJson(), HasSubstr("\"task\":\"perplexity\""));
  EXPECT_EQ(CountWords("  a b  c \n"), 4);  // Python's len(s.strip().split(" "))
}

TEST(EvalTasksTest, ClozeScoresTheLastWordAndIsStrict) {
  const std::string jsonl = R"({"text": "the cat sat"}
{"text": "a dog ran home"}
)";
  absl::StatusOr<std::vector<EvalSequence>> sequences = ClozeSequences(jsonl, "c.jsonl", Bytes, 64);
  ASSERT_TRUE(sequences.ok()) << sequences.status();
  ASSERT_EQ(sequences->size(), 2u);
  const EvalSequence& first = (*sequences)[0];
  // Context "the cat", target " sat": the 4 target bytes are scored, nothing else.
  EXPECT_EQ(std::string(first.tokens.begin(), first.tokens.end()), "the cat sat");
  int scored = 0;
  for (uint8_t s : first.scored) scored += s;
  EXPECT_EQ(scored, 4);
  EXPECT_THAT(first.scored, ElementsAre(0, 0, 0, 0, 0, 0, 1, 1, 1, 1));
  // Example 0 right; example 1 wrong at one target token only: strict accuracy 1/2.
  const std::vector<TokenOutputs> outputs = Outputs(
      *sequences, [](size_t, size_t) { return 1.0f; },
      [&](size_t s, size_t i) { return s == 1 && i + 1 == (*sequences)[1].scored.size(); });
  const EvalResult result = ClozeResult(*sequences, outputs);
  EXPECT_DOUBLE_EQ(result.accuracy, 0.5);
  EXPECT_EQ(result.scored_tokens, 4 + 5);
  // A long context keeps its end.
  sequences = ClozeSequences(R"({"text": "aaaaaaaaaaaaaaaaaaaa end"})", "c.jsonl", Bytes, 8);
  ASSERT_TRUE(sequences.ok());
  EXPECT_EQ((*sequences)[0].tokens.size(), 9u);
  EXPECT_EQ(std::string((*sequences)[0].tokens.end() - 4, (*sequences)[0].tokens.end()), " end");
}

TEST(EvalTasksTest, ChoicePicksTheLowestSummedAndMeanLoss) {
  const std::string jsonl =
      R"({"ctx": "A man", "endings": ["runs", "is eating lunch"], "label": 1})";
  std::vector<int> labels;
  absl::StatusOr<std::vector<EvalSequence>> sequences =
      ChoiceSequences(jsonl, "h.jsonl", Bytes, 64, &labels);
  ASSERT_TRUE(sequences.ok()) << sequences.status();
  ASSERT_EQ(sequences->size(), 2u);
  EXPECT_THAT(labels, ElementsAre(1));
  // Ending 0 (" runs", 5 tokens): loss 1 each, sum 5, mean 1. Ending 1 (" is eating
  // lunch", 16 tokens): loss 0.5 each, sum 8, mean 0.5. Sum picks 0, mean picks 1.
  const std::vector<TokenOutputs> outputs = Outputs(
      *sequences, [](size_t s, size_t) { return s == 0 ? 1.0f : 0.5f; },
      [](size_t, size_t) { return false; });
  const EvalResult result = ChoiceResult(*sequences, outputs, labels);
  EXPECT_DOUBLE_EQ(result.accuracy, 0.0);
  EXPECT_DOUBLE_EQ(result.accuracy_norm, 1.0);
  EXPECT_EQ(result.scored_tokens, 5 + 16);
}

TEST(EvalTasksTest, MalformedLinesAreNamed) {
  std::vector<int> labels;
  EXPECT_THAT(
      ClozeSequences("{\"text\": \"a b\"}\nnot json\n", "c.jsonl", Bytes, 8).status().message(),
      HasSubstr("c.jsonl:2: not a JSON object"));
  EXPECT_THAT(ClozeSequences(R"({"text": "single"})", "c.jsonl", Bytes, 8).status().message(),
              HasSubstr("c.jsonl:1: the text needs a context and a last word"));
  EXPECT_THAT(ChoiceSequences(R"({"ctx": "x", "endings": ["a", "b"], "label": 2})", "h.jsonl",
                              Bytes, 8, &labels)
                  .status()
                  .message(),
              HasSubstr("h.jsonl:1: needs \"label\", the index of the right ending in [0, 2)"));
  EXPECT_THAT(ClozeSequences("\n\n", "c.jsonl", Bytes, 8).status().message(),
              HasSubstr("c.jsonl: holds no examples"));
}

TEST(EvalTasksTest, WikiTextDetokenizerUndoesTheDatasetsSpacing) {
  EXPECT_EQ(WikiTextDetokenize("a @-@ b , c @,@ d ( e ) \" f \" = = Title = = the dog 's"),
            "a-b, c,d (e) \"f\" == Title == the dog's");
  // The bracket and quote rules as Python's re.sub gives them (unclosed pairs, nesting).
  EXPECT_EQ(WikiTextDetokenize("a ( b ) c ( d"), "a (b) c ( d");
  EXPECT_EQ(WikiTextDetokenize("\" x \" y \" z"), "\"x\" y \" z");
  EXPECT_EQ(WikiTextDetokenize("[ a ( b ] c )"), "[a (b] c)");
}

}  // namespace
}  // namespace mtrain
