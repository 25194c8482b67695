#include "spec/job_spec_validation.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <initializer_list>
#include <optional>
#include <sstream>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/utf8.h"
#include "google/protobuf/util/json_util.h"
#include "model/family_defaults.h"
#include "plan/rank_memory_estimate.h"
#include "spec/data_split.h"
#include "spec/job_spec_arithmetic.h"
#include "spec/job_spec_defaults.h"
#include "spec/job_spec_limits.h"
#include "spec/json_syntax.h"

namespace mtrain {
namespace {

constexpr int kByteTokenizerVocab = 256;

// Collects violations; each is "field: what is wrong (the value) [rule: ...]". Every check
// is written so that no value, however extreme, overflows: products are formed in 64 bits
// from operands the bounds have already limited.
class Violations {
 public:
  void Add(std::string message) { messages_.push_back(std::move(message)); }
  bool empty() const { return messages_.empty(); }
  size_t size() const { return messages_.size(); }

  void RequirePositive(absl::string_view field, long long value) {
    if (value <= 0) Add(absl::StrCat(field, ": must be > 0 (got ", value, ")"));
  }
  void RequireNonNegative(absl::string_view field, double value) {
    if (value < 0) Add(absl::StrCat(field, ": must be >= 0 (got ", value, ")"));
  }
  void RequireFraction(absl::string_view field, double value) {
    if (!(value >= 0 && value < 1)) {
      Add(absl::StrCat(field, ": must be in [0, 1) (got ", value, ")"));
    }
  }
  // The upper bound of job_spec_limits.h; true if it holds.
  bool RequireAtMost(absl::string_view field, long long value, long long limit) {
    if (value <= limit) return true;
    Add(absl::StrCat(field, ": ", value, " exceeds the limit of ", limit, " [rule: ", field,
                     " <= ", limit, "]"));
    return false;
  }
  // Positive and within its bound; true if both hold.
  bool RequireSize(absl::string_view field, long long value, long long limit) {
    RequirePositive(field, value);
    return RequireAtMost(field, value, limit) && value > 0;
  }
  // Protobuf JSON accepts "NaN", "Infinity" and "-Infinity" for floats; no field means
  // anything by them (eps = Infinity "trained" without learning). True if finite.
  bool RequireFinite(absl::string_view field, float value) {
    if (std::isfinite(value)) return true;
    Add(absl::StrCat(field, ": must be a finite number (got ", value,
                     ") [rule: no NaN or "
                     "Infinity]"));
    return false;
  }
  void RequireFloatAtMost(absl::string_view field, float value, float limit) {
    if (value > limit) {
      Add(absl::StrCat(field, ": ", value, " exceeds the limit of ", limit, " [rule: ", field,
                       " <= ", limit, "]"));
    }
  }

  absl::Status ToStatus() const {
    if (messages_.empty()) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrJoin(messages_, "; "));
  }

 private:
  std::vector<std::string> messages_;
};

bool IsNameCharacter(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
         c == '_' || c == '-';
}

void ValidateName(const std::string& name, Violations* v) {
  if (name.empty() || name.size() > static_cast<size_t>(kMaxNameLength)) {
    v->Add(absl::StrCat("name: must have 1 to ", kMaxNameLength, " characters (got ", name.size(),
                        ")"));
    return;
  }
  for (char c : name) {
    if (!IsNameCharacter(c)) {
      v->Add(absl::StrCat("name: character '", absl::CEscape(std::string(1, c)),
                          "' is not allowed [rule: only A-Z a-z 0-9 . _ -]"));
      return;
    }
  }
}

// A file path resolved on a worker: bounded, UTF-8 (proto3 strings must be; a spec built in
// code with other bytes would not even parse on the worker), no control characters (NUL
// would cut the path short in the C library; a newline would forge log lines).
void ValidatePath(absl::string_view field, const std::string& path, Violations* v) {
  if (path.size() > static_cast<size_t>(kMaxPathLength)) {
    v->Add(absl::StrCat(field, ": ", path.size(), " bytes exceed the limit of ", kMaxPathLength,
                        " [rule: a path has at most ", kMaxPathLength, " bytes]"));
    return;
  }
  if (const std::optional<size_t> at = FindInvalidUtf8(path)) {
    v->Add(absl::StrCat(field, ": byte ", *at, " is not valid UTF-8 [rule: paths are UTF-8]"));
    return;
  }
  for (size_t i = 0; i < path.size(); ++i) {
    if (static_cast<unsigned char>(path[i]) < 0x20 || path[i] == 0x7f) {
      v->Add(absl::StrCat(field, ": control character \\x",
                          absl::Hex(static_cast<unsigned char>(path[i]), absl::kZeroPad2),
                          " at byte ", i, " [rule: no control characters in paths]"));
      return;
    }
  }
}

// Protobuf keeps unknown enum numbers (proto3 enums are open; JSON and the wire accept
// any number), and every switch downstream would read them as some default: refuse them.
template <typename Enum>
bool ValidateEnum(absl::string_view field, int value, bool (*is_valid)(int),
                  const std::string& (*name)(Enum), std::initializer_list<Enum> allowed,
                  Violations* v) {
  if (is_valid(value) && value != 0) return true;
  std::vector<std::string> names;
  for (Enum e : allowed) names.push_back(name(e));
  v->Add(absl::StrCat(field, ": ", value, " is not a known value [rule: one of ",
                      absl::StrJoin(names, ", "), "]"));
  return false;
}

struct ValidEnums {
  bool precision = false;
  bool device = false;
  bool schedule = false;
  bool format = false;
  bool tokenizer = false;
  bool architecture = false;  // model.family, normalization, activation, position_embedding
};

ValidEnums ValidateEnums(const JobSpec& spec, Violations* v) {
  ValidEnums ok;
  ok.precision =
      ValidateEnum<Precision>("precision", spec.precision(), Precision_IsValid, Precision_Name,
                              {PRECISION_FP32, PRECISION_BF16, PRECISION_FP16}, v);
  ok.device = ValidateEnum<Device>("device", spec.device(), Device_IsValid, Device_Name,
                                   {DEVICE_AUTO, DEVICE_CPU, DEVICE_CUDA}, v);
  ok.schedule = ValidateEnum<Schedule>(
      "parallel.schedule", spec.parallel().schedule(), Schedule_IsValid, Schedule_Name,
      {SCHEDULE_GPIPE, SCHEDULE_1F1B, SCHEDULE_INTERLEAVED_1F1B, SCHEDULE_ZB_H1, SCHEDULE_ZB_V}, v);
  const Schedule schedule = spec.parallel().schedule();
  const bool fp32 = spec.precision() == PRECISION_FP32 || spec.precision() == PRECISION_UNSPECIFIED;
  const bool zero_bubble = schedule == SCHEDULE_ZB_H1 || schedule == SCHEDULE_ZB_V;
  if (ok.schedule && zero_bubble && (spec.device() == DEVICE_CUDA || !fp32)) {
    v->Add(absl::StrCat(
        "parallel.schedule: ", Schedule_Name(schedule),
        " with device DEVICE_CUDA or a 16-bit precision [rule: the split backward runs on the "
        "CPU engine, in PRECISION_FP32, so far]"));
  }
  ok.format = ValidateEnum<DataFormat>(
      "data.format", spec.data().format(), DataFormat_IsValid, DataFormat_Name,
      {DATA_FORMAT_TEXT, DATA_FORMAT_MMIDIDX, DATA_FORMAT_RACE}, v);
  ok.tokenizer = ValidateEnum<Tokenizer>(
      "data.tokenizer", spec.data().tokenizer(), Tokenizer_IsValid, Tokenizer_Name,
      {TOKENIZER_BYTE, TOKENIZER_GPT2_BPE, TOKENIZER_HF_JSON, TOKENIZER_WORDPIECE}, v);
  const ModelSpec& m = spec.model();
  ok.architecture =
      ValidateEnum<ModelFamily>("model.family", m.family(), ModelFamily_IsValid, ModelFamily_Name,
                                {MODEL_FAMILY_GPT2, MODEL_FAMILY_LLAMA, MODEL_FAMILY_BERT}, v);
  ok.architecture &= ValidateEnum<Normalization>(
      "model.normalization", m.normalization(), Normalization_IsValid, Normalization_Name,
      {NORMALIZATION_LAYERNORM, NORMALIZATION_RMSNORM}, v);
  ok.architecture &= ValidateEnum<Activation>(
      "model.activation", m.activation(), Activation_IsValid, Activation_Name,
      {ACTIVATION_GELU_TANH, ACTIVATION_GELU, ACTIVATION_SWIGLU}, v);
  ok.architecture &= ValidateEnum<PositionEmbedding>(
      "model.position_embedding", m.position_embedding(), PositionEmbedding_IsValid,
      PositionEmbedding_Name, {POSITION_EMBEDDING_LEARNED, POSITION_EMBEDDING_ROTARY}, v);
  if (m.layernorm_placement() != LAYERNORM_PLACEMENT_UNSPECIFIED) {
    ok.architecture &= ValidateEnum<LayerNormPlacement>(
        "model.layernorm_placement", m.layernorm_placement(), LayerNormPlacement_IsValid,
        LayerNormPlacement_Name, {LAYERNORM_PLACEMENT_PRE, LAYERNORM_PLACEMENT_POST}, v);
  }
  if (m.bert_head() != BERT_HEAD_UNSPECIFIED) {
    ok.architecture &=
        ValidateEnum<BertHead>("model.bert_head", m.bert_head(), BertHead_IsValid, BertHead_Name,
                               {BERT_HEAD_PRETRAINING, BERT_HEAD_MULTIPLE_CHOICE}, v);
  }
  return ok;
}

// Whether the model's sizes are all positive and within bounds.
bool ValidateModel(const JobSpec& spec, Violations* v) {
  const ModelSpec& m = spec.model();
  const size_t before = v->size();
  v->RequireSize("model.num_layers", m.num_layers(), kMaxNumLayers);
  v->RequireSize("model.num_heads", m.num_heads(), kMaxNumHeads);
  v->RequireSize("model.hidden_size", m.hidden_size(), kMaxHiddenSize);
  v->RequireSize("model.seq_length", m.seq_length(), kMaxSeqLength);
  v->RequireSize("model.vocab_size", m.vocab_size(), kMaxVocabSize);
  if (m.num_heads() > 0 && m.hidden_size() > 0 && m.hidden_size() % m.num_heads() != 0) {
    v->Add(absl::StrCat("model.hidden_size: ", m.hidden_size(),
                        " is not divisible by model.num_heads (", m.num_heads(),
                        ") [rule: hidden_size % num_heads == 0]"));
  }
  // Derived from num_heads unless set: checked when num_heads is valid (else its error
  // would repeat).
  if (m.num_heads() > 0 && m.num_heads() <= kMaxNumHeads &&
      v->RequireSize("model.num_kv_heads", m.num_kv_heads(), kMaxNumHeads) &&
      m.num_heads() % m.num_kv_heads() != 0) {
    v->Add(absl::StrCat("model.num_kv_heads: ", m.num_kv_heads(),
                        " does not divide model.num_heads (", m.num_heads(),
                        ") [rule: num_heads % num_kv_heads == 0]"));
  }
  // Unset only when it could not be derived (hidden_size is wrong and reported already).
  if (m.has_ffn_hidden_size()) {
    v->RequireSize("model.ffn_hidden_size", m.ffn_hidden_size(), kMaxFfnHiddenSize);
  }
  if (v->RequireFinite("model.norm_epsilon", m.norm_epsilon())) {
    if (m.norm_epsilon() <= 0) {
      v->Add(absl::StrCat("model.norm_epsilon: ", m.norm_epsilon(), " [rule: norm_epsilon > 0]"));
    }
    v->RequireFloatAtMost("model.norm_epsilon", m.norm_epsilon(), kMaxNormEpsilon);
  }
  if (m.has_rope_theta()) {
    if (m.position_embedding() != POSITION_EMBEDDING_ROTARY) {
      v->Add(absl::StrCat("model.rope_theta: set, but model.position_embedding is ",
                          PositionEmbedding_Name(m.position_embedding()),
                          " [rule: rope_theta only with POSITION_EMBEDDING_ROTARY]"));
    } else if (v->RequireFinite("model.rope_theta", m.rope_theta())) {
      if (m.rope_theta() <= 1) {
        v->Add(absl::StrCat("model.rope_theta: ", m.rope_theta(), " [rule: rope_theta > 1]"));
      }
      v->RequireFloatAtMost("model.rope_theta", m.rope_theta(), kMaxRopeTheta);
    }
  }
  if (spec.data().tokenizer() == TOKENIZER_BYTE && m.vocab_size() > 0 &&
      m.vocab_size() < kByteTokenizerVocab) {
    v->Add(absl::StrCat("model.vocab_size: ", m.vocab_size(),
                        " is smaller than the byte tokenizer's 256 tokens [rule: "
                        "vocab_size >= 256 with TOKENIZER_BYTE]"));
  }
  return v->size() == before;
}

// Whether the grid and batch sizes are valid (the memory estimate needs them).
bool ValidateParallel(const JobSpec& spec, bool schedule_known, Violations* v) {
  const ParallelSpec& p = spec.parallel();
  const ModelSpec& m = spec.model();
  const size_t before = v->size();
  bool sizes_ok = v->RequireSize("parallel.tensor", p.tensor(), kMaxWorldSize);
  sizes_ok &= v->RequireSize("parallel.pipeline", p.pipeline(), kMaxWorldSize);
  sizes_ok &= v->RequireSize("parallel.data", p.data(), kMaxWorldSize);
  sizes_ok &= v->RequireSize("parallel.virtual_stages", p.virtual_stages(), kMaxVirtualStages);
  sizes_ok &= v->RequireSize("parallel.micro_batch_size", p.micro_batch_size(), kMaxMicroBatchSize);
  // Unset only when it could not be derived (the micro batch or data degree is wrong and
  // is reported already).
  if (p.has_global_batch_size()) {
    sizes_ok &=
        v->RequireSize("parallel.global_batch_size", p.global_batch_size(), kMaxGlobalBatchSize);
  } else {
    sizes_ok = false;
  }
  if (!sizes_ok) return false;  // The rules below would only repeat the same problem.
  // Every operand is now at most 2^20: the products below fit 64 bits easily.
  const int64_t world = int64_t{p.tensor()} * p.pipeline() * p.data();
  if (world > kMaxWorldSize) {
    v->Add(absl::StrCat("parallel: tensor * pipeline * data = ", world, " exceeds ", kMaxWorldSize,
                        " ranks [rule: world size <= ", kMaxWorldSize, "]"));
  }
  if (m.num_heads() > 0 && m.num_heads() % p.tensor() != 0) {
    v->Add(absl::StrCat("model.num_heads: ", m.num_heads(),
                        " is not divisible by parallel.tensor (", p.tensor(),
                        ") [rule: num_heads % tensor == 0]"));
  }
  if (m.num_kv_heads() > 0 && m.num_kv_heads() % p.tensor() != 0) {
    v->Add(absl::StrCat("model.num_kv_heads: ", m.num_kv_heads(),
                        " is not divisible by parallel.tensor (", p.tensor(),
                        ") [rule: num_kv_heads % tensor == 0: each tensor rank holds whole "
                        "key-value heads]"));
  }
  if (m.ffn_hidden_size() > 0 && m.ffn_hidden_size() % p.tensor() != 0) {
    v->Add(absl::StrCat("model.ffn_hidden_size: ", m.ffn_hidden_size(),
                        " is not divisible by parallel.tensor (", p.tensor(),
                        ") [rule: ffn_hidden_size % tensor == 0]"));
  }
  const int64_t chunks = int64_t{p.pipeline()} * p.virtual_stages();
  if (m.num_layers() > 0 && m.num_layers() % chunks != 0) {
    v->Add(absl::StrCat("model.num_layers: ", m.num_layers(),
                        " is not divisible by parallel.pipeline * parallel.virtual_stages (",
                        chunks, ") [rule: num_layers % (pipeline * virtual_stages) == 0]"));
  }
  const bool interleaved = p.schedule() == SCHEDULE_INTERLEAVED_1F1B;
  const bool v_shape = p.schedule() == SCHEDULE_ZB_V;
  if (schedule_known && !interleaved && !v_shape && p.virtual_stages() > 1) {
    v->Add(absl::StrCat("parallel.virtual_stages: ", p.virtual_stages(),
                        " needs parallel.schedule SCHEDULE_INTERLEAVED_1F1B or SCHEDULE_ZB_V "
                        "[rule: virtual_stages > 1 only with interleaving or the V]"));
  }
  if (v_shape && p.virtual_stages() != 2) {
    v->Add(absl::StrCat("parallel.virtual_stages: ", p.virtual_stages(),
                        " with SCHEDULE_ZB_V [rule: the V places exactly 2 chunks per stage: "
                        "virtual_stages == 2]"));
  }
  if ((interleaved || v_shape) && p.pipeline() < 2) {
    // Nothing to interleave with, and no bubble to shrink.
    v->Add(absl::StrCat(
        "parallel.pipeline: ", p.pipeline(), " is too small for ", Schedule_Name(p.schedule()),
        " [rule: ", interleaved ? "interleaving" : "the V", " needs pipeline >= 2]"));
  }
  const int64_t per_microbatch_step = int64_t{p.micro_batch_size()} * p.data();
  bool batch_ok = true;
  if (p.global_batch_size() % per_microbatch_step != 0) {
    batch_ok = false;
    v->Add(absl::StrCat("parallel.global_batch_size: ", p.global_batch_size(),
                        " is not divisible by parallel.micro_batch_size * parallel.data (",
                        per_microbatch_step,
                        ") [rule: global_batch_size % (micro_batch_size * data) == 0]"));
  } else if (interleaved) {
    const int64_t microbatches = MicrobatchesPerReplica(p, p.data());
    if (microbatches % p.pipeline() != 0) {
      v->Add(absl::StrCat("parallel.global_batch_size: gives ", microbatches,
                          " microbatches per replica, not divisible by parallel.pipeline (",
                          p.pipeline(),
                          ") [rule: with SCHEDULE_INTERLEAVED_1F1B, microbatches % "
                          "pipeline == 0]"));
    }
  }
  if (!(p.replan_on_join_gain() >= 0 && p.replan_on_join_gain() < 1)) {
    v->Add(absl::StrCat("parallel.replan_on_join_gain: must be in [0, 1) (got ",
                        p.replan_on_join_gain(), ")"));
  } else if (p.replan_on_join_gain() > 0 && !p.auto_() && !p.replan()) {
    v->Add(
        "parallel.replan_on_join_gain: set, but neither parallel.auto nor parallel.replan "
        "is [rule: only a job the coordinator may re-plan can grow onto new workers]");
  }
  if (p.zero_stage() != 0 && p.zero_stage() != 1) {
    v->Add(absl::StrCat("parallel.zero_stage: must be 0 or 1 (got ", p.zero_stage(), ")"));
  }
  bool min_data_ok = false;
  if (p.min_data() < 1 || p.min_data() > p.data()) {
    v->Add(absl::StrCat("parallel.min_data: must be in [1, parallel.data = ", p.data(), "] (got ",
                        p.min_data(), ")"));
  } else if (p.data() % p.min_data() != 0) {
    // Shrinking keeps the global batch over whole microbatches of the surviving replicas;
    // a degree that does not divide data leaves no grid the planner would pick from.
    v->Add(absl::StrCat("parallel.min_data: ", p.min_data(), " does not divide parallel.data (",
                        p.data(), ") [rule: data % min_data == 0]"));
  } else if (p.global_batch_size() % (int64_t{p.micro_batch_size()} * p.min_data()) != 0) {
    v->Add(absl::StrCat("parallel.min_data: global_batch_size ", p.global_batch_size(),
                        " is not divisible by micro_batch_size * min_data (",
                        int64_t{p.micro_batch_size()} * p.min_data(),
                        ") [rule: the global batch must survive shrinking to min_data]"));
  } else {
    min_data_ok = true;
  }
  if (batch_ok) {
    // Each rank's schedule lists every (microbatch, chunk); a job shrunk to min_data runs
    // the most microbatches per replica.
    const int smallest_data = min_data_ok ? p.min_data() : p.data();
    const int64_t microbatches = MicrobatchesPerReplica(p, smallest_data);
    const int64_t scheduled = microbatches * p.virtual_stages();
    if (scheduled > kMaxScheduledMicrobatches) {
      v->Add(absl::StrCat("parallel.global_batch_size: ", p.global_batch_size(), " gives ",
                          microbatches,
                          " microbatches per replica (global_batch_size / (micro_batch_size * ",
                          min_data_ok && p.min_data() != p.data() ? "min_data" : "data", ")) x ",
                          p.virtual_stages(), " virtual stages = ", scheduled, ", more than ",
                          kMaxScheduledMicrobatches, " [rule: microbatches * virtual_stages <= ",
                          kMaxScheduledMicrobatches, " (raise micro_batch_size or data)]"));
    } else if (world <= kMaxWorldSize && world * scheduled > kMaxPlanScheduledMicrobatches) {
      v->Add(absl::StrCat("parallel.global_batch_size: ", p.global_batch_size(), " gives ",
                          scheduled, " scheduled microbatches per rank on ", world, " ranks = ",
                          world * scheduled, ", more than ", kMaxPlanScheduledMicrobatches,
                          " [rule: tensor * pipeline * data * microbatches * virtual_stages <= ",
                          kMaxPlanScheduledMicrobatches, "]"));
    }
  }
  return v->size() == before;
}

void ValidateOptimizer(const OptimizerSpec& o, Violations* v) {
  if (v->RequireFinite("optimizer.lr", o.lr())) {
    if (!(o.lr() > 0)) v->Add(absl::StrCat("optimizer.lr: must be > 0 (got ", o.lr(), ")"));
    v->RequireFloatAtMost("optimizer.lr", o.lr(), kMaxLearningRate);
    // Unset when lr was invalid (job_spec_defaults derives it from a valid lr only).
    if (o.has_min_lr() && v->RequireFinite("optimizer.min_lr", o.min_lr()) &&
        !(o.min_lr() >= 0 && o.min_lr() <= o.lr())) {
      v->Add(absl::StrCat("optimizer.min_lr: must be in [0, optimizer.lr = ", o.lr(), "] (got ",
                          o.min_lr(), ")"));
    }
  }
  v->RequireNonNegative("optimizer.warmup_steps", o.warmup_steps());
  v->RequireAtMost("optimizer.warmup_steps", o.warmup_steps(), kMaxSteps);
  // Unset when train.steps or warmup_steps was invalid (reported there).
  if (o.has_decay_steps()) {
    if (o.decay_steps() < o.warmup_steps()) {
      v->Add(absl::StrCat("optimizer.decay_steps: ", o.decay_steps(),
                          " is less than optimizer.warmup_steps (", o.warmup_steps(),
                          ") [rule: decay_steps >= warmup_steps]"));
    }
    v->RequireAtMost("optimizer.decay_steps", o.decay_steps(), kMaxSteps);
  }
  if (v->RequireFinite("optimizer.weight_decay", o.weight_decay())) {
    v->RequireNonNegative("optimizer.weight_decay", o.weight_decay());
    v->RequireFloatAtMost("optimizer.weight_decay", o.weight_decay(), kMaxWeightDecay);
  }
  if (v->RequireFinite("optimizer.beta1", o.beta1())) {
    v->RequireFraction("optimizer.beta1", o.beta1());
  }
  if (v->RequireFinite("optimizer.beta2", o.beta2())) {
    v->RequireFraction("optimizer.beta2", o.beta2());
  }
  if (v->RequireFinite("optimizer.eps", o.eps())) {
    if (!(o.eps() > 0)) v->Add(absl::StrCat("optimizer.eps: must be > 0 (got ", o.eps(), ")"));
    v->RequireFloatAtMost("optimizer.eps", o.eps(), kMaxEps);
  }
  if (v->RequireFinite("optimizer.grad_clip", o.grad_clip())) {
    v->RequireNonNegative("optimizer.grad_clip", o.grad_clip());
    v->RequireFloatAtMost("optimizer.grad_clip", o.grad_clip(), kMaxGradClip);
  }
}

// train.generate: what sampling accepts (worker/evaluation/generation.h); the prompt's
// length in tokens is checked where the tokenizer is, on the worker.
void ValidateGenerationPrompts(const TrainSpec& t, Violations* v) {
  v->RequireAtMost("train.generate", t.generate_size(), kMaxGenerationPrompts);
  for (int i = 0; i < t.generate_size() && i < kMaxGenerationPrompts; ++i) {
    const GenerationPrompt& g = t.generate(i);
    const std::string entry = absl::StrCat("train.generate: entry ", i);
    if (g.prompt().empty()) {
      v->Add(absl::StrCat(entry, " has an empty prompt [rule: generation continues a prompt]"));
    }
    if (g.prompt().size() > kMaxPromptBytes) {
      v->Add(absl::StrCat(entry, "'s prompt has ", g.prompt().size(), " bytes [rule: at most ",
                          kMaxPromptBytes, "]"));
    }
    if (g.has_max_new_tokens() && (g.max_new_tokens() < 1 || g.max_new_tokens() > kMaxNewTokens)) {
      v->Add(absl::StrCat(entry, " has max_new_tokens ", g.max_new_tokens(), " [rule: 1 to ",
                          kMaxNewTokens, "]"));
    }
    if (!(g.temperature() >= 0) || !std::isfinite(g.temperature())) {
      v->Add(absl::StrCat(entry, " has temperature ", g.temperature(),
                          " [rule: finite and >= 0, where 0 is greedy]"));
    }
    if (g.top_k() < 0) {
      v->Add(absl::StrCat(entry, " has top_k ", g.top_k(), " [rule: >= 0, where 0 is all]"));
    }
    if (g.has_top_p() && !(g.top_p() > 0 && g.top_p() <= 1)) {
      v->Add(absl::StrCat(entry, " has top_p ", g.top_p(), " [rule: in (0, 1]]"));
    }
  }
}

void ValidateTrain(const TrainSpec& t, Violations* v) {
  v->RequireSize("train.steps", t.steps(), kMaxSteps);
  if (v->RequireFinite("train.dropout", t.dropout())) {
    v->RequireFraction("train.dropout", t.dropout());
  }
  v->RequireNonNegative("train.checkpoint_every", t.checkpoint_every());
  v->RequireAtMost("train.checkpoint_every", t.checkpoint_every(), kMaxSteps);
  v->RequireNonNegative("train.max_restarts", t.max_restarts());
  v->RequireAtMost("train.max_restarts", t.max_restarts(), kMaxRestarts);
  if (t.has_init_from()) ValidatePath("train.init_from", t.init_from(), v);
  v->RequireNonNegative("train.eval_interval", t.eval_interval());
  v->RequireAtMost("train.eval_interval", t.eval_interval(), kMaxSteps);
  // Unset only in specs stored before the field existed (defaults fill it): they never
  // evaluate, and must still pass when the coordinator re-validates them at start.
  if (t.has_eval_iters()) v->RequireSize("train.eval_iters", t.eval_iters(), kMaxEvalIters);
  v->RequireAtMost("train.eval_tasks", t.eval_tasks_size(), kMaxEvalTasks);
  if (t.evaluate_only() &&
      ((t.eval_tasks_size() == 0 && t.generate_size() == 0) || t.init_from().empty())) {
    v->Add(
        "train.evaluate_only: needs train.eval_tasks or train.generate, and initial weights "
        "(train.init_from) [rule: an evaluation job evaluates given weights]");
  }
  ValidateGenerationPrompts(t, v);
  for (int i = 0; i < t.eval_tasks_size() && i < kMaxEvalTasks; ++i) {
    const EvalTask& task = t.eval_tasks(i);
    if (task.task() != "perplexity" && task.task() != "cloze" && task.task() != "choice" &&
        task.task() != "race") {
      v->Add(absl::StrCat("train.eval_tasks: entry ", i, " has task \"", task.task(),
                          "\" [rule: perplexity, cloze, choice or race]"));
    }
    if (task.data().empty()) {
      v->Add(absl::StrCat("train.eval_tasks: entry ", i,
                          " has no data [rule: every task names its file]"));
    } else {
      ValidatePath("train.eval_tasks", task.data(), v);
    }
    if (task.overlapping_eval() < 0) {
      v->Add(absl::StrCat("train.eval_tasks: entry ", i, " has overlapping_eval ",
                          task.overlapping_eval(),
                          " [rule: >= 0, where 0 means model.seq_length]"));
    }
    if (task.task() != "perplexity" &&
        (task.overlapping_eval() != 0 || task.wikitext_detokenize())) {
      v->Add(absl::StrCat("train.eval_tasks: entry ", i,
                          " sets overlapping_eval or wikitext_detokenize [rule: perplexity "
                          "only]"));
    }
  }
}

// data.split, data.paths, and what train.eval_interval needs of them.
// parallel.sequence_parallel and train.recompute_*: what the engines can split and
// recompute.
void ValidateMemoryTechniques(const JobSpec& spec, Violations* v) {
  const ParallelSpec& p = spec.parallel();
  const TrainSpec& t = spec.train();
  if (p.sequence_parallel() && !p.auto_()) {
    if (p.tensor() < 2) {
      v->Add(absl::StrCat("parallel.sequence_parallel: needs parallel.tensor > 1 (got ", p.tensor(),
                          ") [rule: the sequence is split over the tensor group]"));
    } else if (spec.model().seq_length() % p.tensor() != 0) {
      v->Add(absl::StrCat("parallel.sequence_parallel: model.seq_length ",
                          spec.model().seq_length(), " is not divisible by parallel.tensor ",
                          p.tensor(),
                          " [rule: each tensor rank holds seq_length / tensor positions]"));
    }
  }
  if (!t.has_recompute_granularity()) {
    if (t.has_recompute_method() || t.has_recompute_num_layers()) {
      v->Add(
          "train.recompute_method: set with train.recompute_num_layers only under "
          "train.recompute_granularity \"full\" [rule: they choose which layers full "
          "recomputation covers]");
    }
    return;
  }
  const std::string& granularity = t.recompute_granularity();
  if (granularity != "none" && granularity != "selective" && granularity != "full") {
    v->Add(absl::StrCat("train.recompute_granularity: \"", granularity,
                        "\" [rule: none, selective or full]"));
    return;
  }
  if (t.recompute() && granularity != "full") {
    v->Add(absl::StrCat("train.recompute_granularity: \"", granularity,
                        "\" with train.recompute true [rule: train.recompute true means "
                        "\"full\"; set one of them]"));
  }
  if (granularity != "full") {
    if (t.has_recompute_method() || t.has_recompute_num_layers()) {
      v->Add(absl::StrCat("train.recompute_method: set under train.recompute_granularity \"",
                          granularity,
                          "\" [rule: only \"full\" takes a method and "
                          "num_layers]"));
    }
    return;
  }
  if (t.has_recompute_method() && t.recompute_method() != "uniform" &&
      t.recompute_method() != "block") {
    v->Add(absl::StrCat("train.recompute_method: \"", t.recompute_method(),
                        "\" [rule: uniform or block]"));
  }
  if (t.has_recompute_num_layers() &&
      (t.recompute_num_layers() < 1 || t.recompute_num_layers() > spec.model().num_layers())) {
    v->Add(absl::StrCat("train.recompute_num_layers: ", t.recompute_num_layers(),
                        " [rule: 1 to model.num_layers (", spec.model().num_layers(), ")]"));
  }
}

void ValidateDataSources(const JobSpec& spec, const ValidEnums& enums, Violations* v) {
  const DataSpec& data = spec.data();
  const std::string split_text = data.has_split() ? data.split() : kDefaultDataSplit;
  const absl::StatusOr<DataSplit> split = ParseDataSplit(split_text);
  if (!split.ok()) v->Add(std::string(split.status().message()));
  if (split.ok() && spec.train().eval_interval() > 0 && split->share(SplitKind::kValidation) <= 0) {
    v->Add(absl::StrCat("train.eval_interval: ", spec.train().eval_interval(),
                        " asks for a validation loss but data.split (\"", split_text,
                        "\") gives validation no share [rule: set data.split with a "
                        "validation share, e.g. \"969,30,1\"]"));
  }
  if (data.paths().empty()) return;
  if (enums.format && data.format() != DATA_FORMAT_MMIDIDX) {
    v->Add(absl::StrCat("data.paths: a blend needs data.format DATA_FORMAT_MMIDIDX (got ",
                        DataFormat_Name(data.format()), ") [rule: preprocess makes them]"));
  }
  if (data.has_path()) {
    v->Add(
        "data.paths: set together with data.path [rule: one dataset (data.path) or a "
        "blend (data.paths), not both]");
  }
  if (!v->RequireAtMost("data.paths", data.paths_size(), kMaxBlendDatasets)) return;
  for (int i = 0; i < data.paths_size(); ++i) {
    const WeightedDataPath& entry = data.paths(i);
    if (entry.path().empty()) {
      v->Add(absl::StrCat("data.paths: entry ", i,
                          " has no path [rule: every entry names a "
                          ".bin/.idx prefix]"));
    } else {
      ValidatePath("data.paths", entry.path(), v);
    }
    if (!(std::isfinite(entry.weight()) && entry.weight() > 0)) {
      v->Add(absl::StrCat("data.paths: entry ", i, " (\"", entry.path(), "\") has weight ",
                          entry.weight(), " [rule: every weight is a finite number > 0]"));
    }
  }
}

void ValidatePrecisionAndDevice(const JobSpec& spec, const ValidEnums& enums, Violations* v) {
  // bf16 on CPUs is the worker's to check: only it knows its processor (AVX512_BF16 or AMX).
  if (enums.device && enums.precision && spec.device() == DEVICE_CPU &&
      spec.precision() == PRECISION_FP16) {
    v->Add(absl::StrCat("precision: ", Precision_Name(spec.precision()),
                        " needs a GPU but device is DEVICE_CPU [rule: CPU ranks train in "
                        "PRECISION_FP32, or PRECISION_BF16 on processors with AVX512_BF16 or "
                        "AMX]"));
  }
  if (spec.data().has_path()) ValidatePath("data.path", spec.data().path(), v);
  const DataSpec& data = spec.data();
  if (data.has_vocab_file()) ValidatePath("data.vocab_file", data.vocab_file(), v);
  if (data.has_merge_file()) ValidatePath("data.merge_file", data.merge_file(), v);
  if (data.has_tokenizer_json()) ValidatePath("data.tokenizer_json", data.tokenizer_json(), v);
  if (enums.tokenizer) {
    const bool gpt2 = data.tokenizer() == TOKENIZER_GPT2_BPE;
    const bool hf = data.tokenizer() == TOKENIZER_HF_JSON;
    const bool wordpiece = data.tokenizer() == TOKENIZER_WORDPIECE;
    const std::pair<const char*, bool> gpt2_files[] = {{"data.vocab_file", data.has_vocab_file()},
                                                       {"data.merge_file", data.has_merge_file()}};
    for (const auto& [field, set] : gpt2_files) {
      // WordPiece reads a vocab.txt (or a tokenizer.json), checked below.
      if (wordpiece && std::string(field) == "data.vocab_file") continue;
      if (gpt2 && !set) {
        v->Add(absl::StrCat(field,
                            ": required with TOKENIZER_GPT2_BPE [rule: GPT-2's vocab.json "
                            "and merges.txt]"));
      }
      if (!gpt2 && set) {
        v->Add(absl::StrCat(field, ": set, but data.tokenizer is ",
                            Tokenizer_Name(data.tokenizer()),
                            " [rule: only TOKENIZER_GPT2_BPE and TOKENIZER_WORDPIECE read ",
                            "data.vocab_file, only TOKENIZER_GPT2_BPE data.merge_file]"));
      }
    }
    if (hf && !data.has_tokenizer_json()) {
      v->Add("data.tokenizer_json: required with TOKENIZER_HF_JSON");
    }
    if (!hf && !wordpiece && data.has_tokenizer_json()) {
      v->Add(absl::StrCat("data.tokenizer_json: set, but data.tokenizer is ",
                          Tokenizer_Name(data.tokenizer()),
                          " [rule: only TOKENIZER_HF_JSON and TOKENIZER_WORDPIECE read it]"));
    }
    if (wordpiece && data.has_vocab_file() == data.has_tokenizer_json()) {
      v->Add(
          "data.tokenizer: TOKENIZER_WORDPIECE needs exactly one of data.vocab_file and "
          "data.tokenizer_json [rule: BERT's vocab.txt in data.vocab_file, or a WordPiece "
          "tokenizer.json in data.tokenizer_json]");
    }
  }
  if (enums.format && spec.data().format() == DATA_FORMAT_MMIDIDX && spec.data().path().empty() &&
      spec.data().paths().empty()) {
    v->Add(
        "data.path: must name the .bin/.idx prefix, or data.paths a blend [rule: "
        "DATA_FORMAT_MMIDIDX has no shipped default]");
  }
}

// Only for a spec whose sizes passed: the estimate is then exact arithmetic. The job may
// shrink to min_data replicas: fewer ZeRO-1 shards and more microbatches per replica, so
// that grid needs the most.
void ValidateMemory(const JobSpec& spec, Violations* v) {
  // parallel.auto: the layout given is a placeholder; the planner checks each layout it
  // considers against the workers' memory instead.
  if (spec.parallel().auto_()) return;
  JobSpec smallest = spec;
  smallest.mutable_parallel()->set_data(spec.parallel().min_data());
  const RankMemoryEstimate memory = EstimateRankMemory(smallest);
  if (memory.total_bytes <= kMaxRankMemoryBytes) return;
  v->Add(
      absl::StrCat("model and parallel: one rank needs an estimated ", memory.ToString(),
                   ", more than the limit of ", FormatMemoryBytes(kMaxRankMemoryBytes),
                   " [rule: per-rank memory estimate <= ", FormatMemoryBytes(kMaxRankMemoryBytes),
                   " (a smaller model, micro_batch_size or seq_length, more tensor or "
                   "pipeline parallelism, or train.recompute need less)]"));
}

// What the engines train today (model/parameter_table.h lays out each family's tensors):
// GPT-2's architecture at any FFN width and epsilon, and Llama-style decoders (RMSNorm,
// SwiGLU, rotary positions) with any key-value heads, biases or not, tied or untied. The
// spec names more combinations than that (model/transformer_config.h); each refusal says
// which field the engines cannot run yet.
// BERT's heads and what each trains on: pretraining on a sentence dataset, multiple choice
// on RACE's format in groups of kRaceChoices consecutive sequences; the evaluation tasks
// BERT runs (race, with the multiple-choice head).
void ValidateBertHead(const JobSpec& spec, Violations* v) {
  const bool choice = spec.model().bert_head() == BERT_HEAD_MULTIPLE_CHOICE;
  const bool race = spec.data().format() == DATA_FORMAT_RACE;
  if (race && spec.data().path().empty()) {
    v->Add(
        "data.path: required with DATA_FORMAT_RACE [rule: the RACE-format file of questions "
        "(tests/data/race_small.jsonl is a small one)]");
  }
  if (choice && !race) {
    v->Add(absl::StrCat("data.format: ", DataFormat_Name(spec.data().format()),
                        " with model.bert_head BERT_HEAD_MULTIPLE_CHOICE [rule: the "
                        "multiple-choice head trains on DATA_FORMAT_RACE]"));
  }
  if (!choice && race) {
    v->Add(
        "data.format: DATA_FORMAT_RACE with model.bert_head BERT_HEAD_PRETRAINING [rule: RACE's "
        "questions train the multiple-choice head (model.bert_head BERT_HEAD_MULTIPLE_CHOICE)]");
  }
  if (choice && spec.parallel().micro_batch_size() > 0 &&
      spec.parallel().micro_batch_size() % kRaceChoices != 0) {
    v->Add(absl::StrCat("parallel.micro_batch_size: ", spec.parallel().micro_batch_size(),
                        " is not a multiple of ", kRaceChoices,
                        " [rule: a multiple-choice microbatch holds whole questions, one "
                        "sequence per option]"));
  }
  const TrainSpec& t = spec.train();
  for (int i = 0; i < t.eval_tasks_size() && i < kMaxEvalTasks; ++i) {
    const std::string& task = t.eval_tasks(i).task();
    if (task == "race" && !choice) {
      v->Add(absl::StrCat("train.eval_tasks: entry ", i,
                          " is race with model.bert_head BERT_HEAD_PRETRAINING [rule: race "
                          "scores the multiple-choice head (BERT_HEAD_MULTIPLE_CHOICE)]"));
    } else if (task != "race") {
      v->Add(absl::StrCat("train.eval_tasks: entry ", i, " is ", task,
                          " with MODEL_FAMILY_BERT [rule: BERT runs race (with the "
                          "multiple-choice head), while perplexity, cloze and choice score causal "
                          "decoders, and BERT's validation metrics come with "
                          "train.eval_interval]"));
    }
  }
}

// BERT (model.family MODEL_FAMILY_BERT): the CPU engine trains its architecture in fp32 on
// a sentence dataset with WordPiece ids; each refusal names what it cannot run yet.
void ValidateBertTrained(const JobSpec& spec, Violations* v) {
  const ModelSpec& m = spec.model();
  const std::string rule =
      " [rule: MODEL_FAMILY_BERT trains BERT's architecture: LayerNorm, exact GeLU, learned "
      "positions, multi-head attention, biases, the masked-LM decoder tied to the token "
      "embedding]";
  if (m.normalization() != NORMALIZATION_LAYERNORM) {
    v->Add(absl::StrCat("model.normalization: ", Normalization_Name(m.normalization()),
                        " is not trained with MODEL_FAMILY_BERT", rule));
  }
  if (m.activation() != ACTIVATION_GELU) {
    v->Add(absl::StrCat("model.activation: ", Activation_Name(m.activation()),
                        " is not trained with MODEL_FAMILY_BERT", rule));
  }
  if (m.position_embedding() != POSITION_EMBEDDING_LEARNED) {
    v->Add(
        absl::StrCat("model.position_embedding: ", PositionEmbedding_Name(m.position_embedding()),
                     " is not trained with MODEL_FAMILY_BERT", rule));
  }
  if (m.num_kv_heads() != m.num_heads()) {
    v->Add(absl::StrCat("model.num_kv_heads: ", m.num_kv_heads(), " differs from model.num_heads ",
                        m.num_heads(), ", not trained with MODEL_FAMILY_BERT", rule));
  }
  if (!m.linear_bias()) {
    v->Add(absl::StrCat("model.linear_bias: false is not trained with MODEL_FAMILY_BERT", rule));
  }
  if (!m.tie_word_embeddings()) {
    v->Add(absl::StrCat("model.tie_word_embeddings: false is not trained with MODEL_FAMILY_BERT",
                        rule));
  }
  // [CLS] A [SEP] B [SEP] with room for two sentences (data/bert_samples.h).
  if (m.seq_length() < 8) {
    v->Add(absl::StrCat("model.seq_length: ", m.seq_length(),
                        " is too short for BERT's samples [rule: seq_length >= 8 with "
                        "MODEL_FAMILY_BERT]"));
  }
  if (spec.device() == DEVICE_CUDA) {
    v->Add(
        "device: DEVICE_CUDA with model.family MODEL_FAMILY_BERT [rule: the CUDA engine's BERT "
        "layers have not run on a GPU yet (DEVICE_CPU or DEVICE_AUTO trains it on CPU workers)]");
  } else if (spec.precision() != PRECISION_FP32 && spec.precision() != PRECISION_UNSPECIFIED &&
             Precision_IsValid(spec.precision())) {
    v->Add(absl::StrCat("precision: ", Precision_Name(spec.precision()),
                        " with model.family MODEL_FAMILY_BERT [rule: BERT trains on the CPU "
                        "engine, in PRECISION_FP32, so far]"));
  }
  const DataSpec& data = spec.data();
  if (data.paths_size() > 0) {
    v->Add(
        "data.paths: a blend with MODEL_FAMILY_BERT [rule: BERT trains on one sentence "
        "dataset, data.path]");
  }
  if (data.tokenizer() != TOKENIZER_WORDPIECE) {
    v->Add(absl::StrCat("data.tokenizer: ", Tokenizer_Name(data.tokenizer()),
                        " with MODEL_FAMILY_BERT [rule: BERT's samples need "
                        "TOKENIZER_WORDPIECE for [CLS], [SEP], [MASK], [PAD] and whole words]"));
  }
  ValidateBertHead(spec, v);
  if (spec.train().generate_size() > 0) {
    v->Add("train.generate: set with MODEL_FAMILY_BERT [rule: generation needs a causal decoder]");
  }
}

void ValidateArchitectureTrained(const JobSpec& spec, Violations* v) {
  const ModelSpec& m = spec.model();
  if (m.family() == MODEL_FAMILY_BERT) {
    ValidateBertTrained(spec, v);
    return;
  }
  if (m.layernorm_placement() != LAYERNORM_PLACEMENT_UNSPECIFIED) {
    v->Add(absl::StrCat("model.layernorm_placement: set with ", ModelFamily_Name(m.family()),
                        " [rule: only MODEL_FAMILY_BERT has a choice, the decoders are pre-LN]"));
  }
  if (m.bert_head() != BERT_HEAD_UNSPECIFIED) {
    v->Add(absl::StrCat("model.bert_head: set with ", ModelFamily_Name(m.family()),
                        " [rule: only MODEL_FAMILY_BERT has these heads]"));
  }
  for (int i = 0; i < spec.train().eval_tasks_size() && i < kMaxEvalTasks; ++i) {
    if (spec.train().eval_tasks(i).task() == "race") {
      v->Add(absl::StrCat("train.eval_tasks: entry ", i, " is race with ",
                          ModelFamily_Name(m.family()),
                          " [rule: race scores BERT's multiple-choice head]"));
    }
  }
  if (spec.data().format() == DATA_FORMAT_RACE) {
    v->Add(absl::StrCat("data.format: DATA_FORMAT_RACE with ", ModelFamily_Name(m.family()),
                        " [rule: RACE's questions train BERT's multiple-choice head "
                        "(MODEL_FAMILY_BERT, model.bert_head BERT_HEAD_MULTIPLE_CHOICE)]"));
  }
  if (spec.data().tokenizer() == TOKENIZER_WORDPIECE) {
    v->Add(absl::StrCat("data.tokenizer: TOKENIZER_WORDPIECE with ", ModelFamily_Name(m.family()),
                        " [rule: WordPiece is BERT's tokenizer (MODEL_FAMILY_BERT)]"));
  }
  const bool llama = m.family() == MODEL_FAMILY_LLAMA;
  const std::string rule =
      llama ? " [rule: MODEL_FAMILY_LLAMA trains with RMSNorm, SwiGLU and rotary positions]"
            : " [rule: MODEL_FAMILY_GPT2 trains GPT-2's architecture, model.family "
              "MODEL_FAMILY_LLAMA the one with RMSNorm, SwiGLU, rotary positions, grouped-query "
              "attention, no biases or an untied output layer]";
  const Normalization norm = llama ? NORMALIZATION_RMSNORM : NORMALIZATION_LAYERNORM;
  const Activation activation = llama ? ACTIVATION_SWIGLU : ACTIVATION_GELU_TANH;
  const PositionEmbedding positions =
      llama ? POSITION_EMBEDDING_ROTARY : POSITION_EMBEDDING_LEARNED;
  if (m.normalization() != norm) {
    v->Add(absl::StrCat("model.normalization: ", Normalization_Name(m.normalization()),
                        " is not trained by the engines with ", ModelFamily_Name(m.family()),
                        " yet", rule));
  }
  if (m.activation() != activation) {
    v->Add(absl::StrCat("model.activation: ", Activation_Name(m.activation()),
                        " is not trained by the engines with ", ModelFamily_Name(m.family()),
                        " yet", rule));
  }
  if (m.position_embedding() != positions) {
    v->Add(absl::StrCat(
        "model.position_embedding: ", PositionEmbedding_Name(m.position_embedding()),
        " is not trained by the engines with ", ModelFamily_Name(m.family()), " yet", rule));
  }
  if (llama) {
    // The CPU engine trains it (in fp32); the CUDA engine's kernels are issue 33's next part.
    if (spec.device() == DEVICE_CUDA) {
      v->Add(
          "device: DEVICE_CUDA with model.family MODEL_FAMILY_LLAMA [rule: the CUDA engine has "
          "no RMSNorm, rotary, SwiGLU or grouped-query attention kernels yet (DEVICE_CPU or "
          "DEVICE_AUTO trains it on CPU workers)]");
    } else if (spec.precision() != PRECISION_FP32 && spec.precision() != PRECISION_UNSPECIFIED &&
               Precision_IsValid(spec.precision())) {
      v->Add(absl::StrCat("precision: ", Precision_Name(spec.precision()),
                          " with model.family MODEL_FAMILY_LLAMA [rule: Llama-style layers "
                          "train on the CPU engine, in PRECISION_FP32, so far]"));
    }
    // Rotary positions turn pairs of a head's elements.
    if (m.num_heads() > 0 && m.hidden_size() / m.num_heads() % 2 != 0) {
      v->Add(absl::StrCat("model.hidden_size: head size ", m.hidden_size() / m.num_heads(),
                          " (hidden_size / num_heads) is odd [rule: rotary positions need an "
                          "even head size]"));
    }
    return;
  }
  if (m.num_kv_heads() != m.num_heads()) {
    v->Add(absl::StrCat("model.num_kv_heads: ", m.num_kv_heads(), " (grouped-query attention, ",
                        "fewer than model.num_heads ", m.num_heads(),
                        ") is not trained with MODEL_FAMILY_GPT2", rule));
  }
  if (!m.linear_bias()) {
    v->Add(absl::StrCat("model.linear_bias: false is not trained with MODEL_FAMILY_GPT2", rule));
  }
  if (!m.tie_word_embeddings()) {
    v->Add(absl::StrCat(
        "model.tie_word_embeddings: false (an untied output layer) is not trained with "
        "MODEL_FAMILY_GPT2",
        rule));
  }
}

}  // namespace

absl::Status ValidateJobSpec(const JobSpec& spec, ArchitectureCheck architecture) {
  Violations v;
  ValidateName(spec.name(), &v);
  const ValidEnums enums = ValidateEnums(spec, &v);
  bool model_ok = ValidateModel(spec, &v);
  if (model_ok && enums.architecture && architecture == ArchitectureCheck::kTrainable) {
    const size_t before = v.size();
    ValidateArchitectureTrained(spec, &v);
    model_ok = v.size() == before;
  }
  const bool parallel_ok = ValidateParallel(spec, enums.schedule, &v);
  ValidateOptimizer(spec.optimizer(), &v);
  ValidateTrain(spec.train(), &v);
  if (model_ok && parallel_ok) ValidateMemoryTechniques(spec, &v);
  ValidatePrecisionAndDevice(spec, enums, &v);
  ValidateDataSources(spec, enums, &v);
  if (model_ok && parallel_ok && enums.schedule && enums.precision) ValidateMemory(spec, &v);
  return v.ToStatus();
}

absl::StatusOr<JobSpec> ResolveJobSpec(JobSpec spec, ArchitectureCheck architecture) {
  ApplyJobSpecDefaults(&spec);
  absl::Status status = ValidateJobSpec(spec, architecture);
  if (!status.ok()) return status;
  return spec;
}

absl::StatusOr<JobSpec> ParseJobSpecJson(absl::string_view json, ArchitectureCheck architecture) {
  if (json.size() > static_cast<size_t>(kMaxJobSpecJsonBytes)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "job spec JSON: ", json.size(), " bytes exceed the limit of ", kMaxJobSpecJsonBytes,
        " [rule: a spec is at most ", kMaxJobSpecJsonBytes, " bytes]"));
  }
  const std::optional<TextPosition> syntax_error = FindJsonSyntaxError(json);
  JobSpec spec;
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = false;
  const auto parsed = google::protobuf::util::JsonStringToMessage(
      google::protobuf::StringPiece(json.data(), json.size()), &spec, options);
  if (!parsed.ok()) {
    std::string message(parsed.message());
    if (const std::optional<TextPosition>& at = syntax_error) {
      // Protobuf's first sentence says what it expected; the rest quotes the text around
      // the error across its line breaks. The line and column say where more plainly.
      const size_t sentence = message.find_first_of(".\n");
      if (sentence != std::string::npos) {
        message.resize(message[sentence] == '.' ? sentence + 1 : sentence);
      }
      message = absl::StrCat("line ", at->line, ", column ", at->column, ": ", message);
    }
    return absl::InvalidArgumentError(absl::StrCat("job spec JSON: ", message));
  }
  if (syntax_error.has_value()) {
    // Protobuf's parser is lenient (it takes single-quoted strings, for one); what it
    // accepts beyond RFC 8259 would make a spec mean different things to different tools.
    return absl::InvalidArgumentError(absl::StrCat("job spec JSON: line ", syntax_error->line,
                                                   ", column ", syntax_error->column,
                                                   ": not valid JSON [rule: RFC 8259]"));
  }
  return ResolveJobSpec(std::move(spec), architecture);
}

absl::StatusOr<JobSpec> LoadJobSpecFile(const std::string& path, ArchitectureCheck architecture) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read job spec file ", path));
  std::stringstream text;
  text << in.rdbuf();
  absl::StatusOr<JobSpec> spec = ParseJobSpecJson(text.str(), architecture);
  if (!spec.ok()) {
    return absl::Status(spec.status().code(), absl::StrCat(path, ": ", spec.status().message()));
  }
  return spec;
}

}  // namespace mtrain
