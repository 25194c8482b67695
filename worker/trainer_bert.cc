// BERT's part of the trainer (model.family MODEL_FAMILY_BERT): microbatches from its samples,
// the normalisation of its losses (pretraining's two, or the multiple-choice head's), and
// the multiple-choice evaluation (`trainctl eval --task race`).
#include <algorithm>
#include <vector>

#include "common/status_macros.h"
#include "model/family_defaults.h"
#include "worker/trainer.h"

namespace mtrain {

absl::StatusOr<std::vector<Microbatch>> Trainer::LoadBertMicrobatches(BertSampleSource& samples,
                                                                      int64_t first_sample,
                                                                      long long step,
                                                                      bool evaluation) const {
  const int S = shape_.seq_length;
  std::vector<Microbatch> microbatches(microbatches_);
  BertSample sample;
  for (int k = 0; k < microbatches_; ++k) {
    // Microbatch k of replica r is microbatch r * m + k of the global batch, as the
    // decoders'.
    const int64_t first =
        (static_cast<int64_t>(assignment_.rank().dp_rank()) * microbatches_ + k) * micro_batch_;
    Microbatch& mb = microbatches[k];
    mb.id = {step, first, evaluation};
    const size_t n = static_cast<size_t>(micro_batch_) * S;
    mb.tokens.resize(n);
    mb.targets.resize(n);
    mb.token_types.resize(n);
    mb.lengths.resize(micro_batch_);
    mb.sentence_order.resize(micro_batch_);
    if (is_multiple_choice()) mb.choice_answers.resize(micro_batch_ / kRaceChoices);
    for (int i = 0; i < micro_batch_; ++i) {
      RETURN_IF_ERROR(samples.Fill(first_sample + first + i, &sample));
      const size_t at = static_cast<size_t>(i) * S;
      std::copy(sample.tokens.begin(), sample.tokens.end(), mb.tokens.begin() + at);
      std::copy(sample.labels.begin(), sample.labels.end(), mb.targets.begin() + at);
      std::copy(sample.token_types.begin(), sample.token_types.end(), mb.token_types.begin() + at);
      mb.lengths[i] = sample.length;
      mb.sentence_order[i] = sample.swapped ? 1 : 0;
      // A question's options are samples 4 q .. 4 q + 3 of the global batch, and a
      // microbatch starts at a multiple of 4 (micro_batch_size is one).
      if (is_multiple_choice()) mb.choice_answers[i / kRaceChoices] = sample.answer;
    }
  }
  return microbatches;
}

absl::StatusOr<double> Trainer::PrepareBertLoss(std::vector<Microbatch>* microbatches,
                                                double loss_scale, BertHeadTotals* totals) {
  // Every rank of a replica holds the same microbatches; the replicas' counts add up to
  // the global batch's.
  if (is_multiple_choice()) {
    double questions = 0;
    for (Microbatch& mb : *microbatches) {
      for (int32_t answer : mb.choice_answers) questions += answer >= 0 ? 1 : 0;
      mb.bert_totals = totals;
    }
    RETURN_IF_ERROR(groups_.data->AllReduce(&questions, 1, ReduceOp::kSum));
    return std::max(questions, 1.0);
  }
  double masked = 0;
  for (Microbatch& mb : *microbatches) {
    for (int32_t label : mb.targets) masked += label >= 0 ? 1 : 0;
    mb.d_loss_per_sequence =
        static_cast<float>(loss_scale / assignment_.spec().parallel().global_batch_size());
    mb.bert_totals = totals;
  }
  RETURN_IF_ERROR(groups_.data->AllReduce(&masked, 1, ReduceOp::kSum));
  // BERT's samples mask at least one position each (bert_samples.h); never divide by 0.
  return std::max(masked, 1.0);
}

absl::StatusOr<Trainer::ChoiceEvaluation> Trainer::EvaluateMultipleChoice(RaceSamples& questions) {
  if (!is_multiple_choice()) {
    return absl::FailedPreconditionError(
        "race evaluates BERT's multiple-choice head (model.bert_head BERT_HEAD_MULTIPLE_CHOICE)");
  }
  ChoiceEvaluation result;
  // Data-parallel replica 0 evaluates; the others wait for it at their next collective.
  if (assignment_.rank().dp_rank() != 0) return result;
  const int S = shape_.seq_length;
  const int64_t total = questions.num_questions();
  const int64_t per_round = static_cast<int64_t>(microbatches_) * micro_batch_ / kRaceChoices;
  BertHeadTotals totals;
  BertSample sample;
  for (int64_t first = 0; first < total; first += per_round) {
    std::vector<Microbatch> microbatches(microbatches_);
    for (int k = 0; k < microbatches_; ++k) {
      Microbatch& mb = microbatches[k];
      mb.id = {0, static_cast<int64_t>(k) * micro_batch_, /*evaluation=*/true};
      const size_t n = static_cast<size_t>(micro_batch_) * S;
      mb.tokens.assign(n, 0);
      mb.targets.assign(n, -1);
      mb.token_types.assign(n, 0);
      mb.lengths.assign(micro_batch_, 1);
      mb.sentence_order.assign(micro_batch_, 0);
      mb.choice_answers.assign(micro_batch_ / kRaceChoices, -1);  // padding unless filled
      mb.bert_totals = &totals;
      for (int i = 0; i < micro_batch_; ++i) {
        const int64_t question =
            first + (static_cast<int64_t>(k) * micro_batch_ + i) / kRaceChoices;
        if (question >= total) break;
        RETURN_IF_ERROR(questions.Fill(question * kRaceChoices + i % kRaceChoices, &sample));
        const size_t at = static_cast<size_t>(i) * S;
        std::copy(sample.tokens.begin(), sample.tokens.end(), mb.tokens.begin() + at);
        std::copy(sample.token_types.begin(), sample.token_types.end(),
                  mb.token_types.begin() + at);
        mb.lengths[i] = sample.length;
        mb.choice_answers[i / kRaceChoices] = sample.answer;
      }
    }
    ASSIGN_OR_RETURN(const double loss_sum, engine_->ComputeLoss(*executor_, microbatches));
    result.loss_sum += loss_sum;
  }
  if (!computes_loss()) return ChoiceEvaluation{};
  result.questions = totals.choice_questions;
  result.correct = totals.choice_correct;
  return result;
}

}  // namespace mtrain
