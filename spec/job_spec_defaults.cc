#include "spec/job_spec_defaults.h"

#include <algorithm>
#include <cmath>

#include "model/family_defaults.h"
#include "spec/data_split.h"
#include "spec/job_spec_limits.h"

namespace mtrain {
namespace {

// Sets an optional proto field only when it is absent.
#define MTRAIN_DEFAULT(msg, field, value) \
  if (!(msg)->has_##field()) (msg)->set_##field(value)

void ApplyModelDefaults(ModelSpec* model) {
  MTRAIN_DEFAULT(model, num_layers, kDefaultNumLayers);
  MTRAIN_DEFAULT(model, num_heads, kDefaultNumHeads);
  MTRAIN_DEFAULT(model, hidden_size, kDefaultHiddenSize);
  MTRAIN_DEFAULT(model, seq_length, kDefaultSeqLength);
  MTRAIN_DEFAULT(model, vocab_size, kDefaultVocabSize);
  // The architecture: the family's choices (model/transformer_config.h reads them).
  if (model->family() == MODEL_FAMILY_UNSPECIFIED) model->set_family(MODEL_FAMILY_GPT2);
  const bool llama = model->family() == MODEL_FAMILY_LLAMA;
  const bool bert = model->family() == MODEL_FAMILY_BERT;
  MTRAIN_DEFAULT(model, num_kv_heads, model->num_heads());
  // Only from a valid width: a derived value would repeat the width's own error.
  if (model->hidden_size() > 0 && model->hidden_size() <= kMaxHiddenSize) {
    const int h = model->hidden_size();
    MTRAIN_DEFAULT(model, ffn_hidden_size, llama ? LlamaFfnHidden(h) : Gpt2FfnHidden(h));
  }
  if (model->normalization() == NORMALIZATION_UNSPECIFIED) {
    model->set_normalization(llama ? NORMALIZATION_RMSNORM : NORMALIZATION_LAYERNORM);
  }
  MTRAIN_DEFAULT(model, norm_epsilon, bert ? kDefaultBertNormEpsilon : kDefaultNormEpsilon);
  if (model->activation() == ACTIVATION_UNSPECIFIED) {
    model->set_activation(llama  ? ACTIVATION_SWIGLU
                          : bert ? ACTIVATION_GELU
                                 : ACTIVATION_GELU_TANH);
  }
  // Only BERT has a choice (a decoder's resolved spec stays as it was).
  if (bert && model->layernorm_placement() == LAYERNORM_PLACEMENT_UNSPECIFIED) {
    model->set_layernorm_placement(LAYERNORM_PLACEMENT_PRE);
  }
  if (bert && model->bert_head() == BERT_HEAD_UNSPECIFIED) {
    model->set_bert_head(BERT_HEAD_PRETRAINING);
  }
  if (model->position_embedding() == POSITION_EMBEDDING_UNSPECIFIED) {
    model->set_position_embedding(llama ? POSITION_EMBEDDING_ROTARY : POSITION_EMBEDDING_LEARNED);
  }
  if (model->position_embedding() == POSITION_EMBEDDING_ROTARY) {
    MTRAIN_DEFAULT(model, rope_theta, kDefaultRopeTheta);
  }
  MTRAIN_DEFAULT(model, linear_bias, !llama);
  MTRAIN_DEFAULT(model, tie_word_embeddings, !llama);
}

void ApplyParallelDefaults(ParallelSpec* parallel) {
  MTRAIN_DEFAULT(parallel, tensor, 1);
  MTRAIN_DEFAULT(parallel, pipeline, 1);
  MTRAIN_DEFAULT(parallel, data, 1);
  MTRAIN_DEFAULT(parallel, virtual_stages, 1);
  MTRAIN_DEFAULT(parallel, micro_batch_size, 1);
  // Derived only from valid sizes: a global batch derived from a bad one would be reported
  // as a second error in a field the user never set (and their product could overflow).
  if (parallel->micro_batch_size() > 0 && parallel->micro_batch_size() <= kMaxMicroBatchSize &&
      parallel->data() > 0 && parallel->data() <= kMaxWorldSize) {
    MTRAIN_DEFAULT(parallel, global_batch_size, parallel->micro_batch_size() * parallel->data());
  }
  if (parallel->schedule() == SCHEDULE_UNSPECIFIED) {
    parallel->set_schedule(SCHEDULE_1F1B);
  }
  MTRAIN_DEFAULT(parallel, zero_stage, 0);
  MTRAIN_DEFAULT(parallel, min_data, parallel->data());
}

void ApplyOptimizerDefaults(int steps, OptimizerSpec* optimizer) {
  MTRAIN_DEFAULT(optimizer, lr, kDefaultLr);
  // Derived fields only from valid values, as the global batch above: an Infinity lr is
  // reported once, not again as min_lr.
  if (std::isfinite(optimizer->lr()) && optimizer->lr() > 0 &&
      optimizer->lr() <= kMaxLearningRate) {
    MTRAIN_DEFAULT(optimizer, min_lr, optimizer->lr() / 10);
  }
  MTRAIN_DEFAULT(optimizer, warmup_steps, kDefaultWarmupSteps);
  // Never before the warm-up ends, so a short run with the default warm-up stays valid.
  if (steps > 0 && steps <= kMaxSteps && optimizer->warmup_steps() >= 0 &&
      optimizer->warmup_steps() <= kMaxSteps) {
    MTRAIN_DEFAULT(optimizer, decay_steps, std::max(steps, optimizer->warmup_steps()));
  }
  MTRAIN_DEFAULT(optimizer, weight_decay, kDefaultWeightDecay);
  MTRAIN_DEFAULT(optimizer, beta1, kDefaultBeta1);
  MTRAIN_DEFAULT(optimizer, beta2, kDefaultBeta2);
  MTRAIN_DEFAULT(optimizer, eps, kDefaultEps);
  MTRAIN_DEFAULT(optimizer, grad_clip, kDefaultGradClip);
}

void ApplyTrainDefaults(TrainSpec* train) {
  MTRAIN_DEFAULT(train, steps, kDefaultSteps);
  MTRAIN_DEFAULT(train, seed, kDefaultSeed);
  MTRAIN_DEFAULT(train, dropout, kDefaultDropout);
  MTRAIN_DEFAULT(train, recompute, false);
  MTRAIN_DEFAULT(train, checkpoint_every, 0);
  MTRAIN_DEFAULT(train, max_restarts, kDefaultMaxRestarts);
  MTRAIN_DEFAULT(train, eval_interval, 0);
  MTRAIN_DEFAULT(train, eval_iters, kDefaultEvalIters);
}

#undef MTRAIN_DEFAULT

}  // namespace

void ApplyJobSpecDefaults(JobSpec* spec) {
  if (!spec->has_name()) spec->set_name("job");
  ApplyModelDefaults(spec->mutable_model());
  ApplyParallelDefaults(spec->mutable_parallel());
  ApplyTrainDefaults(spec->mutable_train());
  ApplyOptimizerDefaults(spec->train().steps(), spec->mutable_optimizer());
  if (spec->precision() == PRECISION_UNSPECIFIED) spec->set_precision(PRECISION_FP32);
  if (spec->device() == DEVICE_UNSPECIFIED) spec->set_device(DEVICE_AUTO);
  DataSpec* data = spec->mutable_data();
  if (data->format() == DATA_FORMAT_UNSPECIFIED) data->set_format(DATA_FORMAT_TEXT);
  if (data->tokenizer() == TOKENIZER_UNSPECIFIED) data->set_tokenizer(TOKENIZER_BYTE);
  if (!data->has_split()) data->set_split(kDefaultDataSplit);
  // data.path stays unset: the worker resolves "unset" to the corpus shipped with the
  // build, whose location only the worker knows.
}

}  // namespace mtrain
