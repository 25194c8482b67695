// BERT's multiple-choice head (model.bert_head BERT_HEAD_MULTIPLE_CHOICE: RACE fine-tuning
// as the Megatron-LM paper does it, HF BertForMultipleChoice): the pooler's output of each
// sequence, after dropout, scored by a linear layer [1, C] with a bias; the kRaceChoices
// consecutive sequences of a question are its options, and its loss is the cross-entropy of
// the softmax over their scores at the correct option. Replicated on every tensor rank (one
// row a sequence), so the input gradient is the same everywhere, as the pretraining heads'.
#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/dropout.h"
#include "model/family_defaults.h"
#include "worker/engine/bert_inputs.h"
#include "worker/engine/cpu/transformer_model.h"
#include "worker/engine/model_numerics.h"

namespace mtrain {

template <typename T>
absl::StatusOr<double> TransformerModel<T>::ChoiceHeadForward(const MicrobatchInput<T>& input,
                                                              Activations<T>* acts,
                                                              const T* head_in) {
  const int B = batch_;
  const int C = shape_.hidden;
  RETURN_IF_ERROR(CheckChoiceAnswers(input.choice_answers, B));
  const int questions = B / kRaceChoices;
  acts->choice_answers.assign(input.choice_answers, input.choice_answers + questions);
  PoolerForward(acts, head_in);
  // Dropout on the pooler's output (HF's and Megatron's multiple-choice dropout), with the
  // microbatch's mask: the same on every tensor rank and in every layout.
  const size_t BC = static_cast<size_t>(B) * C;
  const float p = input.id.evaluation ? 0.0f : options_.dropout;
  acts->choice_in.resize(BC);
  cpu::DropoutForward<T>(acts->pooled.data(), acts->choice_in.data(), BC, p,
                         DropoutKeyFor(input.id, -1, kPoolerOutSite), 0);
  acts->choice_scores.resize(B);
  for (int b = 0; b < B; ++b) {
    const T* row = acts->choice_in.data() + static_cast<size_t>(b) * C;
    T score = p_.choice_bias[0];
    for (int c = 0; c < C; ++c) score += row[c] * p_.choice_weight[c];
    acts->choice_scores[b] = score;
  }
  // Softmax over each question's options: four numbers, written out rather than through the
  // vocabulary-sized cross-entropy kernels.
  acts->choice_probs.assign(B, T(0));
  double loss_sum = 0;
  int64_t correct = 0, seen = 0;
  for (int q = 0; q < questions; ++q) {
    const int32_t answer = acts->choice_answers[q];
    if (answer < 0) continue;  // padding: no loss, no gradient, not counted
    const T* scores = acts->choice_scores.data() + static_cast<size_t>(q) * kRaceChoices;
    T* probs = acts->choice_probs.data() + static_cast<size_t>(q) * kRaceChoices;
    const T max = *std::max_element(scores, scores + kRaceChoices);
    T sum = 0;
    for (int j = 0; j < kRaceChoices; ++j) {
      probs[j] = std::exp(scores[j] - max);
      sum += probs[j];
    }
    for (int j = 0; j < kRaceChoices; ++j) probs[j] /= sum;
    loss_sum += static_cast<double>(std::log(sum) + max - scores[answer]);
    correct += scores[answer] >= max ? 1 : 0;
    ++seen;
  }
  if (input.bert_totals != nullptr) {
    input.bert_totals->choice_correct += correct;
    input.bert_totals->choice_questions += seen;
  }
  return loss_sum;
}

template <typename T>
void TransformerModel<T>::ChoiceHeadBackward(Activations<T>* acts, T d_loss_per_question,
                                             T* d_head_in) {
  const int B = batch_;
  const int C = shape_.hidden;
  const size_t BC = static_cast<size_t>(B) * C;
  // d score_j = seed (p_j - [j is the answer]) within each question.
  std::vector<T> d_scores(B, T(0));
  for (int q = 0; q < B / kRaceChoices; ++q) {
    const int32_t answer = acts->choice_answers[q];
    if (answer < 0) continue;
    for (int j = 0; j < kRaceChoices; ++j) {
      const int b = q * kRaceChoices + j;
      d_scores[b] = d_loss_per_question * (acts->choice_probs[b] - (j == answer ? T(1) : T(0)));
    }
  }
  // The score's weights, then its input (the dropped pooler output), then the dropout.
  d_sop_logits_.assign(BC, T(0));  // the gradient of the dropout's output
  for (int b = 0; b < B; ++b) {
    const T d = d_scores[b];
    const T* row = acts->choice_in.data() + static_cast<size_t>(b) * C;
    T* d_row = d_sop_logits_.data() + static_cast<size_t>(b) * C;
    for (int c = 0; c < C; ++c) {
      g_.choice_weight[c] += d * row[c];
      d_row[c] = d * p_.choice_weight[c];
    }
    g_.choice_bias[0] += d;
  }
  d_pooled_.assign(BC, T(0));
  cpu::DropoutBackward<T>(d_sop_logits_.data(), d_pooled_.data(), BC, options_.dropout,
                          DropoutKeyFor(acts->id, -1, kPoolerOutSite), 0);
  PoolerBackward(acts, d_head_in);
}

// Only the members defined here: the class itself is instantiated in transformer_model.cc.
#define MTRAIN_INSTANTIATE_BERT_CHOICE(T)                                 \
  template absl::StatusOr<double> TransformerModel<T>::ChoiceHeadForward( \
      const MicrobatchInput<T>&, Activations<T>*, const T*);              \
  template void TransformerModel<T>::ChoiceHeadBackward(Activations<T>*, T, T*);
MTRAIN_INSTANTIATE_BERT_CHOICE(float)
MTRAIN_INSTANTIATE_BERT_CHOICE(double)
#undef MTRAIN_INSTANTIATE_BERT_CHOICE

}  // namespace mtrain
