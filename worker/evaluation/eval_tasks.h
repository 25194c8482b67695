// Evaluation tasks over a trained model, as pure functions: each task turns its input into
// token sequences (at most seq_length + 1 tokens, the positions to score marked), the
// model gives each scored position its loss and whether the target was the argmax
// (TokenOutputs, worker/parallel/microbatch.h), and the task folds those into its result.
// The model run sits elsewhere (Trainer::ForwardSequences), so the tasks are tested with
// made-up outputs and run under any layout.
//
//   perplexity  Megatron-LM's language-model evaluation: windows of seq_length + 1 tokens;
//               with overlap o (Megatron's --overlapping-eval), each window after the first
//               starts o tokens after the previous one and scores only its last o targets,
//               so every token after the first is scored once with as much context as the
//               window allows. Perplexity exp(mean loss); the adjusted perplexity
//               exp(sum of losses / words), words counted by splitting the text on
//               whitespace (Megatron's num_original_tokens), for comparisons across
//               tokenizers.
//   cloze       LAMBADA's strict accuracy: each JSONL line {"text": ...}; the context is the
//               text before its last space, the target the last word with that space; the
//               example is right when every target token is the argmax.
//   choice      multiple-choice completion as llm.c scores HellaSwag: each JSONL line
//               {"ctx": ..., "endings": [...], "label": k}; each ending (" " + ending) is
//               scored after the context; the prediction is the ending with the lowest
//               summed loss (accuracy) and with the lowest mean loss (accuracy_norm).
//   race        BERT's multiple-choice head (model.bert_head BERT_HEAD_MULTIPLE_CHOICE) on a
//               RACE-format file (data/race_dataset.h): examples are the questions, loss
//               the mean cross-entropy over each question's options, accuracy the share
//               whose answer scored highest. Its sequences and scores are BERT's, not a
//               decoder's: Trainer::EvaluateMultipleChoice runs it, not the functions here.
//
// Sequences longer than seq_length + 1 keep their end (the context is cut from the left).
#ifndef MTRAIN_WORKER_EVALUATION_EVAL_TASKS_H_
#define MTRAIN_WORKER_EVALUATION_EVAL_TASKS_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "worker/parallel/microbatch.h"

namespace mtrain {

// One model input: tokens[0..n) (n <= seq_length + 1); target i is tokens[i + 1], scored
// when scored[i] (n - 1 flags).
struct EvalSequence {
  std::vector<int32_t> tokens;
  std::vector<uint8_t> scored;
  int64_t example = 0;  // the task's example (window, line) it belongs to
  int ending = 0;       // choice: which ending
};

// Text -> token ids with the job's tokenizer.
using Encoder = std::function<std::vector<int32_t>(absl::string_view text)>;

struct EvalResult {
  std::string task;
  int64_t examples = 0;
  int64_t scored_tokens = 0;
  double loss = 0;                 // mean loss over the scored tokens
  double perplexity = 0;           // perplexity: exp(loss)
  double adjusted_perplexity = 0;  // perplexity: exp(loss sum / words)
  int64_t words = 0;               // perplexity: whitespace-separated words of the text
  double accuracy = 0;             // cloze, choice
  double accuracy_norm = 0;        // choice: by mean loss

  // One JSON object (the line `train --evaluate` prints).
  std::string ToJson() const;
};

// perplexity: the windows over `text`'s tokens. INVALID_ARGUMENT for overlap outside
// [1, seq_length] or a text of fewer than 2 tokens.
absl::StatusOr<std::vector<EvalSequence>> PerplexitySequences(absl::string_view text,
                                                              const Encoder& encode, int seq_length,
                                                              int overlap);
// cloze and choice: one sequence per line (cloze) or per ending (choice). INVALID_ARGUMENT
// naming `source` and the line for a line that is not the task's JSON object, a cloze text
// without a space, a choice label outside its endings; an empty file too.
absl::StatusOr<std::vector<EvalSequence>> ClozeSequences(absl::string_view jsonl,
                                                         const std::string& source,
                                                         const Encoder& encode, int seq_length);
absl::StatusOr<std::vector<EvalSequence>> ChoiceSequences(absl::string_view jsonl,
                                                          const std::string& source,
                                                          const Encoder& encode, int seq_length,
                                                          std::vector<int>* labels);

// Folds the model's outputs (one per sequence, each with tokens.size() - 1 entries or
// more: padding after them is ignored) into the task's result. `words`: perplexity's
// word count; `labels`: choice's, by example.
EvalResult PerplexityResult(const std::vector<EvalSequence>& sequences,
                            const std::vector<TokenOutputs>& outputs, int64_t words);
EvalResult ClozeResult(const std::vector<EvalSequence>& sequences,
                       const std::vector<TokenOutputs>& outputs);
EvalResult ChoiceResult(const std::vector<EvalSequence>& sequences,
                        const std::vector<TokenOutputs>& outputs, const std::vector<int>& labels);

// Megatron-LM's WikiText-103 detokenizer (tasks/zeroshot_gpt/detokenizer.py): undoes the
// dataset's " @-@ ", " , ", " 's" spacing before tokenizing, so perplexity is measured on
// text as a model would see it.
std::string WikiTextDetokenize(absl::string_view text);

// Whitespace-separated words (Megatron's num_original_tokens).
int64_t CountWords(absl::string_view text);

}  // namespace mtrain

#endif  // MTRAIN_WORKER_EVALUATION_EVAL_TASKS_H_
