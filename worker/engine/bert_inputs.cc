#include "worker/engine/bert_inputs.h"

#include "absl/strings/str_cat.h"
#include "model/family_defaults.h"

namespace mtrain {

absl::Status CheckBertLengths(const int32_t* lengths, int batch, int seq_length) {
  if (lengths == nullptr) {
    return absl::InvalidArgumentError("a BERT microbatch needs each sequence's length");
  }
  for (int b = 0; b < batch; ++b) {
    if (lengths[b] < 1 || lengths[b] > seq_length) {
      return absl::InvalidArgumentError(absl::StrCat("sequence ", b, " has length ", lengths[b],
                                                     "; it must be in [1, seq_length ", seq_length,
                                                     "]"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckTokenTypes(const int32_t* types, int n, int token_types) {
  if (types == nullptr) {
    return absl::InvalidArgumentError("a BERT microbatch needs its token types on the first stage");
  }
  for (int i = 0; i < n; ++i) {
    if (types[i] < 0 || types[i] >= token_types) {
      return absl::InvalidArgumentError(absl::StrCat("token type ", types[i], " at row ", i,
                                                     " is outside [0, ", token_types, ")"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<MaskedRows> MaskedRowsOf(const int32_t* targets, int n, int vocab) {
  MaskedRows masked;
  for (int i = 0; i < n; ++i) {
    const int32_t label = targets[i];
    if (label < 0) continue;
    if (label >= vocab) {
      return absl::InvalidArgumentError(absl::StrCat("masked-LM label ", label, " at row ", i,
                                                     " is outside the vocabulary of ", vocab));
    }
    masked.rows.push_back(i);
    masked.labels.push_back(label);
  }
  return masked;
}

absl::Status CheckSentenceOrder(const int32_t* sentence_order, int batch) {
  if (sentence_order == nullptr) {
    return absl::InvalidArgumentError(
        "a BERT microbatch needs its sentence-order labels on the last stage");
  }
  for (int b = 0; b < batch; ++b) {
    if (sentence_order[b] != 0 && sentence_order[b] != 1) {
      return absl::InvalidArgumentError(absl::StrCat("sentence-order label of sequence ", b, " is ",
                                                     sentence_order[b],
                                                     "; it must be 0 (in order) or 1 (swapped)"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckChoiceAnswers(const int32_t* answers, int batch) {
  if (batch % kRaceChoices != 0) {
    return absl::InvalidArgumentError(absl::StrCat("a multiple-choice microbatch of ", batch,
                                                   " sequences does not hold whole questions of ",
                                                   kRaceChoices, " options"));
  }
  if (answers == nullptr) {
    return absl::InvalidArgumentError(
        "a multiple-choice microbatch needs each question's answer on the last stage");
  }
  for (int q = 0; q < batch / kRaceChoices; ++q) {
    if (answers[q] < -1 || answers[q] >= kRaceChoices) {
      return absl::InvalidArgumentError(absl::StrCat("question ", q, " has answer ", answers[q],
                                                     "; it must be in [0, ", kRaceChoices,
                                                     ") (or -1 for padding)"));
    }
  }
  return absl::OkStatus();
}

}  // namespace mtrain
