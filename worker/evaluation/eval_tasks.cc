#include "worker/evaluation/eval_tasks.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/json_writer.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"

namespace mtrain {
namespace {

// Megatron caps the exponent so a diverged model prints a number, not inf.
constexpr double kMaxExponent = 20;

// The last `seq_length + 1` tokens of context + target, with the target's positions
// scored (and none of the context's).
EvalSequence ScoredEnding(std::vector<int32_t> context, const std::vector<int32_t>& target,
                          int seq_length) {
  EvalSequence sequence;
  const size_t keep = static_cast<size_t>(seq_length) + 1;
  std::vector<int32_t>& tokens = sequence.tokens;
  tokens = std::move(context);
  const size_t first_target = tokens.size();  // tokens[first_target] is the first target
  tokens.insert(tokens.end(), target.begin(), target.end());
  size_t cut = tokens.size() > keep ? tokens.size() - keep : 0;
  tokens.erase(tokens.begin(), tokens.begin() + static_cast<std::ptrdiff_t>(cut));
  sequence.scored.assign(tokens.size() - 1, 0);
  // Target token tokens[j] is predicted at position j - 1.
  for (size_t j = std::max<size_t>(first_target >= cut ? first_target - cut : 0, 1);
       j < tokens.size(); ++j) {
    sequence.scored[j - 1] = 1;
  }
  return sequence;
}

absl::StatusOr<google::protobuf::Struct> ParseLine(absl::string_view line,
                                                   const std::string& source, int number) {
  google::protobuf::Struct object;
  const auto parsed = google::protobuf::util::JsonStringToMessage(
      google::protobuf::StringPiece(line.data(), line.size()), &object);
  if (!parsed.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ":", number, ": not a JSON object: ", parsed.ToString()));
  }
  return object;
}

absl::StatusOr<std::string> StringField(const google::protobuf::Struct& object, const char* key,
                                        const std::string& source, int number) {
  const auto it = object.fields().find(key);
  if (it == object.fields().end() ||
      it->second.kind_case() != google::protobuf::Value::kStringValue) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ":", number, ": needs a string \"", key, "\""));
  }
  return it->second.string_value();
}

// Calls `each(line, number)` for every non-blank line (1-based numbers).
template <typename Each>
absl::Status ForEachLine(absl::string_view jsonl, const std::string& source, Each each) {
  int number = 0;
  int lines = 0;
  for (absl::string_view line : absl::StrSplit(jsonl, '\n')) {
    ++number;
    if (absl::StripAsciiWhitespace(line).empty()) continue;
    ++lines;
    absl::Status status = each(line, number);
    if (!status.ok()) return status;
  }
  if (lines == 0) return absl::InvalidArgumentError(absl::StrCat(source, ": holds no examples"));
  return absl::OkStatus();
}

double CappedExp(double x) { return std::exp(std::min(x, kMaxExponent)); }

// Python's re.sub(r"\(\s*([^\)]*?)\s*\)", r"(\1)", s) for any pair of characters: each
// opening character and the next closing one after it, scanning left to right without
// overlap, keep their contents without the white space at either end.
std::string HugPairs(const std::string& s, char open, char close) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    if (s[i] == open) {
      const size_t end = s.find(close, i + 1);
      if (end != std::string::npos) {
        out += open;
        absl::StrAppend(
            &out, absl::StripAsciiWhitespace(absl::string_view(s).substr(i + 1, end - i - 1)));
        out += close;
        i = end + 1;
        continue;
      }
    }
    out += s[i++];
  }
  return out;
}

}  // namespace

std::string EvalResult::ToJson() const {
  JsonObject json(JsonNumberFormat::Significant(9));
  json.String("task", task).Int("examples", examples).Int("scored_tokens", scored_tokens);
  json.Number("loss", loss);
  if (task == "perplexity") {
    json.Number("perplexity", perplexity)
        .Number("adjusted_perplexity", adjusted_perplexity)
        .Int("words", words);
  } else {
    json.Number("accuracy", accuracy);
    if (task == "choice") json.Number("accuracy_norm", accuracy_norm);
  }
  return json.Close();
}

int64_t CountWords(absl::string_view text) {
  // Python's len(text.strip().split(" ")): runs of spaces count empty words, as there.
  const absl::string_view stripped = absl::StripAsciiWhitespace(text);
  return static_cast<int64_t>(std::count(stripped.begin(), stripped.end(), ' ')) + 1;
}

absl::StatusOr<std::vector<EvalSequence>> PerplexitySequences(absl::string_view text,
                                                              const Encoder& encode, int seq_length,
                                                              int overlap) {
  if (overlap < 1 || overlap > seq_length) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--overlapping_eval: ", overlap, " must be in [1, model.seq_length = ", seq_length, "]"));
  }
  const std::vector<int32_t> tokens = encode(text);
  if (tokens.size() < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("the text has ", tokens.size(), " tokens; perplexity needs at least 2"));
  }
  const int64_t targets = static_cast<int64_t>(tokens.size()) - 1;
  // Megatron: ceil(max(targets - o, 0) / o) + 1 windows.
  const int64_t windows = (std::max<int64_t>(targets - overlap, 0) + overlap - 1) / overlap + 1;
  std::vector<EvalSequence> sequences;
  for (int64_t w = 0; w < windows; ++w) {
    EvalSequence sequence;
    sequence.example = w;
    const int64_t begin = w * overlap;
    const int64_t end = std::min<int64_t>(begin + seq_length + 1, tokens.size());
    sequence.tokens.assign(tokens.begin() + begin, tokens.begin() + end);
    const int64_t n = static_cast<int64_t>(sequence.tokens.size()) - 1;
    sequence.scored.assign(n, 1);
    // After the first window only the last `overlap` targets of a full window are new
    // (the positions [seq_length - overlap, seq_length) of the window).
    if (w > 0) {
      for (int64_t i = 0; i < std::min<int64_t>(n, seq_length - overlap); ++i) {
        sequence.scored[i] = 0;
      }
    }
    sequences.push_back(std::move(sequence));
  }
  return sequences;
}

absl::StatusOr<std::vector<EvalSequence>> ClozeSequences(absl::string_view jsonl,
                                                         const std::string& source,
                                                         const Encoder& encode, int seq_length) {
  std::vector<EvalSequence> sequences;
  absl::Status status = ForEachLine(jsonl, source, [&](absl::string_view line, int number) {
    absl::StatusOr<google::protobuf::Struct> object = ParseLine(line, source, number);
    if (!object.ok()) return object.status();
    absl::StatusOr<std::string> text = StringField(*object, "text", source, number);
    if (!text.ok()) return text.status();
    // Megatron's strict LAMBADA: the last whitespace-separated word, found from the end;
    // the context is what precedes it, stripped; the word is tokenized after a space.
    const std::vector<absl::string_view> words =
        absl::StrSplit(*text, absl::ByAnyChar(" \t\n\r\f\v"), absl::SkipEmpty());
    if (words.size() < 2) {
      return absl::InvalidArgumentError(absl::StrCat(
          source, ":", number, ": the text needs a context and a last word to predict"));
    }
    const size_t start = text->rfind(std::string(words.back()));
    EvalSequence sequence =
        ScoredEnding(encode(absl::StripAsciiWhitespace(absl::string_view(*text).substr(0, start))),
                     encode(absl::StrCat(" ", words.back())), seq_length);
    sequence.example = static_cast<int64_t>(sequences.size());
    sequences.push_back(std::move(sequence));
    return absl::OkStatus();
  });
  if (!status.ok()) return status;
  return sequences;
}

absl::StatusOr<std::vector<EvalSequence>> ChoiceSequences(absl::string_view jsonl,
                                                          const std::string& source,
                                                          const Encoder& encode, int seq_length,
                                                          std::vector<int>* labels) {
  std::vector<EvalSequence> sequences;
  labels->clear();
  absl::Status status = ForEachLine(jsonl, source, [&](absl::string_view line, int number) {
    absl::StatusOr<google::protobuf::Struct> object = ParseLine(line, source, number);
    if (!object.ok()) return object.status();
    absl::StatusOr<std::string> ctx = StringField(*object, "ctx", source, number);
    if (!ctx.ok()) return ctx.status();
    const auto endings = object->fields().find("endings");
    const auto label = object->fields().find("label");
    if (endings == object->fields().end() ||
        endings->second.kind_case() != google::protobuf::Value::kListValue ||
        endings->second.list_value().values_size() < 2) {
      return absl::InvalidArgumentError(
          absl::StrCat(source, ":", number, ": needs \"endings\", a list of at least 2 strings"));
    }
    const int count = endings->second.list_value().values_size();
    if (label == object->fields().end() ||
        label->second.kind_case() != google::protobuf::Value::kNumberValue ||
        label->second.number_value() != std::floor(label->second.number_value()) ||
        label->second.number_value() < 0 || label->second.number_value() >= count) {
      return absl::InvalidArgumentError(
          absl::StrCat(source, ":", number,
                       ": needs \"label\", the index of the right ending in [0, ", count, ")"));
    }
    const std::vector<int32_t> context = encode(*ctx);
    const int64_t example = static_cast<int64_t>(labels->size());
    for (int k = 0; k < count; ++k) {
      const google::protobuf::Value& ending = endings->second.list_value().values(k);
      if (ending.kind_case() != google::protobuf::Value::kStringValue) {
        return absl::InvalidArgumentError(
            absl::StrCat(source, ":", number, ": ending ", k, " is not a string"));
      }
      EvalSequence sequence =
          ScoredEnding(context, encode(absl::StrCat(" ", ending.string_value())), seq_length);
      sequence.example = example;
      sequence.ending = k;
      sequences.push_back(std::move(sequence));
    }
    labels->push_back(static_cast<int>(label->second.number_value()));
    return absl::OkStatus();
  });
  if (!status.ok()) return status;
  return sequences;
}

namespace {

// Summed loss, scored tokens and whether every scored target was the argmax.
struct SequenceScore {
  double loss = 0;
  int64_t tokens = 0;
  bool all_argmax = true;
};

SequenceScore Score(const EvalSequence& sequence, const TokenOutputs& outputs) {
  SequenceScore score;
  for (size_t i = 0; i < sequence.scored.size(); ++i) {
    if (!sequence.scored[i]) continue;
    score.loss += outputs.loss[i];
    ++score.tokens;
    if (i < outputs.argmax.size() && outputs.argmax[i] == 0) score.all_argmax = false;
  }
  return score;
}

}  // namespace

EvalResult PerplexityResult(const std::vector<EvalSequence>& sequences,
                            const std::vector<TokenOutputs>& outputs, int64_t words) {
  EvalResult result;
  result.task = "perplexity";
  result.examples = static_cast<int64_t>(sequences.size());
  double loss = 0;
  for (size_t s = 0; s < sequences.size(); ++s) {
    const SequenceScore score = Score(sequences[s], outputs[s]);
    loss += score.loss;
    result.scored_tokens += score.tokens;
  }
  result.words = words;
  result.loss = result.scored_tokens > 0 ? loss / result.scored_tokens : 0;
  result.perplexity = CappedExp(result.loss);
  // Megatron: exp(mean loss * (tokens - 1) / (words - 1)), the targets being tokens - 1.
  result.adjusted_perplexity = words > 1 ? CappedExp(loss / static_cast<double>(words - 1)) : 0;
  return result;
}

EvalResult ClozeResult(const std::vector<EvalSequence>& sequences,
                       const std::vector<TokenOutputs>& outputs) {
  EvalResult result;
  result.task = "cloze";
  result.examples = static_cast<int64_t>(sequences.size());
  double loss = 0;
  int64_t right = 0;
  for (size_t s = 0; s < sequences.size(); ++s) {
    const SequenceScore score = Score(sequences[s], outputs[s]);
    loss += score.loss;
    result.scored_tokens += score.tokens;
    right += score.all_argmax ? 1 : 0;
  }
  result.loss = result.scored_tokens > 0 ? loss / result.scored_tokens : 0;
  result.accuracy = result.examples > 0 ? static_cast<double>(right) / result.examples : 0;
  return result;
}

EvalResult ChoiceResult(const std::vector<EvalSequence>& sequences,
                        const std::vector<TokenOutputs>& outputs, const std::vector<int>& labels) {
  EvalResult result;
  result.task = "choice";
  result.examples = static_cast<int64_t>(labels.size());
  std::vector<double> best_sum(labels.size(), std::numeric_limits<double>::infinity());
  std::vector<double> best_mean(labels.size(), std::numeric_limits<double>::infinity());
  std::vector<int> pick_sum(labels.size(), -1), pick_mean(labels.size(), -1);
  double loss = 0;
  for (size_t s = 0; s < sequences.size(); ++s) {
    const EvalSequence& sequence = sequences[s];
    const SequenceScore score = Score(sequence, outputs[s]);
    loss += score.loss;
    result.scored_tokens += score.tokens;
    const double mean = score.tokens > 0 ? score.loss / score.tokens : score.loss;
    // Strictly lower: the first ending wins a tie, as torch's argmin picks.
    if (score.loss < best_sum[sequence.example]) {
      best_sum[sequence.example] = score.loss;
      pick_sum[sequence.example] = sequence.ending;
    }
    if (mean < best_mean[sequence.example]) {
      best_mean[sequence.example] = mean;
      pick_mean[sequence.example] = sequence.ending;
    }
  }
  int64_t right = 0, right_norm = 0;
  for (size_t e = 0; e < labels.size(); ++e) {
    right += pick_sum[e] == labels[e];
    right_norm += pick_mean[e] == labels[e];
  }
  result.loss = result.scored_tokens > 0 ? loss / result.scored_tokens : 0;
  result.accuracy = result.examples > 0 ? static_cast<double>(right) / result.examples : 0;
  result.accuracy_norm =
      result.examples > 0 ? static_cast<double>(right_norm) / result.examples : 0;
  return result;
}

std::string WikiTextDetokenize(absl::string_view text) {
  // One replacement after another, as Python's chained str.replace does.
  std::string s(text);
  for (const auto& [from, to] : std::vector<std::pair<const char*, const char*>>{{"s '", "s'"},
                                                                                 {" @-@ ", "-"},
                                                                                 {" @,@ ", ","},
                                                                                 {" @.@ ", "."},
                                                                                 {" : ", ": "},
                                                                                 {" ; ", "; "},
                                                                                 {" . ", ". "},
                                                                                 {" ! ", "! "},
                                                                                 {" ? ", "? "},
                                                                                 {" , ", ", "}}) {
    s = absl::StrReplaceAll(s, {{from, to}});
  }
  // Brackets and quotes hug their contents.
  for (const auto& [open, close] : std::vector<std::pair<char, char>>{
           {'(', ')'}, {'[', ']'}, {'{', '}'}, {'"', '"'}, {'\'', '\''}}) {
    s = HugPairs(s, open, close);
  }
  // Order matters: the longest heading marks first.
  s = absl::StrReplaceAll(s, {{"= = = =", "===="}});
  s = absl::StrReplaceAll(s, {{"= = =", "==="}});
  s = absl::StrReplaceAll(s, {{"= =", "=="}});
  s = absl::StrReplaceAll(s, {{" \xC2\xB0 ", "\xC2\xB0"}});
  s = absl::StrReplaceAll(s, {{" \n", "\n"}});
  s = absl::StrReplaceAll(s, {{"\n ", "\n"}});
  s = absl::StrReplaceAll(s, {{" N ", " 1 "}});
  s = absl::StrReplaceAll(s, {{" 's", "'s"}});
  return s;
}

}  // namespace mtrain
