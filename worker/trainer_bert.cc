// BERT's part of the trainer (model.family MODEL_FAMILY_BERT): microbatches from its samples
// and the normalisation of its two losses.
#include <algorithm>
#include <vector>

#include "common/status_macros.h"
#include "worker/trainer.h"

namespace mtrain {

absl::StatusOr<std::vector<Microbatch>> Trainer::LoadBertMicrobatches(BertSamples& samples,
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
    for (int i = 0; i < micro_batch_; ++i) {
      RETURN_IF_ERROR(samples.Fill(first_sample + first + i, &sample));
      const size_t at = static_cast<size_t>(i) * S;
      std::copy(sample.tokens.begin(), sample.tokens.end(), mb.tokens.begin() + at);
      std::copy(sample.labels.begin(), sample.labels.end(), mb.targets.begin() + at);
      std::copy(sample.token_types.begin(), sample.token_types.end(), mb.token_types.begin() + at);
      mb.lengths[i] = sample.length;
      mb.sentence_order[i] = sample.swapped ? 1 : 0;
    }
  }
  return microbatches;
}

absl::StatusOr<double> Trainer::PrepareBertLoss(std::vector<Microbatch>* microbatches,
                                                double loss_scale, BertHeadTotals* totals) {
  // Every rank of a replica holds the same microbatches; the replicas' counts add up to
  // the global batch's.
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

}  // namespace mtrain
