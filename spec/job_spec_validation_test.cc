#include "spec/job_spec_validation.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "spec/job_spec_arithmetic.h"
#include "spec/job_spec_defaults.h"
#include "spec/job_spec_limits.h"

namespace mtrain {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

// Parses `json` and expects INVALID_ARGUMENT whose message contains every fragment.
void ExpectRejected(const std::string& json, const std::string& field, const std::string& rule) {
  absl::StatusOr<JobSpec> spec = ParseJobSpecJson(json);
  ASSERT_FALSE(spec.ok()) << json;
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(spec.status().message()), AllOf(HasSubstr(field), HasSubstr(rule)))
      << json;
}

TEST(JobSpecValidationTest, EmptySpecTakesDocumentedDefaults) {
  absl::StatusOr<JobSpec> spec = ParseJobSpecJson("{}");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->name(), "job");
  EXPECT_EQ(spec->model().num_layers(), kDefaultNumLayers);
  EXPECT_EQ(spec->model().vocab_size(), 256);
  EXPECT_EQ(spec->parallel().tensor(), 1);
  EXPECT_EQ(spec->parallel().global_batch_size(), 1);
  EXPECT_EQ(spec->parallel().schedule(), SCHEDULE_1F1B);
  EXPECT_EQ(spec->parallel().min_data(), 1);
  EXPECT_FLOAT_EQ(spec->optimizer().lr(), kDefaultLr);
  EXPECT_FLOAT_EQ(spec->optimizer().min_lr(), kDefaultLr / 10);
  EXPECT_EQ(spec->optimizer().decay_steps(), kDefaultSteps);
  EXPECT_FLOAT_EQ(spec->train().dropout(), 0.1f);
  EXPECT_EQ(spec->precision(), PRECISION_FP32);
  EXPECT_EQ(spec->device(), DEVICE_AUTO);
  EXPECT_EQ(spec->data().format(), DATA_FORMAT_TEXT);
  EXPECT_FALSE(spec->data().has_path());
  EXPECT_EQ(spec->data().split(), "1,0,0");
  EXPECT_EQ(spec->train().eval_interval(), 0);
  EXPECT_EQ(spec->train().eval_iters(), kDefaultEvalIters);
}

TEST(JobSpecValidationTest, ExplicitZeroIsKeptNotDefaulted) {
  absl::StatusOr<JobSpec> spec = ParseJobSpecJson(R"({"train": {"dropout": 0}})");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->train().dropout(), 0.0f);
}

TEST(JobSpecValidationTest, DerivedDefaultsFollowExplicitValues) {
  absl::StatusOr<JobSpec> spec = ParseJobSpecJson(
      R"({"parallel": {"data": 2, "micro_batch_size": 3}, "train": {"steps": 40},
          "optimizer": {"lr": 1e-3}})");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->parallel().global_batch_size(), 6);
  EXPECT_EQ(spec->parallel().min_data(), 2);
  EXPECT_EQ(spec->optimizer().decay_steps(), 40);
  EXPECT_FLOAT_EQ(spec->optimizer().min_lr(), 1e-4f);
}

TEST(JobSpecValidationTest, ShortRunsKeepDecayAfterWarmup) {
  absl::StatusOr<JobSpec> spec = ParseJobSpecJson(R"({"train": {"steps": 3}})");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->optimizer().decay_steps(), kDefaultWarmupSteps);
}

TEST(JobSpecValidationTest, FullMegatronStyleSpecIsAccepted) {
  absl::StatusOr<JobSpec> spec = ParseJobSpecJson(R"({
    "name": "gpt-demo",
    "model": {"num_layers": 8, "num_heads": 8, "hidden_size": 256, "seq_length": 128,
              "vocab_size": 256},
    "parallel": {"tensor": 2, "pipeline": 2, "data": 2, "virtual_stages": 2,
                 "micro_batch_size": 2, "global_batch_size": 16,
                 "schedule": "SCHEDULE_INTERLEAVED_1F1B", "zero_stage": 1, "min_data": 1},
    "optimizer": {"lr": 3e-4, "min_lr": 3e-5, "warmup_steps": 5, "decay_steps": 50,
                  "weight_decay": 0.01, "beta1": 0.9, "beta2": 0.95, "eps": 1e-8,
                  "grad_clip": 1.0},
    "precision": "PRECISION_FP32", "device": "DEVICE_CPU",
    "data": {"format": "DATA_FORMAT_TEXT", "tokenizer": "TOKENIZER_BYTE"},
    "train": {"steps": 50, "seed": 7, "dropout": 0.0, "recompute": true,
              "checkpoint_every": 10, "max_restarts": 2}
  })");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(NumMicrobatches(spec->parallel()), 4);
}

TEST(JobSpecValidationTest, NonPositiveSizesNameTheField) {
  ExpectRejected(R"({"model": {"num_layers": 0}})", "model.num_layers", "must be > 0");
  ExpectRejected(R"({"model": {"hidden_size": -4}})", "model.hidden_size", "must be > 0");
  ExpectRejected(R"({"parallel": {"tensor": 0}})", "parallel.tensor", "must be > 0");
  ExpectRejected(R"({"parallel": {"micro_batch_size": 0}})", "parallel.micro_batch_size",
                 "must be > 0");
  ExpectRejected(R"({"train": {"steps": 0}})", "train.steps", "must be > 0");
}

// model.family and the architecture fields (issue 33): GPT-2's values by default, so that
// every spec written before them means what it meant.
TEST(JobSpecValidationTest, ArchitectureDefaultsAreGpt2s) {
  absl::StatusOr<JobSpec> spec =
      ParseJobSpecJson(R"({"model": {"num_heads": 8, "hidden_size": 96}})");
  ASSERT_TRUE(spec.ok()) << spec.status();
  const ModelSpec& m = spec->model();
  EXPECT_EQ(m.family(), MODEL_FAMILY_GPT2);
  EXPECT_EQ(m.num_kv_heads(), 8);
  EXPECT_EQ(m.ffn_hidden_size(), 384);
  EXPECT_EQ(m.normalization(), NORMALIZATION_LAYERNORM);
  EXPECT_FLOAT_EQ(m.norm_epsilon(), 1e-5f);
  EXPECT_EQ(m.activation(), ACTIVATION_GELU_TANH);
  EXPECT_EQ(m.position_embedding(), POSITION_EMBEDDING_LEARNED);
  EXPECT_FALSE(m.has_rope_theta());
  EXPECT_TRUE(m.linear_bias());
  EXPECT_TRUE(m.tie_word_embeddings());
}

TEST(JobSpecValidationTest, LlamaFamilySetsItsOwnDefaults) {
  JobSpec spec;
  spec.mutable_model()->set_family(MODEL_FAMILY_LLAMA);
  spec.mutable_model()->set_hidden_size(4096);
  spec.mutable_model()->set_num_heads(32);
  spec.mutable_model()->set_num_kv_heads(8);
  ApplyJobSpecDefaults(&spec);
  const ModelSpec& m = spec.model();
  EXPECT_EQ(m.ffn_hidden_size(), 11008);  // Llama 2 7B's
  EXPECT_EQ(m.num_kv_heads(), 8);
  EXPECT_EQ(m.normalization(), NORMALIZATION_RMSNORM);
  EXPECT_EQ(m.activation(), ACTIVATION_SWIGLU);
  EXPECT_EQ(m.position_embedding(), POSITION_EMBEDDING_ROTARY);
  EXPECT_FLOAT_EQ(m.rope_theta(), 10000.0f);
  EXPECT_FALSE(m.linear_bias());
  EXPECT_FALSE(m.tie_word_embeddings());
}

TEST(JobSpecValidationTest, ArchitectureFieldsNameTheirRule) {
  ExpectRejected(R"({"model": {"num_heads": 4, "num_kv_heads": 3}})", "model.num_kv_heads: 3",
                 "num_heads % num_kv_heads == 0");
  ExpectRejected(R"({"model": {"num_heads": 8, "num_kv_heads": 2}, "parallel": {"tensor": 4}})",
                 "model.num_kv_heads: 2", "num_kv_heads % tensor == 0");
  ExpectRejected(R"({"model": {"ffn_hidden_size": 510}, "parallel": {"tensor": 4}})",
                 "model.ffn_hidden_size: 510", "ffn_hidden_size % tensor == 0");
  ExpectRejected(R"({"model": {"ffn_hidden_size": 0}})", "model.ffn_hidden_size", "> 0");
  ExpectRejected(R"({"model": {"norm_epsilon": 0}})", "model.norm_epsilon", "norm_epsilon > 0");
  ExpectRejected(R"({"model": {"norm_epsilon": "NaN"}})", "model.norm_epsilon", "no NaN");
  ExpectRejected(R"({"model": {"rope_theta": 500000}})", "model.rope_theta",
                 "rope_theta only with POSITION_EMBEDDING_ROTARY");
  ExpectRejected(R"({"model": {"family": 7}})", "model.family: 7",
                 "one of MODEL_FAMILY_GPT2, MODEL_FAMILY_LLAMA, MODEL_FAMILY_BERT");
  ExpectRejected(R"({"model": {"activation": 9}})", "model.activation: 9", "ACTIVATION_SWIGLU");
}

// A BERT job's data: its sentence dataset and WordPiece vocabulary.
constexpr char kBertData[] = R"("data": {"format": "DATA_FORMAT_MMIDIDX", "path": "/d/s_sentence",
                                         "tokenizer": "TOKENIZER_WORDPIECE",
                                         "vocab_file": "/d/vocab.txt"})";

std::string BertSpec(const std::string& model_fields, const std::string& rest = "") {
  return absl::StrCat(R"({"model": {"family": "MODEL_FAMILY_BERT", "vocab_size": 2048)",
                      model_fields.empty() ? "" : ", ", model_fields, "}, ", kBertData,
                      rest.empty() ? "" : ", ", rest, "}");
}

TEST(JobSpecValidationTest, BertTakesItsDefaultsAndItsPlacement) {
  absl::StatusOr<JobSpec> spec = ParseJobSpecJson(BertSpec(""));
  ASSERT_TRUE(spec.ok()) << spec.status();
  const ModelSpec& m = spec->model();
  EXPECT_EQ(m.layernorm_placement(), LAYERNORM_PLACEMENT_PRE);
  EXPECT_EQ(m.activation(), ACTIVATION_GELU);
  EXPECT_EQ(m.normalization(), NORMALIZATION_LAYERNORM);
  EXPECT_EQ(m.position_embedding(), POSITION_EMBEDDING_LEARNED);
  EXPECT_FLOAT_EQ(m.norm_epsilon(), 1e-12f);
  EXPECT_EQ(m.ffn_hidden_size(), 4 * m.hidden_size());
  EXPECT_TRUE(m.linear_bias());
  EXPECT_TRUE(m.tie_word_embeddings());
  spec = ParseJobSpecJson(BertSpec(R"("layernorm_placement": "LAYERNORM_PLACEMENT_POST")"));
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->model().layernorm_placement(), LAYERNORM_PLACEMENT_POST);
  // Under sequence parallelism too (the CPU engine runs the post layer on its rows).
  spec = ParseJobSpecJson(BertSpec(R"("layernorm_placement": "LAYERNORM_PLACEMENT_POST")",
                                   R"("parallel": {"tensor": 2, "sequence_parallel": true})"));
  EXPECT_TRUE(spec.ok()) << spec.status();
  // A decoder's resolved spec gains no placement (its fingerprint stays as it was).
  spec = ParseJobSpecJson("{}");
  ASSERT_TRUE(spec.ok());
  EXPECT_EQ(spec->model().layernorm_placement(), LAYERNORM_PLACEMENT_UNSPECIFIED);
  // The sentence dataset's vocabulary from a tokenizer.json instead of a vocab.txt.
  spec = ParseJobSpecJson(R"({"model": {"family": "MODEL_FAMILY_BERT"},
      "data": {"format": "DATA_FORMAT_MMIDIDX", "path": "/d/s", "tokenizer": "TOKENIZER_WORDPIECE",
               "tokenizer_json": "/d/tokenizer.json"}})");
  EXPECT_TRUE(spec.ok()) << spec.status();
}

TEST(JobSpecValidationTest, WhatBertCannotRunIsRefusedByField) {
  ExpectRejected(BertSpec(R"("activation": "ACTIVATION_GELU_TANH")"),
                 "model.activation: ACTIVATION_GELU_TANH", "MODEL_FAMILY_BERT trains BERT's");
  ExpectRejected(BertSpec(R"("normalization": "NORMALIZATION_RMSNORM")"),
                 "model.normalization: NORMALIZATION_RMSNORM", "not trained with");
  ExpectRejected(BertSpec(R"("num_heads": 4, "num_kv_heads": 2)"), "model.num_kv_heads: 2",
                 "not trained with MODEL_FAMILY_BERT");
  ExpectRejected(BertSpec(R"("tie_word_embeddings": false)"), "model.tie_word_embeddings",
                 "decoder tied");
  ExpectRejected(BertSpec(R"("seq_length": 6)"), "model.seq_length: 6", "seq_length >= 8");
  ExpectRejected(BertSpec("", R"("device": "DEVICE_CUDA")"),
                 "device: DEVICE_CUDA with model.family MODEL_FAMILY_BERT",
                 "BERT layers have not run on a GPU");
  ExpectRejected(BertSpec("", R"("precision": "PRECISION_BF16")"),
                 "precision: PRECISION_BF16 with model.family MODEL_FAMILY_BERT", "PRECISION_FP32");
  ExpectRejected(BertSpec("", R"("train": {"generate": [{"prompt": "x"}]})"),
                 "train.generate: set with MODEL_FAMILY_BERT", "causal decoder");
  ExpectRejected(R"({"model": {"family": "MODEL_FAMILY_BERT"}})",
                 "data.tokenizer: TOKENIZER_BYTE with MODEL_FAMILY_BERT", "TOKENIZER_WORDPIECE");
  ExpectRejected(R"({"model": {"family": "MODEL_FAMILY_BERT"},
                     "data": {"format": "DATA_FORMAT_MMIDIDX", "path": "/d/s",
                              "tokenizer": "TOKENIZER_WORDPIECE"}})",
                 "data.tokenizer: TOKENIZER_WORDPIECE needs exactly one of data.vocab_file",
                 "BERT's vocab.txt");
  // The decoders have no placement choice and no WordPiece.
  ExpectRejected(R"({"model": {"layernorm_placement": "LAYERNORM_PLACEMENT_POST"}})",
                 "model.layernorm_placement: set with MODEL_FAMILY_GPT2",
                 "only MODEL_FAMILY_BERT has a choice");
  ExpectRejected(R"({"model": {"layernorm_placement": 5}})", "model.layernorm_placement: 5",
                 "LAYERNORM_PLACEMENT_POST");
  ExpectRejected(R"({"data": {"tokenizer": "TOKENIZER_WORDPIECE", "vocab_file": "/d/v.txt"}})",
                 "data.tokenizer: TOKENIZER_WORDPIECE with MODEL_FAMILY_GPT2",
                 "WordPiece is BERT's tokenizer");
}

// RACE fine-tuning: the multiple-choice head on RACE's format, whole questions a microbatch.
constexpr char kRaceData[] = R"("data": {"format": "DATA_FORMAT_RACE", "path": "/d/race.jsonl",
                                         "tokenizer": "TOKENIZER_WORDPIECE",
                                         "vocab_file": "/d/vocab.txt"})";

std::string RaceSpec(const std::string& rest) {
  return absl::StrCat(
      R"({"model": {"family": "MODEL_FAMILY_BERT", "bert_head": "BERT_HEAD_MULTIPLE_CHOICE"}, )",
      kRaceData, rest.empty() ? "" : ", ", rest, "}");
}

TEST(JobSpecValidationTest, TheMultipleChoiceHeadTrainsOnRaceInWholeQuestions) {
  absl::StatusOr<JobSpec> spec = ParseJobSpecJson(RaceSpec(
      R"("parallel": {"micro_batch_size": 8}, "train": {"eval_tasks": [{"task": "race",
          "data": "/d/dev.jsonl"}]})"));
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->model().bert_head(), BERT_HEAD_MULTIPLE_CHOICE);
  // Pretraining is BERT's default head; a decoder's spec gains none.
  spec = ParseJobSpecJson(BertSpec(""));
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->model().bert_head(), BERT_HEAD_PRETRAINING);
  spec = ParseJobSpecJson("{}");
  ASSERT_TRUE(spec.ok());
  EXPECT_EQ(spec->model().bert_head(), BERT_HEAD_UNSPECIFIED);

  ExpectRejected(RaceSpec(R"("parallel": {"micro_batch_size": 6, "global_batch_size": 12})"),
                 "parallel.micro_batch_size: 6 is not a multiple of 4", "whole questions");
  ExpectRejected(BertSpec(R"("bert_head": "BERT_HEAD_MULTIPLE_CHOICE")"),
                 "data.format: DATA_FORMAT_MMIDIDX with model.bert_head BERT_HEAD_MULTIPLE_CHOICE",
                 "trains on DATA_FORMAT_RACE");
  ExpectRejected(absl::StrCat(R"({"model": {"family": "MODEL_FAMILY_BERT"}, )", kRaceData, "}"),
                 "data.format: DATA_FORMAT_RACE with model.bert_head BERT_HEAD_PRETRAINING",
                 "BERT_HEAD_MULTIPLE_CHOICE");
  ExpectRejected(
      R"({"model": {"family": "MODEL_FAMILY_BERT", "bert_head": "BERT_HEAD_MULTIPLE_CHOICE"},
          "data": {"format": "DATA_FORMAT_RACE", "tokenizer": "TOKENIZER_WORDPIECE",
                   "vocab_file": "/d/vocab.txt"}})",
      "data.path: required with DATA_FORMAT_RACE", "RACE-format file");
  ExpectRejected(BertSpec("", R"("train": {"eval_tasks": [{"task": "race", "data": "/d/x"}]})"),
                 "train.eval_tasks: entry 0 is race with model.bert_head BERT_HEAD_PRETRAINING",
                 "multiple-choice head");
  ExpectRejected(BertSpec("", R"("train": {"eval_tasks": [{"task": "cloze", "data": "/d/x"}]})"),
                 "train.eval_tasks: entry 0 is cloze with MODEL_FAMILY_BERT",
                 "score causal decoders");
  ExpectRejected(R"({"model": {"bert_head": 9, "family": "MODEL_FAMILY_BERT"}})",
                 "model.bert_head: 9", "BERT_HEAD_MULTIPLE_CHOICE");
  // The decoders have neither the head nor RACE.
  ExpectRejected(R"({"model": {"bert_head": "BERT_HEAD_MULTIPLE_CHOICE"}})",
                 "model.bert_head: set with MODEL_FAMILY_GPT2", "only MODEL_FAMILY_BERT");
  ExpectRejected(R"({"data": {"format": "DATA_FORMAT_RACE", "path": "/d/race.jsonl"}})",
                 "data.format: DATA_FORMAT_RACE with MODEL_FAMILY_GPT2", "multiple-choice head");
  ExpectRejected(R"({"train": {"eval_tasks": [{"task": "race", "data": "/d/x"}]}})",
                 "train.eval_tasks: entry 0 is race with MODEL_FAMILY_GPT2",
                 "BERT's multiple-choice head");
}

TEST(JobSpecValidationTest, ZeroBubbleSchedulesRunOnTheCpuInFp32) {
  EXPECT_TRUE(
      ParseJobSpecJson(R"({"parallel": {"pipeline": 2, "schedule": "SCHEDULE_ZB_H1"}})").ok());
  ExpectRejected(R"({"parallel": {"pipeline": 2, "schedule": "SCHEDULE_ZB_H1"},
                     "device": "DEVICE_CUDA"})",
                 "parallel.schedule: SCHEDULE_ZB_H1 with device DEVICE_CUDA", "CPU engine");
  ExpectRejected(R"({"parallel": {"pipeline": 2, "schedule": "SCHEDULE_ZB_H1"},
                     "precision": "PRECISION_BF16"})",
                 "parallel.schedule: SCHEDULE_ZB_H1 with device DEVICE_CUDA or a 16-bit",
                 "PRECISION_FP32");
  absl::StatusOr<JobSpec> v = ParseJobSpecJson(
      R"({"model": {"num_layers": 8},
          "parallel": {"pipeline": 2, "virtual_stages": 2, "schedule": "SCHEDULE_ZB_V"}})");
  EXPECT_TRUE(v.ok()) << v.status();
  ExpectRejected(R"({"parallel": {"pipeline": 2, "schedule": "SCHEDULE_ZB_V"}})",
                 "parallel.virtual_stages: 1 with SCHEDULE_ZB_V", "virtual_stages == 2");
  ExpectRejected(R"({"model": {"num_layers": 8},
                     "parallel": {"pipeline": 1, "virtual_stages": 2,
                                  "schedule": "SCHEDULE_ZB_V"}})",
                 "parallel.pipeline: 1 is too small for SCHEDULE_ZB_V", "pipeline >= 2");
  ExpectRejected(R"({"model": {"num_layers": 6},
                     "parallel": {"pipeline": 2, "virtual_stages": 2,
                                  "schedule": "SCHEDULE_ZB_V"}})",
                 "model.num_layers: 6 is not divisible", "pipeline * virtual_stages");
  ExpectRejected(R"({"model": {"num_layers": 8},
                     "parallel": {"pipeline": 2, "virtual_stages": 2,
                                  "schedule": "SCHEDULE_ZB_V"}, "device": "DEVICE_CUDA"})",
                 "parallel.schedule: SCHEDULE_ZB_V with device DEVICE_CUDA", "CPU engine");
}

TEST(JobSpecValidationTest, WhatTheEnginesDoNotTrainYetIsRefusedByField) {
  ExpectRejected(R"({"model": {"normalization": "NORMALIZATION_RMSNORM"}})",
                 "model.normalization: NORMALIZATION_RMSNORM",
                 "model.family MODEL_FAMILY_LLAMA the one with RMSNorm");
  ExpectRejected(R"({"model": {"activation": "ACTIVATION_SWIGLU"}})", "model.activation",
                 "not trained by the engines with MODEL_FAMILY_GPT2 yet");
  ExpectRejected(R"({"model": {"position_embedding": "POSITION_EMBEDDING_ROTARY"}})",
                 "model.position_embedding", "not trained by the engines with MODEL_FAMILY_GPT2");
  ExpectRejected(R"({"model": {"num_heads": 4, "num_kv_heads": 2}})", "model.num_kv_heads: 2",
                 "not trained with MODEL_FAMILY_GPT2");
  ExpectRejected(R"({"model": {"linear_bias": false}})", "model.linear_bias",
                 "not trained with MODEL_FAMILY_GPT2");
  ExpectRejected(R"({"model": {"tie_word_embeddings": false}})", "model.tie_word_embeddings",
                 "not trained with MODEL_FAMILY_GPT2");
  // A Llama-family spec with GPT-2's layer parts: the parameter table has no LayerNorm bias
  // or learned positions for it.
  ExpectRejected(R"({"model": {"family": "MODEL_FAMILY_LLAMA",
                               "normalization": "NORMALIZATION_LAYERNORM"}})",
                 "model.normalization: NORMALIZATION_LAYERNORM",
                 "MODEL_FAMILY_LLAMA trains with RMSNorm, SwiGLU and rotary positions");
  ExpectRejected(R"({"model": {"family": "MODEL_FAMILY_LLAMA", "activation": "ACTIVATION_GELU"}})",
                 "model.activation: ACTIVATION_GELU", "MODEL_FAMILY_LLAMA trains with");
  ExpectRejected(R"({"model": {"family": "MODEL_FAMILY_LLAMA"}, "device": "DEVICE_CUDA"})",
                 "device: DEVICE_CUDA with model.family MODEL_FAMILY_LLAMA",
                 "no RMSNorm, rotary, SwiGLU or grouped-query attention kernels yet");
  ExpectRejected(R"({"model": {"family": "MODEL_FAMILY_LLAMA"}, "precision": "PRECISION_BF16"})",
                 "precision: PRECISION_BF16 with model.family MODEL_FAMILY_LLAMA",
                 "in PRECISION_FP32, so far");
  ExpectRejected(R"({"model": {"family": "MODEL_FAMILY_LLAMA", "num_heads": 6,
                               "hidden_size": 18}})",
                 "model.hidden_size: head size 3", "rotary positions need an even head size");
  // What they do train: GPT-2 at any FFN width and epsilon; Llama-style decoders with
  // grouped-query heads, biases or not, tied or untied.
  absl::StatusOr<JobSpec> spec =
      ParseJobSpecJson(R"({"model": {"ffn_hidden_size": 300, "norm_epsilon": 1e-6}})");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->model().ffn_hidden_size(), 300);
  for (const char* json :
       {R"({"model": {"family": "MODEL_FAMILY_LLAMA"}})",
        R"({"model": {"family": "MODEL_FAMILY_LLAMA", "num_heads": 4, "num_kv_heads": 1,
                      "linear_bias": true, "tie_word_embeddings": true}})"}) {
    absl::StatusOr<JobSpec> llama = ParseJobSpecJson(json);
    EXPECT_TRUE(llama.ok()) << json << ": " << llama.status();
  }
}

TEST(JobSpecValidationTest, HeadsMustDivideByTensor) {
  ExpectRejected(R"({"model": {"num_heads": 6, "hidden_size": 192},
                     "parallel": {"tensor": 4}})",
                 "model.num_heads", "num_heads % tensor == 0");
}

TEST(JobSpecValidationTest, LayersMustDivideByPipelineTimesVirtualStages) {
  ExpectRejected(R"({"model": {"num_layers": 6}, "parallel": {"pipeline": 4}})", "model.num_layers",
                 "num_layers % (pipeline * virtual_stages) == 0");
  ExpectRejected(R"({"model": {"num_layers": 6},
                     "parallel": {"pipeline": 2, "virtual_stages": 2,
                                  "global_batch_size": 2,
                                  "schedule": "SCHEDULE_INTERLEAVED_1F1B"}})",
                 "model.num_layers", "num_layers % (pipeline * virtual_stages) == 0");
}

TEST(JobSpecValidationTest, InterleavingNeedsMicrobatchesDivisibleByPipeline) {
  ExpectRejected(R"({"model": {"num_layers": 8},
                     "parallel": {"pipeline": 2, "virtual_stages": 2,
                                  "global_batch_size": 3,
                                  "schedule": "SCHEDULE_INTERLEAVED_1F1B"}})",
                 "parallel.global_batch_size", "microbatches % pipeline == 0");
  // Without interleaving the same batch is fine.
  EXPECT_TRUE(ParseJobSpecJson(R"({"model": {"num_layers": 8},
                                   "parallel": {"pipeline": 2, "global_batch_size": 3}})")
                  .ok());
}

TEST(JobSpecValidationTest, InterleavingNeedsTwoStages) {
  ExpectRejected(R"({"model": {"num_layers": 4},
                     "parallel": {"pipeline": 1, "virtual_stages": 2,
                                  "schedule": "SCHEDULE_INTERLEAVED_1F1B"}})",
                 "parallel.pipeline", "interleaving needs pipeline >= 2");
}

TEST(JobSpecValidationTest, VirtualStagesNeedInterleavedSchedule) {
  ExpectRejected(R"({"model": {"num_layers": 8},
                     "parallel": {"pipeline": 2, "virtual_stages": 2,
                                  "global_batch_size": 2}})",
                 "parallel.virtual_stages", "SCHEDULE_INTERLEAVED_1F1B");
}

TEST(JobSpecValidationTest, GlobalBatchMustDivideByMicroBatchTimesData) {
  ExpectRejected(R"({"parallel": {"data": 2, "micro_batch_size": 2,
                                  "global_batch_size": 6}})",
                 "parallel.global_batch_size",
                 "global_batch_size % (micro_batch_size * data) == 0");
}

TEST(JobSpecValidationTest, MinDataMustBeWithinDataAndKeepTheBatch) {
  ExpectRejected(R"({"parallel": {"data": 2, "min_data": 3}})", "parallel.min_data",
                 "must be in [1, parallel.data = 2]");
  // Accepted before: 12 divides by 4 and by 3, but no shrunk grid the planner builds
  // has 3 replicas.
  ExpectRejected(R"({"parallel": {"data": 4, "min_data": 3, "global_batch_size": 12}})",
                 "parallel.min_data: 3", "data % min_data == 0");
  EXPECT_TRUE(
      ParseJobSpecJson(R"({"parallel": {"data": 4, "min_data": 2, "global_batch_size": 8}})").ok());
}

TEST(JobSpecValidationTest, GrowingOnJoinNeedsAJobTheCoordinatorMayReplan) {
  ExpectRejected(R"({"parallel": {"replan": true, "replan_on_join_gain": 1.5}})",
                 "parallel.replan_on_join_gain: must be in [0, 1) (got 1.5)", "");
  ExpectRejected(R"({"parallel": {"replan": true, "replan_on_join_gain": -0.1}})",
                 "parallel.replan_on_join_gain: must be in [0, 1)", "");
  ExpectRejected(R"({"parallel": {"replan_on_join_gain": 0.2}})",
                 "parallel.replan_on_join_gain: set, but neither parallel.auto nor "
                 "parallel.replan is",
                 "only a job the coordinator may re-plan can grow");
  EXPECT_TRUE(
      ParseJobSpecJson(R"({"parallel": {"replan": true, "replan_on_join_gain": 0.2}})").ok());
}

TEST(JobSpecValidationTest, BpeTokenizersNameTheirFiles) {
  EXPECT_TRUE(ParseJobSpecJson(R"({"data": {"tokenizer": "TOKENIZER_GPT2_BPE",
      "vocab_file": "/d/vocab.json", "merge_file": "/d/merges.txt"},
      "model": {"vocab_size": 50257}})")
                  .ok());
  EXPECT_TRUE(ParseJobSpecJson(R"({"data": {"tokenizer": "TOKENIZER_HF_JSON",
      "tokenizer_json": "/d/tokenizer.json"}, "model": {"vocab_size": 8192}})")
                  .ok());
  ExpectRejected(R"({"data": {"tokenizer": "TOKENIZER_GPT2_BPE", "vocab_file": "/d/v.json"}})",
                 "data.merge_file: required with TOKENIZER_GPT2_BPE", "");
  ExpectRejected(R"({"data": {"tokenizer": "TOKENIZER_HF_JSON"}})",
                 "data.tokenizer_json: required with TOKENIZER_HF_JSON", "");
  ExpectRejected(R"({"data": {"tokenizer_json": "/d/t.json"}})",
                 "data.tokenizer_json: set, but data.tokenizer is TOKENIZER_BYTE",
                 "only TOKENIZER_HF_JSON and TOKENIZER_WORDPIECE read it");
  ExpectRejected(R"({"data": {"tokenizer": "TOKENIZER_HF_JSON", "tokenizer_json": "a\u0001b"}})",
                 "data.tokenizer_json", "");
}

TEST(JobSpecValidationTest, SplitsBlendsAndValidationAreChecked) {
  EXPECT_TRUE(ParseJobSpecJson(R"({"data": {"split": "969,30,1"},
      "train": {"eval_interval": 50, "eval_iters": 4}})")
                  .ok());
  EXPECT_TRUE(ParseJobSpecJson(R"({"data": {"format": "DATA_FORMAT_MMIDIDX", "paths": [
      {"path": "/d/a", "weight": 0.3}, {"path": "/d/b", "weight": 0.7}]}})")
                  .ok());
  ExpectRejected(R"({"data": {"split": "1,x"}})", "data.split: \"1,x\" share 2",
                 "one to three non-negative numbers");
  ExpectRejected(R"({"data": {"split": "0,0"}})", "data.split", "sums to 0");
  ExpectRejected(R"({"train": {"eval_interval": 10}})",
                 "train.eval_interval: 10 asks for a validation loss but data.split (\"1,0,0\")",
                 "set data.split with a validation share");
  ExpectRejected(R"({"train": {"eval_interval": -1}})", "train.eval_interval: must be >= 0", "");
  ExpectRejected(R"({"train": {"eval_iters": 0}})", "train.eval_iters: must be > 0", "");
  ExpectRejected(R"({"train": {"eval_iters": 2000000}})", "train.eval_iters: 2000000",
                 "<= 1000000");
  ExpectRejected(R"({"data": {"format": "DATA_FORMAT_MMIDIDX", "paths": [
      {"path": "/d/a", "weight": 0.3}, {"path": "/d/b", "weight": -0.7}]}})",
                 "data.paths: entry 1 (\"/d/b\") has weight -0.7",
                 "every weight is a finite "
                 "number > 0");
  ExpectRejected(R"({"data": {"format": "DATA_FORMAT_MMIDIDX", "paths": [{"path": "/d/a"}]}})",
                 "data.paths: entry 0 (\"/d/a\") has weight 0", "> 0");
  ExpectRejected(R"({"data": {"format": "DATA_FORMAT_MMIDIDX", "paths": [{"weight": 1}]}})",
                 "data.paths: entry 0 has no path", "");
  ExpectRejected(R"({"data": {"paths": [{"path": "/d/a", "weight": 1}]}})",
                 "data.paths: a blend needs data.format DATA_FORMAT_MMIDIDX (got DATA_FORMAT_TEXT)",
                 "");
  ExpectRejected(R"({"data": {"format": "DATA_FORMAT_MMIDIDX", "path": "/d/a",
      "paths": [{"path": "/d/b", "weight": 1}]}})",
                 "data.paths: set together with data.path", "not both");
  ExpectRejected(R"({"data": {"format": "DATA_FORMAT_MMIDIDX"}})", "data.path: must name",
                 "or data.paths a blend");
}

TEST(JobSpecValidationTest, SequenceParallelismAndRecomputeGranularity) {
  EXPECT_TRUE(ParseJobSpecJson(R"({"parallel": {"tensor": 2, "scatter_gather": false},
      "train": {"recompute_granularity": "selective"}})")
                  .ok());
  EXPECT_TRUE(ParseJobSpecJson(R"({"model": {"num_layers": 4}, "train": {
      "recompute_granularity": "full", "recompute_method": "block", "recompute_num_layers": 2}})")
                  .ok());
  EXPECT_TRUE(ParseJobSpecJson(R"({"parallel": {"tensor": 2, "sequence_parallel": true}})").ok());
  ExpectRejected(R"({"parallel": {"sequence_parallel": true}})",
                 "parallel.sequence_parallel: needs parallel.tensor > 1", "split over");
  ExpectRejected(R"({"model": {"seq_length": 30, "num_heads": 4}, "parallel": {"tensor": 4,
      "sequence_parallel": true}})",
                 "parallel.sequence_parallel: model.seq_length 30 is not divisible", "");
  ExpectRejected(R"({"train": {"recompute_granularity": "attention"}})",
                 "train.recompute_granularity: \"attention\"", "none, selective or full");
  ExpectRejected(R"({"train": {"recompute": true, "recompute_granularity": "selective"}})",
                 "train.recompute_granularity: \"selective\" with train.recompute true", "");
  ExpectRejected(R"({"train": {"recompute_granularity": "full", "recompute_method": "every"}})",
                 "train.recompute_method: \"every\"", "uniform or block");
  ExpectRejected(R"({"train": {"recompute_granularity": "full", "recompute_num_layers": 9}})",
                 "train.recompute_num_layers: 9", "1 to model.num_layers");
  ExpectRejected(R"({"train": {"recompute_granularity": "selective", "recompute_method":
      "block"}})",
                 "train.recompute_method: set under", "only \"full\"");
  ExpectRejected(R"({"train": {"recompute_num_layers": 1}})", "train.recompute_method: set with",
                 "");
}

TEST(JobSpecValidationTest, GenerationPromptsTakeSamplingWithinRange) {
  EXPECT_TRUE(ParseJobSpecJson(R"({"train": {"checkpoint_every": 10, "generate": [
      {"prompt": "ROMEO:"}, {"prompt": "JULIET:", "max_new_tokens": 20, "temperature": 0.8,
       "top_k": 40, "top_p": 0.9, "seed": 3}]}})")
                  .ok());
  EXPECT_TRUE(ParseJobSpecJson(R"({"train": {"evaluate_only": true, "init_from": "job-1 step 6",
      "generate": [{"prompt": "ROMEO:"}]}})")
                  .ok());
  ExpectRejected(R"({"train": {"generate": [{"prompt": ""}]}})",
                 "train.generate: entry 0 has an empty prompt", "continues a prompt");
  ExpectRejected(R"({"train": {"generate": [{"prompt": "a", "max_new_tokens": 0}]}})",
                 "train.generate: entry 0 has max_new_tokens 0", "1 to");
  ExpectRejected(R"({"train": {"generate": [{"prompt": "a", "temperature": -1}]}})",
                 "train.generate: entry 0 has temperature -1", ">= 0");
  ExpectRejected(R"({"train": {"generate": [{"prompt": "a", "top_k": -2}]}})",
                 "train.generate: entry 0 has top_k -2", ">= 0");
  ExpectRejected(R"({"train": {"generate": [{"prompt": "a"}, {"prompt": "b", "top_p": 0}]}})",
                 "train.generate: entry 1 has top_p 0", "in (0, 1]");
  ExpectRejected(absl::StrCat(R"({"train": {"generate": [{"prompt": ")",
                              std::string(kMaxPromptBytes + 1, 'x'), R"("}]}})"),
                 "train.generate: entry 0's prompt has 65537 bytes", "at most 65536");
}

TEST(JobSpecValidationTest, EvalTasksNameATaskAndAFile) {
  EXPECT_TRUE(ParseJobSpecJson(R"({"train": {"checkpoint_every": 10, "eval_tasks": [
      {"task": "perplexity", "data": "/d/wiki.txt", "overlapping_eval": 32},
      {"task": "cloze", "data": "/d/lambada.jsonl"}]}})")
                  .ok());
  ExpectRejected(R"({"train": {"evaluate_only": true}})", "train.evaluate_only: needs",
                 "evaluates given weights");
  EXPECT_TRUE(ParseJobSpecJson(R"({"train": {"evaluate_only": true, "init_from": "job-1 step 6",
      "eval_tasks": [{"task": "cloze", "data": "/d/l.jsonl"}]}})")
                  .ok());
  ExpectRejected(R"({"train": {"eval_tasks": [{"task": "bleu", "data": "/d/x"}]}})",
                 "train.eval_tasks: entry 0 has task \"bleu\"",
                 "perplexity, cloze, choice or race");
  ExpectRejected(R"({"train": {"eval_tasks": [{"task": "cloze"}]}})",
                 "train.eval_tasks: entry 0 has no data", "");
  ExpectRejected(R"({"train": {"eval_tasks": [{"task": "cloze", "data": "/d/x",
                  "overlapping_eval": 8}]}})",
                 "train.eval_tasks: entry 0 sets overlapping_eval", "perplexity only");
  ExpectRejected(R"({"train": {"eval_tasks": [{"task": "perplexity", "data": "/d/x",
                  "overlapping_eval": -1}]}})",
                 "train.eval_tasks: entry 0 has overlapping_eval -1", ">= 0");
}

TEST(JobSpecValidationTest, HiddenMustDivideByHeads) {
  ExpectRejected(R"({"model": {"num_heads": 3, "hidden_size": 128}})", "model.hidden_size",
                 "hidden_size % num_heads == 0");
}

TEST(JobSpecValidationTest, OptimizerRanges) {
  ExpectRejected(R"({"optimizer": {"lr": 0}})", "optimizer.lr", "must be > 0");
  ExpectRejected(R"({"optimizer": {"lr": 1e-3, "min_lr": 1e-2}})", "optimizer.min_lr",
                 "must be in [0, optimizer.lr");
  ExpectRejected(R"({"optimizer": {"beta2": 1.0}})", "optimizer.beta2", "[0, 1)");
  ExpectRejected(R"({"optimizer": {"warmup_steps": 20, "decay_steps": 10}})",
                 "optimizer.decay_steps", "decay_steps >= warmup_steps");
}

// fp16 needs a GPU; bf16 on a CPU is the worker's to check (its processor's features).
TEST(JobSpecValidationTest, Fp16NeedsAGpuAndBf16IsLeftToTheCpuWorker) {
  ExpectRejected(R"({"precision": "PRECISION_FP16", "device": "DEVICE_CPU"})", "precision",
                 "PRECISION_FP32, or PRECISION_BF16 on processors with AVX512_BF16 or AMX");
  EXPECT_TRUE(ParseJobSpecJson(R"({"precision": "PRECISION_BF16", "device": "DEVICE_CPU"})").ok());
}

TEST(JobSpecValidationTest, ByteTokenizerNeedsVocabOf256) {
  ExpectRejected(R"({"model": {"vocab_size": 100}})", "model.vocab_size", "vocab_size >= 256");
}

TEST(JobSpecValidationTest, NameCharactersAreRestricted) {
  ExpectRejected(R"({"name": "my job"})", "name", "only A-Z a-z 0-9");
  ExpectRejected(R"({"name": ""})", "name", "must have 1 to 128 characters");
}

TEST(JobSpecValidationTest, EveryViolationIsReported) {
  absl::StatusOr<JobSpec> spec =
      ParseJobSpecJson(R"({"model": {"num_layers": 0}, "train": {"steps": -1}})");
  ASSERT_FALSE(spec.ok());
  EXPECT_THAT(std::string(spec.status().message()),
              AllOf(HasSubstr("model.num_layers"), HasSubstr("train.steps")));
}

TEST(JobSpecValidationTest, UnknownFieldsAreRejected) {
  ExpectRejected(R"({"model": {"num_layer": 4}})", "job spec JSON", "num_layer");
  ExpectRejected(R"({"bogus": 1})", "job spec JSON", "bogus");
}

TEST(JobSpecValidationTest, MalformedJsonIsRejected) {
  ExpectRejected(R"({"model": {"num_layers": 4})", "job spec JSON", "");
  ExpectRejected(R"({"model": {"num_layers": "four"}})", "job spec JSON", "");
  ExpectRejected(R"({"parallel": {"schedule": "SCHEDULE_ZIGZAG"}})", "job spec JSON", "");
}

TEST(JobSpecValidationTest, MissingFileIsNotFound) {
  absl::StatusOr<JobSpec> spec = LoadJobSpecFile("/nonexistent/job.json");
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kNotFound);
}

TEST(JobSpecValidationTest, SyntaxErrorsSayWhereTheyAre) {
  const absl::StatusOr<JobSpec> spec =
      ParseJobSpecJson("{\n  \"model\": {\"num_layers\": 2}\n  \"parallel\": {}\n}\n");
  ASSERT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(spec.status().message(),
            "job spec JSON: line 3, column 3: Expected , or } after key:value pair.");
  // Not a syntax error: protobuf's message, which names the field.
  const absl::StatusOr<JobSpec> typed = ParseJobSpecJson(R"({"model": {"num_layers": "x"}})");
  ASSERT_EQ(typed.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(typed.status().message().find("model.num_layers"), std::string::npos) << typed.status();
}

TEST(JobSpecValidationTest, ABadMicroBatchIsNotReportedTwice) {
  const absl::StatusOr<JobSpec> spec = ParseJobSpecJson(R"({"parallel": {"micro_batch_size": 0}})");
  ASSERT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(spec.status().message(), "parallel.micro_batch_size: must be > 0 (got 0)");
}

// Each of these aborted a rank (std::bad_alloc) or the coordinator (SIGABRT building a
// schedule of 2^31 microbatches, or a 16 MB Assignment) before the bounds existed.
TEST(JobSpecValidationTest, SpecsThatCrashedARankOrTheCoordinatorAreRefusedByName) {
  ExpectRejected(R"({"model": {"hidden_size": 65536}})", "model.hidden_size: 65536",
                 "model.hidden_size <= 32768");
  ExpectRejected(R"({"model": {"seq_length": 1e6}})", "model.seq_length: 1000000",
                 "model.seq_length <= 65536");
  ExpectRejected(R"({"model": {"num_layers": 1e9}})", "model.num_layers: 1000000000",
                 "model.num_layers <= 1024");
  ExpectRejected(R"({"model": {"vocab_size": 1e8}})", "model.vocab_size: 100000000",
                 "model.vocab_size <= 1048576");
  ExpectRejected(R"({"parallel": {"micro_batch_size": 1073741824}})",
                 "parallel.micro_batch_size: 1073741824", "parallel.micro_batch_size <= 8192");
  for (const char* pipeline : {"1", "2"}) {
    SCOPED_TRACE(absl::StrCat("pipeline ", pipeline));
    const std::string parallel =
        absl::StrCat(R"({"model": {"num_layers": 4}, "parallel": {"pipeline": )", pipeline,
                     R"(, "global_batch_size": )");
    ExpectRejected(parallel + "2147483647}}", "parallel.global_batch_size: 2147483647",
                   "parallel.global_batch_size <= 1048576");
    ExpectRejected(parallel + "1e9}}", "parallel.global_batch_size: 1000000000",
                   "parallel.global_batch_size <= 1048576");
    ExpectRejected(parallel + "1e6}}",
                   "parallel.global_batch_size: 1000000 gives 1000000 microbatches",
                   "microbatches * virtual_stages <= 8192");
  }
}

TEST(JobSpecValidationTest, AnOutOfBoundsSizeIsReportedOnce) {
  // The global batch derived from a refused micro batch is not a second complaint.
  const absl::StatusOr<JobSpec> spec =
      ParseJobSpecJson(R"({"parallel": {"micro_batch_size": 1073741824, "data": 4}})");
  ASSERT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(spec.status().message(),
            "parallel.micro_batch_size: 1073741824 exceeds the limit of 8192 [rule: "
            "parallel.micro_batch_size <= 8192]");
}

TEST(JobSpecValidationTest, ShrinkingToMinDataCountsTowardTheMicrobatchBound) {
  // 8192 microbatches per replica at data 2; 16384 after shrinking to one replica.
  ExpectRejected(R"({"parallel": {"data": 2, "min_data": 1, "global_batch_size": 16384}})",
                 "parallel.global_batch_size", "(micro_batch_size * min_data)");
  EXPECT_TRUE(ParseJobSpecJson(R"({"parallel": {"data": 2, "global_batch_size": 16384}})").ok());
}

TEST(JobSpecValidationTest, ThePlanAsAWholeIsBounded) {
  // 4096 ranks x 2048 microbatches each: 8M scheduled microbatches for the coordinator.
  ExpectRejected(R"({"parallel": {"data": 4096, "global_batch_size": 8388608}})",
                 "parallel.global_batch_size", "parallel.global_batch_size <= 1048576");
  ExpectRejected(R"({"model": {"num_layers": 8},
                     "parallel": {"pipeline": 8, "data": 128, "global_batch_size": 1048576}})",
                 "parallel.global_batch_size",
                 "tensor * pipeline * data * microbatches * virtual_stages <= 262144");
  EXPECT_TRUE(ParseJobSpecJson(R"({"parallel": {"data": 512, "global_batch_size": 262144}})").ok());
}

TEST(JobSpecValidationTest, EveryNumericFieldHasAnUpperBound) {
  ExpectRejected(R"({"model": {"num_heads": 2048, "hidden_size": 2048}})", "model.num_heads: 2048",
                 "<= 1024");
  ExpectRejected(R"({"parallel": {"tensor": 8192}})", "parallel.tensor: 8192", "<= 4096");
  ExpectRejected(R"({"parallel": {"pipeline": 5000}})", "parallel.pipeline: 5000", "<= 4096");
  ExpectRejected(R"({"parallel": {"data": 4097}})", "parallel.data: 4097", "<= 4096");
  ExpectRejected(R"({"parallel": {"tensor": 64, "data": 128}, "model": {"num_heads": 64,
                     "hidden_size": 256}})",
                 "parallel: tensor * pipeline * data = 8192", "world size <= 4096");
  ExpectRejected(R"({"parallel": {"virtual_stages": 2000}})", "parallel.virtual_stages: 2000",
                 "<= 1024");
  ExpectRejected(R"({"train": {"steps": 2147483647}})", "train.steps: 2147483647", "<= 100000000");
  ExpectRejected(R"({"train": {"checkpoint_every": 200000000}})", "train.checkpoint_every",
                 "<= 100000000");
  ExpectRejected(R"({"train": {"max_restarts": 100000}})", "train.max_restarts: 100000", "<= 1000");
  ExpectRejected(R"({"optimizer": {"warmup_steps": 2000000000}})", "optimizer.warmup_steps",
                 "<= 100000000");
  ExpectRejected(R"({"optimizer": {"decay_steps": 2000000000}})", "optimizer.decay_steps",
                 "<= 100000000");
  ExpectRejected(R"({"optimizer": {"lr": 1000}})", "optimizer.lr: 1000", "<= 10");
  ExpectRejected(R"({"optimizer": {"weight_decay": 1e30}})", "optimizer.weight_decay", "<= 10");
  ExpectRejected(R"({"optimizer": {"eps": 5}})", "optimizer.eps: 5", "<= 1");
  ExpectRejected(R"({"optimizer": {"grad_clip": 1e30}})", "optimizer.grad_clip", "<= 1e+06");
}

TEST(JobSpecValidationTest, UnknownEnumNumbersAreRefusedByName) {
  ExpectRejected(R"({"device": 99})", "device: 99 is not a known value",
                 "one of DEVICE_AUTO, DEVICE_CPU, DEVICE_CUDA");
  ExpectRejected(R"({"device": -1})", "device: -1", "DEVICE_CPU");
  ExpectRejected(R"({"device": -5})", "device: -5", "DEVICE_CPU");
  ExpectRejected(R"({"precision": 99})", "precision: 99 is not a known value",
                 "one of PRECISION_FP32, PRECISION_BF16, PRECISION_FP16");
  ExpectRejected(R"({"parallel": {"schedule": 7}})", "parallel.schedule: 7",
                 "SCHEDULE_INTERLEAVED_1F1B");
  ExpectRejected(R"({"data": {"format": 99}})", "data.format: 99", "DATA_FORMAT_MMIDIDX");
  ExpectRejected(R"({"data": {"tokenizer": 99}})", "data.tokenizer: 99", "TOKENIZER_BYTE");
  // A precision with no name is not reported with a blank one by the CPU rule either.
  const absl::StatusOr<JobSpec> spec =
      ParseJobSpecJson(R"({"precision": 99, "device": "DEVICE_CPU"})");
  EXPECT_EQ(spec.status().message(),
            "precision: 99 is not a known value [rule: one of PRECISION_FP32, PRECISION_BF16, "
            "PRECISION_FP16]");
}

TEST(JobSpecValidationTest, NonFiniteFloatsAreRefused) {
  for (const char* value : {"\"Infinity\"", "\"-Infinity\"", "\"NaN\""}) {
    SCOPED_TRACE(value);
    for (const char* field :
         {"lr", "min_lr", "weight_decay", "beta1", "beta2", "eps", "grad_clip"}) {
      ExpectRejected(absl::StrCat(R"({"optimizer": {")", field, "\": ", value, "}}"),
                     absl::StrCat("optimizer.", field, ": must be a finite number"),
                     "no NaN or Infinity");
    }
    ExpectRejected(absl::StrCat(R"({"train": {"dropout": )", value, "}}"),
                   "train.dropout: must be a finite number", "no NaN or Infinity");
  }
  // An infinite lr is one complaint, not a second one about the min_lr derived from it.
  const absl::StatusOr<JobSpec> spec = ParseJobSpecJson(R"({"optimizer": {"lr": "Infinity"}})");
  EXPECT_EQ(spec.status().message(),
            "optimizer.lr: must be a finite number (got inf) [rule: no NaN or Infinity]");
}

TEST(JobSpecValidationTest, TextThatIsNotJsonIsRefusedEvenWhereProtobufTakesIt) {
  ExpectRejected("{'name': 'single-quoted'}", "job spec JSON: line 1, column 2",
                 "not valid JSON [rule: RFC 8259]");
  ExpectRejected(std::string(kMaxJobSpecJsonBytes + 1, ' '), "job spec JSON", "at most");
}

TEST(JobSpecValidationTest, PathsAreBoundedUtf8AndFreeOfControlCharacters) {
  JobSpec spec;
  spec.mutable_data()->set_path(std::string(5000, 'a'));
  absl::StatusOr<JobSpec> resolved = ResolveJobSpec(spec);
  EXPECT_THAT(std::string(resolved.status().message()),
              AllOf(HasSubstr("data.path: 5000 bytes"), HasSubstr("at most 4096 bytes")));

  spec.mutable_data()->set_path("corpus\xff.txt");
  resolved = ResolveJobSpec(spec);
  EXPECT_THAT(std::string(resolved.status().message()),
              AllOf(HasSubstr("data.path: byte 6 is not valid UTF-8"), HasSubstr("UTF-8")));

  spec.clear_data();
  spec.mutable_train()->set_init_from(std::string("a\0b", 3));
  resolved = ResolveJobSpec(spec);
  EXPECT_THAT(std::string(resolved.status().message()),
              AllOf(HasSubstr("train.init_from: control character \\x00 at byte 1"),
                    HasSubstr("no control characters")));

  EXPECT_TRUE(ParseJobSpecJson(R"({"data": {"path": "/data/caf\u00e9.txt"}})").ok());
}

TEST(JobSpecValidationTest, AbsurdMemoryIsRefusedEvenWithinEveryFieldBound) {
  // Every size within its bound; 13 trillion parameters on one rank.
  ExpectRejected(R"({"model": {"num_layers": 1024, "hidden_size": 32768, "num_heads": 256}})",
                 "model and parallel: one rank needs an estimated",
                 "per-rank memory estimate <= 1.0 TiB");
  // GPipe with 8192 microbatches of 8192 tokens in flight on one stage.
  ExpectRejected(R"({"model": {"seq_length": 8192}, "parallel": {"schedule": "SCHEDULE_GPIPE",
                     "global_batch_size": 8192}})",
                 "activations", "per-rank memory estimate");
  // The same model split 64 ways fits.
  EXPECT_TRUE(ParseJobSpecJson(R"({"model": {"num_layers": 1024, "hidden_size": 32768,
                                   "num_heads": 256},
                                   "parallel": {"tensor": 8, "pipeline": 128},
                                   "device": "DEVICE_CUDA", "train": {"recompute": true}})")
                  .ok());
}

}  // namespace
}  // namespace mtrain
