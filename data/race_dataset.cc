#include "data/race_dataset.h"

#include <algorithm>
#include <numeric>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "data/split_mix_stream.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"

namespace mtrain {
namespace {

constexpr uint64_t kRaceEpochSalt = 0x7261636565700000ULL;  // "raceep"

using google::protobuf::Value;

absl::Status LineError(const std::string& source, int64_t line, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(source, ":", line, ": ", what));
}

// The strings of a JSON list, or an error naming `field`.
absl::StatusOr<std::vector<std::string>> StringList(const Value& value, absl::string_view field,
                                                    const std::string& source, int64_t line) {
  if (value.kind_case() != Value::kListValue) {
    return LineError(source, line, absl::StrCat("\"", field, "\" is not a list of strings"));
  }
  std::vector<std::string> out;
  for (const Value& item : value.list_value().values()) {
    if (item.kind_case() != Value::kStringValue) {
      return LineError(source, line, absl::StrCat("\"", field, "\" holds a non-string"));
    }
    out.push_back(item.string_value());
  }
  return out;
}

absl::StatusOr<RacePassage> ParsePassage(absl::string_view text, const std::string& source,
                                         int64_t line) {
  google::protobuf::Struct object;
  google::protobuf::util::JsonParseOptions parse;
  if (!google::protobuf::util::JsonStringToMessage(std::string(text), &object, parse).ok()) {
    return LineError(source, line, "not a JSON object");
  }
  const auto& fields = object.fields();
  const auto find = [&](const char* name) -> const Value* {
    const auto it = fields.find(name);
    return it == fields.end() ? nullptr : &it->second;
  };
  for (const char* name : {"article", "questions", "options", "answers"}) {
    if (find(name) == nullptr) {
      return LineError(source, line, absl::StrCat("\"", name, "\" is missing"));
    }
  }
  if (find("article")->kind_case() != Value::kStringValue) {
    return LineError(source, line, "\"article\" is not a string");
  }
  RacePassage passage;
  passage.article = find("article")->string_value();
  absl::StatusOr<std::vector<std::string>> questions =
      StringList(*find("questions"), "questions", source, line);
  if (!questions.ok()) return questions.status();
  absl::StatusOr<std::vector<std::string>> answers =
      StringList(*find("answers"), "answers", source, line);
  if (!answers.ok()) return answers.status();
  const Value& options = *find("options");
  if (options.kind_case() != Value::kListValue) {
    return LineError(source, line, "\"options\" is not a list of option lists");
  }
  const size_t n = questions->size();
  if (answers->size() != n || static_cast<size_t>(options.list_value().values_size()) != n) {
    return LineError(
        source, line,
        absl::StrCat("\"questions\" (", n, "), \"options\" (", options.list_value().values_size(),
                     ") and \"answers\" (", answers->size(), ") differ in length"));
  }
  for (size_t q = 0; q < n; ++q) {
    RaceQuestion question;
    question.question = (*questions)[q];
    absl::StatusOr<std::vector<std::string>> choices =
        StringList(options.list_value().values(static_cast<int>(q)),
                   absl::StrCat("options[", q, "]"), source, line);
    if (!choices.ok()) return choices.status();
    if (choices->size() != kRaceChoices) {
      return LineError(source, line,
                       absl::StrCat("\"options[", q, "]\" holds ", choices->size(),
                                    " options [rule: ", kRaceChoices, " per question]"));
    }
    std::copy(choices->begin(), choices->end(), question.options.begin());
    const std::string& answer = (*answers)[q];
    if (answer.size() != 1 || answer[0] < 'A' || answer[0] >= 'A' + kRaceChoices) {
      return LineError(
          source, line,
          absl::StrCat("\"answers[", q, "]\" is \"", answer, "\" [rule: A to ",
                       std::string(1, static_cast<char>('A' + kRaceChoices - 1)), "]"));
    }
    question.answer = answer[0] - 'A';
    passage.questions.push_back(std::move(question));
  }
  return passage;
}

}  // namespace

absl::StatusOr<std::vector<RacePassage>> ParseRace(absl::string_view jsonl,
                                                   const std::string& source) {
  std::vector<RacePassage> passages;
  int64_t line_number = 0, questions = 0;
  for (absl::string_view line : absl::StrSplit(jsonl, '\n')) {
    ++line_number;
    if (absl::StripAsciiWhitespace(line).empty()) continue;
    absl::StatusOr<RacePassage> passage = ParsePassage(line, source, line_number);
    if (!passage.ok()) return passage.status();
    questions += static_cast<int64_t>(passage->questions.size());
    passages.push_back(*std::move(passage));
  }
  if (questions == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(source,
                     ": holds no question [rule: RACE's JSON Lines, one passage with "
                     "its questions a line]"));
  }
  return passages;
}

std::string QuestionWithOption(absl::string_view question, absl::string_view option) {
  if (const size_t blank = question.find('_'); blank != absl::string_view::npos) {
    return absl::StrCat(question.substr(0, blank), option, question.substr(blank + 1));
  }
  return absl::StrCat(question, " ", option);
}

EncodedRace EncodeRace(const std::vector<RacePassage>& passages, const RaceEncoder& encode,
                       int64_t begin, int64_t end) {
  if (end < 0) end = static_cast<int64_t>(passages.size());
  EncodedRace out;
  for (int64_t p = begin; p < end; ++p) {
    const RacePassage& passage = passages[p];
    const int64_t index = static_cast<int64_t>(out.passages.size());
    out.passages.push_back(encode(passage.article));
    for (const RaceQuestion& question : passage.questions) {
      EncodedRaceQuestion encoded;
      encoded.passage = index;
      encoded.answer = question.answer;
      for (int j = 0; j < kRaceChoices; ++j) {
        encoded.question_with_option[j] =
            encode(QuestionWithOption(question.question, question.options[j]));
      }
      out.questions.push_back(std::move(encoded));
    }
  }
  return out;
}

void FillRaceSequence(const std::vector<int32_t>& question_with_option,
                      const std::vector<int32_t>& passage, int seq_length,
                      const BertSpecialIds& special, BertSample* sample) {
  // Room for the three special tokens; the passage gives way first.
  const size_t room = static_cast<size_t>(seq_length) - 3;
  const size_t qa = std::min(question_with_option.size(), room);
  const size_t text = std::min(passage.size(), room - qa);
  sample->tokens.assign(seq_length, special.pad);
  sample->token_types.assign(seq_length, 0);
  sample->labels.assign(seq_length, -1);
  size_t at = 0;
  sample->tokens[at++] = special.cls;
  for (size_t i = 0; i < qa; ++i) sample->tokens[at++] = question_with_option[i];
  sample->tokens[at++] = special.sep;
  const size_t second = at;
  for (size_t i = 0; i < text; ++i) sample->tokens[at++] = passage[i];
  sample->tokens[at++] = special.sep;
  for (size_t i = second; i < at; ++i) sample->token_types[i] = 1;
  sample->length = static_cast<int>(at);
  sample->swapped = false;
}

absl::StatusOr<std::unique_ptr<RaceSamples>> RaceSamples::Create(EncodedRace race,
                                                                 RaceSamplesOptions options) {
  const auto refuse = [&](absl::string_view what) {
    return absl::InvalidArgumentError(absl::StrCat("RACE samples (", options.name, "): ", what));
  };
  if (options.seq_length < 8) return refuse("seq_length must be >= 8");
  for (int32_t id : {options.special.cls, options.special.sep, options.special.pad}) {
    if (id < 0 || id >= options.vocab_size) {
      return refuse(
          absl::StrCat("special id ", id, " is outside the vocabulary of ", options.vocab_size));
    }
  }
  if (race.questions.empty()) return refuse("no question");
  const auto check = [&](const std::vector<int32_t>& ids) {
    return std::all_of(ids.begin(), ids.end(),
                       [&](int32_t id) { return id >= 0 && id < options.vocab_size; });
  };
  for (const std::vector<int32_t>& passage : race.passages) {
    if (!check(passage)) return refuse("a passage holds a token id outside the vocabulary");
  }
  for (const EncodedRaceQuestion& question : race.questions) {
    for (const std::vector<int32_t>& ids : question.question_with_option) {
      if (!check(ids)) return refuse("a question holds a token id outside the vocabulary");
    }
  }
  return std::unique_ptr<RaceSamples>(new RaceSamples(std::move(race), std::move(options)));
}

absl::Status RaceSamples::Fill(int64_t index, BertSample* sample) {
  if (index < 0) return absl::InvalidArgumentError(absl::StrCat("sample ", index, " < 0"));
  const int64_t n = num_questions();
  const int64_t position = index / kRaceChoices;
  int64_t question = position % n;
  if (options_.shuffle) {
    const int64_t epoch = position / n;
    if (epoch != epoch_) {
      order_.resize(n);
      std::iota(order_.begin(), order_.end(), 0);
      SplitMixStream shuffle(
          SplitMix64(SplitMix64(options_.seed ^ kRaceEpochSalt) ^ static_cast<uint64_t>(epoch)));
      Shuffle(&order_, &shuffle);
      epoch_ = epoch;
    }
    question = order_[question];
  }
  const EncodedRaceQuestion& q = race_.questions[question];
  FillRaceSequence(q.question_with_option[index % kRaceChoices], race_.passages[q.passage],
                   options_.seq_length, options_.special, sample);
  sample->answer = q.answer;
  return absl::OkStatus();
}

std::string RaceSamples::Describe() const {
  return absl::StrCat(options_.name, ": ", race_.passages.size(), " RACE passages, ",
                      num_questions(), " questions of ", kRaceChoices, " options",
                      options_.shuffle ? ", shuffled per epoch" : ", in file order");
}

}  // namespace mtrain
