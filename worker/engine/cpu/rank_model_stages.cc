#include "worker/engine/cpu/rank_model_stages.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace mtrain {

RankModelStages::RankModelStages(RankModel* model, int64_t heap_baseline)
    : model_(model), free_(model->num_chunks()), heap_peak_(heap_baseline) {}

absl::StatusOr<double> RankModelStages::Forward(int chunk, int index, const Microbatch& microbatch,
                                                const float* hidden_in, float* hidden_out) {
  std::unique_ptr<Activations<float>>& acts = in_flight_[{chunk, index}];
  if (acts != nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("chunk ", chunk, " ran microbatch ", index, "'s forward twice"));
  }
  if (!free_[chunk].empty()) {
    acts = std::move(free_[chunk].back());
    free_[chunk].pop_back();
  } else {
    acts = model_->chunk(chunk).NewActivations();
  }
  MicrobatchInput<float> input;
  input.id = microbatch.id;
  input.tokens = microbatch.tokens.data();
  input.targets = microbatch.targets.data();
  input.hidden_in = hidden_in;
  input.outputs = microbatch.outputs;
  if (!microbatch.lengths.empty()) {
    input.token_types = microbatch.token_types.data();
    input.lengths = microbatch.lengths.data();
    input.sentence_order = microbatch.sentence_order.data();
    input.choice_answers = microbatch.choice_answers.data();
    input.d_loss_per_sequence = microbatch.d_loss_per_sequence;
    input.bert_totals = microbatch.bert_totals;
  }
  absl::StatusOr<double> loss = model_->chunk(chunk).Forward(input, acts.get(), hidden_out);
  heap_peak_.Sample();
  if (microbatch.id.evaluation || !loss.ok()) {
    // No backward follows: the set is free again at once.
    acts->has_forward = false;
    free_[chunk].push_back(std::move(acts));
    in_flight_.erase({chunk, index});
    return loss;
  }
  activation_bytes_ += ActivationBytes(*acts);
  activation_peak_bytes_ = std::max(activation_peak_bytes_, activation_bytes_);
  return loss;
}

absl::StatusOr<std::unique_ptr<Activations<float>>> RankModelStages::Take(SetsByMicrobatch* sets,
                                                                          int chunk, int index,
                                                                          const char* missing) {
  auto it = sets->find({chunk, index});
  if (it == sets->end()) return absl::FailedPreconditionError(missing);
  std::unique_ptr<Activations<float>> acts = std::move(it->second);
  sets->erase(it);
  activation_bytes_ -= ActivationBytes(*acts);
  return acts;
}

absl::Status RankModelStages::Backward(int chunk, int index, const float* d_hidden_out,
                                       float d_loss_per_token, float* d_hidden_in,
                                       bool last_of_step) {
  ASSIGN_OR_RETURN(std::unique_ptr<Activations<float>> acts,
                   Take(&in_flight_, chunk, index, "backward before forward"));
  const absl::Status status =
      model_->chunk(chunk).Backward(acts.get(), d_hidden_out, d_loss_per_token, d_hidden_in,
                                    last_of_step ? final_grads_hook_ : nullptr);
  acts->has_forward = false;
  free_[chunk].push_back(std::move(acts));
  heap_peak_.Sample();
  return status;
}

absl::Status RankModelStages::BackwardInput(int chunk, int index, const float* d_hidden_out,
                                            float d_loss_per_token, float* d_hidden_in,
                                            bool last_of_step) {
  ASSIGN_OR_RETURN(std::unique_ptr<Activations<float>> acts,
                   Take(&in_flight_, chunk, index, "backward before forward"));
  const absl::Status status =
      model_->chunk(chunk).BackwardInput(acts.get(), d_hidden_out, d_loss_per_token, d_hidden_in,
                                         last_of_step ? final_grads_hook_ : nullptr);
  // The set, with the weight gradients' inputs it now holds, waits for BackwardWeight.
  activation_bytes_ += ActivationBytes(*acts);
  activation_peak_bytes_ = std::max(activation_peak_bytes_, activation_bytes_);
  weights_owed_[{chunk, index}] = std::move(acts);
  heap_peak_.Sample();
  return status;
}

absl::Status RankModelStages::BackwardWeight(int chunk, int index, bool last_of_step) {
  ASSIGN_OR_RETURN(std::unique_ptr<Activations<float>> acts,
                   Take(&weights_owed_, chunk, index, "BACKWARD_WEIGHT before its BACKWARD_INPUT"));
  const absl::Status status =
      model_->chunk(chunk).BackwardWeight(acts.get(), last_of_step ? final_grads_hook_ : nullptr);
  acts->has_forward = false;
  free_[chunk].push_back(std::move(acts));
  heap_peak_.Sample();
  return status;
}

}  // namespace mtrain
