// RACE's multiple-choice questions as BERT sequences (model.bert_head
// BERT_HEAD_MULTIPLE_CHOICE): the Megatron-LM paper fine-tunes BERT on RACE.
//
// The file (data.format DATA_FORMAT_RACE, and `trainctl eval --task race`) is JSON Lines, one
// passage a line, with RACE's own fields (a RACE release's per-passage JSON files joined one
// a line make one):
//   {"article": TEXT, "questions": [Q, ...], "options": [[O1, O2, O3, O4], ...],
//    "answers": ["A" | "B" | "C" | "D", ...], "id": ...}
// questions, options and answers of equal length, each question with exactly four options;
// other fields ("id") are ignored. Blank lines are skipped.
//
// Each (question, option) is one sequence, as Megatron's RACE task builds it:
//   qa = the question with its "_" blank replaced by the option when it has one (RACE's
//        cloze-style questions), else question + " " + option;
//   [CLS] qa [SEP] passage [SEP], token types 0 up to the first [SEP], 1 after; when it is
//   longer than seq_length the passage loses tokens from its end (then, if the passage is
//   gone, qa from its end) so that both [SEP]s stay; [PAD] after it.
// The four sequences of a question are consecutive: sample i is option i % 4 of question
// i / 4, and every option's sample carries the question's answer.
//
// RaceSamples orders the questions: training walks them in an order shuffled per epoch
// (seeded by the seed and the epoch alone, so every layout and a resumed job see the same
// questions at the same step); validation and evaluation walk them in file order.
//
//   ASSIGN_OR_RETURN(std::vector<RacePassage> passages, ParseRace(text, "race.jsonl"));
//   ASSIGN_OR_RETURN(auto samples, RaceSamples::Create(EncodeRace(passages, encode), options));
//   BertSample sample;
//   RETURN_IF_ERROR(samples->Fill(i, &sample));
#ifndef MTRAIN_DATA_RACE_DATASET_H_
#define MTRAIN_DATA_RACE_DATASET_H_

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "data/bert_samples.h"
#include "model/family_defaults.h"

namespace mtrain {

struct RaceQuestion {
  std::string question;
  std::array<std::string, kRaceChoices> options;
  int answer = 0;  // 0..3 ("A".."D")
};

struct RacePassage {
  std::string article;
  std::vector<RaceQuestion> questions;
};

// INVALID_ARGUMENT naming `source`, the line and the field for a line that is not such an
// object (a missing or mistyped field, lists of different lengths, a question without four
// options, an answer other than A-D), and for a file without a question.
absl::StatusOr<std::vector<RacePassage>> ParseRace(absl::string_view jsonl,
                                                   const std::string& source);

// RACE's "_" blank filled with the option, or the option after the question.
std::string QuestionWithOption(absl::string_view question, absl::string_view option);

// Token ids, without the special tokens.
struct EncodedRaceQuestion {
  int64_t passage = 0;  // index in the passages
  std::array<std::vector<int32_t>, kRaceChoices> question_with_option;
  int answer = 0;
};
struct EncodedRace {
  std::vector<std::vector<int32_t>> passages;
  std::vector<EncodedRaceQuestion> questions;  // passage by passage, in file order
};

using RaceEncoder = std::function<std::vector<int32_t>(absl::string_view text)>;
// Passages [begin, end) of `passages` (all when end < 0) encoded.
EncodedRace EncodeRace(const std::vector<RacePassage>& passages, const RaceEncoder& encode,
                       int64_t begin = 0, int64_t end = -1);

// One option's sequence (see the file comment) into `sample` (tokens, token_types and labels
// sized seq_length; labels all -1: no masked-LM loss).
void FillRaceSequence(const std::vector<int32_t>& question_with_option,
                      const std::vector<int32_t>& passage, int seq_length,
                      const BertSpecialIds& special, BertSample* sample);

struct RaceSamplesOptions {
  int seq_length = 0;
  BertSpecialIds special;
  int32_t vocab_size = 0;  // every id (special ones included) must be below it
  uint64_t seed = 0;
  bool shuffle = true;        // training: an order per epoch; false: file order
  std::string name = "race";  // for Describe
};

class RaceSamples : public BertSampleSource {
 public:
  // INVALID_ARGUMENT naming the option for seq_length < 8, a special id or a token outside
  // the vocabulary, and for no question at all ("data.split" leaves a split empty, say).
  static absl::StatusOr<std::unique_ptr<RaceSamples>> Create(EncodedRace race,
                                                             RaceSamplesOptions options);

  int64_t num_questions() const { return static_cast<int64_t>(race_.questions.size()); }
  // Sample `index` >= 0: option index % 4 of the (index / 4)-th question of the order.
  absl::Status Fill(int64_t index, BertSample* sample) override;
  std::string Describe() const override;

 private:
  RaceSamples(EncodedRace race, RaceSamplesOptions options)
      : race_(std::move(race)), options_(std::move(options)) {}

  const EncodedRace race_;
  const RaceSamplesOptions options_;
  int64_t epoch_ = -1;  // whose order order_ holds
  std::vector<int64_t> order_;
};

}  // namespace mtrain

#endif  // MTRAIN_DATA_RACE_DATASET_H_
