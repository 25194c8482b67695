// The checks of a BERT microbatch's inputs that both engines make before they use them (the
// CPU's transformer_model_bert*.cc and the CUDA's cuda_gpt_model_bert.cc), so that a bad
// microbatch is refused with the same words on either: each sequence's length, the token
// types, the masked-LM labels, the sentence-order labels and the multiple-choice answers.
#ifndef MTRAIN_WORKER_ENGINE_BERT_INPUTS_H_
#define MTRAIN_WORKER_ENGINE_BERT_INPUTS_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace mtrain {

// lengths[batch] (null: missing), each in [1, seq_length].
absl::Status CheckBertLengths(const int32_t* lengths, int batch, int seq_length);

// token_types[n] (null: missing), each in [0, token_types).
absl::Status CheckTokenTypes(const int32_t* types, int n, int token_types);

// The masked rows of a microbatch: rows whose label (targets[i]) is not -1, in row order,
// and their labels; INVALID_ARGUMENT for a label outside [0, vocab).
struct MaskedRows {
  std::vector<int32_t> rows;
  std::vector<int32_t> labels;
};
absl::StatusOr<MaskedRows> MaskedRowsOf(const int32_t* targets, int n, int vocab);

// sentence_order[batch] (null: missing), each 0 (in order) or 1 (swapped).
absl::Status CheckSentenceOrder(const int32_t* sentence_order, int batch);

// The multiple-choice head's answers (null: missing): `batch` sequences hold whole
// questions of kRaceChoices options, and each question's answer is in [0, kRaceChoices) or
// -1 (padding).
absl::Status CheckChoiceAnswers(const int32_t* answers, int batch);

}  // namespace mtrain

#endif  // MTRAIN_WORKER_ENGINE_BERT_INPUTS_H_
