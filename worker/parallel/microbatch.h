// The unit of work a pipeline schedule moves: one microbatch of a data-parallel replica's
// share of the global batch. The executor (pipeline_executor.h) hands it to the engine's
// stages untouched; the engine reads its tokens and targets and derives the dropout masks
// from its id, so every layout and every engine draws the same masks for the same samples.
//
//   Microbatch mb;
//   mb.id.step = 3;
//   mb.id.first_sample = 8;  // starts at the 9th sequence of step 3's global batch
//   mb.tokens = ...;         // [B, S]
#ifndef MTRAIN_WORKER_PARALLEL_MICROBATCH_H_
#define MTRAIN_WORKER_PARALLEL_MICROBATCH_H_

#include <cstdint>
#include <vector>

namespace mtrain {

// Identifies a microbatch for dropout masks: the same (step, first_sample) gives the same
// masks on every rank and in every recomputation.
struct MicrobatchId {
  int64_t step = 0;          // optimizer step, 1-based
  int64_t first_sample = 0;  // index of its first sequence within the global batch
  // A validation microbatch: its forward draws no dropout and keeps nothing for a
  // backward (there is none); the engines release its activations at once.
  bool evaluation = false;
};

// What the head writes for each token of an evaluation microbatch that asks for it
// (evaluation tasks score chosen positions, not the whole microbatch).
struct TokenOutputs {
  std::vector<float> loss;      // [B * S]: -log p(target)
  std::vector<uint8_t> argmax;  // [B * S]: 1 when no logit exceeds the target's
};

// What BERT's heads add up over the microbatches of a step or a validation (on the ranks
// holding the head; every tensor rank adds the same).
struct BertHeadTotals {
  double sentence_order_loss = 0;      // summed over sequences
  int64_t sentence_order_correct = 0;  // sequences whose label's logit is the larger
  int64_t masked_correct = 0;          // masked positions whose label is an argmax
  // The multiple-choice head (model.bert_head BERT_HEAD_MULTIPLE_CHOICE): questions whose
  // answer scored highest (ties count as right, as the argmax checks above), out of the
  // questions seen (padding excluded).
  int64_t choice_correct = 0;
  int64_t choice_questions = 0;
};

// One microbatch of this data-parallel replica.
struct Microbatch {
  MicrobatchId id;               // id.first_sample: index in the GLOBAL batch (dropout)
  std::vector<int32_t> tokens;   // [B, S]; read on the first virtual stage
  std::vector<int32_t> targets;  // [B, S]; read on the last virtual stage
  // Evaluation only: where the rank holding the head writes each token's outputs (sized
  // there); null when only the summed loss is wanted. Owned by the caller.
  TokenOutputs* outputs = nullptr;

  // BERT (model.family MODEL_FAMILY_BERT): `targets` hold the masked-LM labels (the
  // original token at each masked position, -1 elsewhere).
  std::vector<int32_t> token_types;     // [B, S]; read on the first virtual stage
  std::vector<int32_t> lengths;         // [B] real positions of each sequence; every stage
  std::vector<int32_t> sentence_order;  // [B] 1: the segments were swapped; last stage
  // The sentence-order loss is a mean over the step's sequences: the backward seeds each
  // sequence's loss with this, and the head adds its totals at `bert_totals` (owned by the
  // caller; may be null).
  float d_loss_per_sequence = 0;
  BertHeadTotals* bert_totals = nullptr;
  // BERT's multiple-choice head: the correct option of each question, whose kRaceChoices
  // sequences are consecutive ([B / kRaceChoices]; -1: padding, no loss); last stage. The
  // loss is the cross-entropy over each question's scores, seeded per question by the
  // backward's d_loss_per_token.
  std::vector<int32_t> choice_answers;
};

}  // namespace mtrain

#endif  // MTRAIN_WORKER_PARALLEL_MICROBATCH_H_
