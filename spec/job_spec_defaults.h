// Defaults for every omitted JobSpec field. Applied once, where a spec enters the system
// (trainctl before submitting, the coordinator on SubmitJob, `train` on --spec), so that
// everything downstream reads plain values and never re-derives a default.
//
//   JobSpec spec = ...parsed...;
//   ApplyJobSpecDefaults(&spec);   // idempotent; explicit values are kept
#ifndef MTRAIN_SPEC_JOB_SPEC_DEFAULTS_H_
#define MTRAIN_SPEC_JOB_SPEC_DEFAULTS_H_

#include "proto/job_spec.pb.h"

namespace mtrain {

// A small model that trains on a CPU in minutes.
inline constexpr int kDefaultNumLayers = 4;
inline constexpr int kDefaultNumHeads = 4;
inline constexpr int kDefaultHiddenSize = 128;
inline constexpr int kDefaultSeqLength = 128;
// The byte tokenizer's vocabulary.
inline constexpr int kDefaultVocabSize = 256;
inline constexpr float kDefaultNormEpsilon = 1e-5f;
// BERT's layer_norm_eps (HF BertConfig and MegatronBertConfig).
inline constexpr float kDefaultBertNormEpsilon = 1e-12f;
inline constexpr float kDefaultRopeTheta = 10000.0f;
inline constexpr int kDefaultSteps = 100;
inline constexpr unsigned long long kDefaultSeed = 1234;
// From the Megatron-LM GPT recipe.
inline constexpr float kDefaultLr = 6e-4f;
inline constexpr int kDefaultWarmupSteps = 10;
inline constexpr float kDefaultWeightDecay = 0.01f;
inline constexpr float kDefaultBeta1 = 0.9f;
inline constexpr float kDefaultBeta2 = 0.95f;
inline constexpr float kDefaultEps = 1e-8f;
inline constexpr float kDefaultGradClip = 1.0f;
inline constexpr float kDefaultDropout = 0.1f;
inline constexpr int kDefaultMaxRestarts = 3;
// Global batches per validation when train.eval_interval asks for one.
inline constexpr int kDefaultEvalIters = 10;
// train.generate entries: their max_new_tokens and top_p when unset (the worker applies
// them: defaults inside repeated entries are not filled in the stored spec).
inline constexpr int kDefaultMaxNewTokens = 64;
inline constexpr double kDefaultTopP = 1.0;

// Fills every unset field with its default. Fields whose default depends on other fields
// (global_batch_size, min_data, min_lr, decay_steps) are derived from the values already
// present, so call this before validation.
void ApplyJobSpecDefaults(JobSpec* spec);

}  // namespace mtrain

#endif  // MTRAIN_SPEC_JOB_SPEC_DEFAULTS_H_
