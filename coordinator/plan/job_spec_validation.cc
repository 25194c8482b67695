#include "coordinator/plan/job_spec_validation.h"

#include <fstream>
#include <optional>
#include <sstream>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "coordinator/plan/job_spec_defaults.h"
#include "coordinator/plan/json_syntax.h"
#include "google/protobuf/util/json_util.h"

namespace mtrain {
namespace {

// Upper bounds that catch typos (an extra zero) long before memory runs out.
constexpr int kMaxWorldSize = 4096;
constexpr int kMaxNameLength = 128;
constexpr int kByteTokenizerVocab = 256;

// Collects violations; each is "field: what is wrong [rule: ...]".
class Violations {
 public:
  void Add(std::string message) { messages_.push_back(std::move(message)); }

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
      v->Add(absl::StrCat("name: character '", std::string(1, c),
                          "' is not allowed [rule: only A-Z a-z 0-9 . _ -]"));
      return;
    }
  }
}

void ValidateModel(const JobSpec& spec, Violations* v) {
  const ModelSpec& m = spec.model();
  v->RequirePositive("model.num_layers", m.num_layers());
  v->RequirePositive("model.num_heads", m.num_heads());
  v->RequirePositive("model.hidden_size", m.hidden_size());
  v->RequirePositive("model.seq_length", m.seq_length());
  v->RequirePositive("model.vocab_size", m.vocab_size());
  if (m.num_heads() > 0 && m.hidden_size() > 0 && m.hidden_size() % m.num_heads() != 0) {
    v->Add(absl::StrCat("model.hidden_size: ", m.hidden_size(),
                        " is not divisible by model.num_heads (", m.num_heads(),
                        ") [rule: hidden_size % num_heads == 0]"));
  }
  if (spec.data().tokenizer() == TOKENIZER_BYTE && m.vocab_size() > 0 &&
      m.vocab_size() < kByteTokenizerVocab) {
    v->Add(absl::StrCat("model.vocab_size: ", m.vocab_size(),
                        " is smaller than the byte tokenizer's 256 tokens [rule: "
                        "vocab_size >= 256 with TOKENIZER_BYTE]"));
  }
}

void ValidateParallel(const JobSpec& spec, Violations* v) {
  const ParallelSpec& p = spec.parallel();
  const ModelSpec& m = spec.model();
  v->RequirePositive("parallel.tensor", p.tensor());
  v->RequirePositive("parallel.pipeline", p.pipeline());
  v->RequirePositive("parallel.data", p.data());
  v->RequirePositive("parallel.virtual_stages", p.virtual_stages());
  v->RequirePositive("parallel.micro_batch_size", p.micro_batch_size());
  // Unset only when it could not be derived (the micro batch or data degree is wrong and
  // is reported already).
  if (p.has_global_batch_size()) {
    v->RequirePositive("parallel.global_batch_size", p.global_batch_size());
  }
  if (p.tensor() <= 0 || p.pipeline() <= 0 || p.data() <= 0 || p.virtual_stages() <= 0 ||
      p.micro_batch_size() <= 0 || p.global_batch_size() <= 0) {
    return;  // The divisibility rules below would only repeat the same problem.
  }
  const long long world = 1LL * p.tensor() * p.pipeline() * p.data();
  if (world > kMaxWorldSize) {
    v->Add(absl::StrCat("parallel: tensor * pipeline * data = ", world, " exceeds ", kMaxWorldSize,
                        " ranks"));
  }
  if (m.num_heads() > 0 && m.num_heads() % p.tensor() != 0) {
    v->Add(absl::StrCat("model.num_heads: ", m.num_heads(),
                        " is not divisible by parallel.tensor (", p.tensor(),
                        ") [rule: num_heads % tensor == 0]"));
  }
  const long long chunks = 1LL * p.pipeline() * p.virtual_stages();
  if (m.num_layers() > 0 && m.num_layers() % chunks != 0) {
    v->Add(absl::StrCat("model.num_layers: ", m.num_layers(),
                        " is not divisible by parallel.pipeline * parallel.virtual_stages (",
                        chunks, ") [rule: num_layers % (pipeline * virtual_stages) == 0]"));
  }
  if (p.schedule() != SCHEDULE_INTERLEAVED_1F1B && p.virtual_stages() > 1) {
    v->Add(absl::StrCat("parallel.virtual_stages: ", p.virtual_stages(),
                        " needs parallel.schedule SCHEDULE_INTERLEAVED_1F1B [rule: "
                        "virtual_stages > 1 only with interleaving]"));
  }
  if (p.schedule() == SCHEDULE_INTERLEAVED_1F1B && p.pipeline() < 2) {
    // One stage would hold the first and the last chunk, and with them the tied embedding
    // twice; and there is no bubble to shrink.
    v->Add(absl::StrCat("parallel.pipeline: ", p.pipeline(),
                        " is too small for SCHEDULE_INTERLEAVED_1F1B [rule: interleaving "
                        "needs pipeline >= 2]"));
  }
  const long long per_microbatch_step = 1LL * p.micro_batch_size() * p.data();
  if (p.global_batch_size() % per_microbatch_step != 0) {
    v->Add(absl::StrCat("parallel.global_batch_size: ", p.global_batch_size(),
                        " is not divisible by parallel.micro_batch_size * parallel.data (",
                        per_microbatch_step,
                        ") [rule: global_batch_size % (micro_batch_size * data) == 0]"));
  } else if (p.schedule() == SCHEDULE_INTERLEAVED_1F1B) {
    const long long microbatches = p.global_batch_size() / per_microbatch_step;
    if (microbatches % p.pipeline() != 0) {
      v->Add(absl::StrCat("parallel.global_batch_size: gives ", microbatches,
                          " microbatches per replica, not divisible by parallel.pipeline (",
                          p.pipeline(),
                          ") [rule: with SCHEDULE_INTERLEAVED_1F1B, microbatches % "
                          "pipeline == 0]"));
    }
  }
  if (p.zero_stage() != 0 && p.zero_stage() != 1) {
    v->Add(absl::StrCat("parallel.zero_stage: must be 0 or 1 (got ", p.zero_stage(), ")"));
  }
  if (p.min_data() < 1 || p.min_data() > p.data()) {
    v->Add(absl::StrCat("parallel.min_data: must be in [1, parallel.data = ", p.data(), "] (got ",
                        p.min_data(), ")"));
  } else if (p.global_batch_size() % (1LL * p.micro_batch_size() * p.min_data()) != 0) {
    v->Add(absl::StrCat("parallel.min_data: global_batch_size ", p.global_batch_size(),
                        " is not divisible by micro_batch_size * min_data (",
                        1LL * p.micro_batch_size() * p.min_data(),
                        ") [rule: the global batch must survive shrinking to min_data]"));
  }
}

void ValidateOptimizer(const OptimizerSpec& o, Violations* v) {
  if (!(o.lr() > 0)) v->Add(absl::StrCat("optimizer.lr: must be > 0 (got ", o.lr(), ")"));
  if (!(o.min_lr() >= 0 && o.min_lr() <= o.lr())) {
    v->Add(absl::StrCat("optimizer.min_lr: must be in [0, optimizer.lr = ", o.lr(), "] (got ",
                        o.min_lr(), ")"));
  }
  v->RequireNonNegative("optimizer.warmup_steps", o.warmup_steps());
  if (o.decay_steps() < o.warmup_steps()) {
    v->Add(absl::StrCat("optimizer.decay_steps: ", o.decay_steps(),
                        " is less than optimizer.warmup_steps (", o.warmup_steps(),
                        ") [rule: decay_steps >= warmup_steps]"));
  }
  v->RequireNonNegative("optimizer.weight_decay", o.weight_decay());
  v->RequireFraction("optimizer.beta1", o.beta1());
  v->RequireFraction("optimizer.beta2", o.beta2());
  if (!(o.eps() > 0)) v->Add(absl::StrCat("optimizer.eps: must be > 0 (got ", o.eps(), ")"));
  v->RequireNonNegative("optimizer.grad_clip", o.grad_clip());
}

void ValidateTrain(const TrainSpec& t, Violations* v) {
  v->RequirePositive("train.steps", t.steps());
  v->RequireFraction("train.dropout", t.dropout());
  v->RequireNonNegative("train.checkpoint_every", t.checkpoint_every());
  v->RequireNonNegative("train.max_restarts", t.max_restarts());
}

void ValidatePrecisionAndDevice(const JobSpec& spec, Violations* v) {
  if (spec.device() == DEVICE_CPU && spec.precision() != PRECISION_FP32) {
    v->Add(absl::StrCat("precision: ", Precision_Name(spec.precision()),
                        " needs a GPU but device is DEVICE_CPU [rule: CPU ranks train in "
                        "PRECISION_FP32]"));
  }
  if (spec.data().format() == DATA_FORMAT_MMIDIDX && spec.data().path().empty()) {
    v->Add(
        "data.path: must name the .bin/.idx prefix [rule: DATA_FORMAT_MMIDIDX has no "
        "shipped default]");
  }
}

}  // namespace

absl::Status ValidateJobSpec(const JobSpec& spec) {
  Violations v;
  ValidateName(spec.name(), &v);
  ValidateModel(spec, &v);
  ValidateParallel(spec, &v);
  ValidateOptimizer(spec.optimizer(), &v);
  ValidateTrain(spec.train(), &v);
  ValidatePrecisionAndDevice(spec, &v);
  return v.ToStatus();
}

absl::StatusOr<JobSpec> ResolveJobSpec(JobSpec spec) {
  ApplyJobSpecDefaults(&spec);
  absl::Status status = ValidateJobSpec(spec);
  if (!status.ok()) return status;
  return spec;
}

absl::StatusOr<JobSpec> ParseJobSpecJson(absl::string_view json) {
  JobSpec spec;
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = false;
  const auto parsed = google::protobuf::util::JsonStringToMessage(
      google::protobuf::StringPiece(json.data(), json.size()), &spec, options);
  if (!parsed.ok()) {
    std::string message(parsed.message());
    if (const std::optional<TextPosition> at = FindJsonSyntaxError(json)) {
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
  return ResolveJobSpec(std::move(spec));
}

absl::StatusOr<JobSpec> LoadJobSpecFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read job spec file ", path));
  std::stringstream text;
  text << in.rdbuf();
  absl::StatusOr<JobSpec> spec = ParseJobSpecJson(text.str());
  if (!spec.ok()) {
    return absl::Status(spec.status().code(), absl::StrCat(path, ": ", spec.status().message()));
  }
  return spec;
}

int PaddedVocabSize(int vocab_size, int tensor) {
  const int multiple = 128 * tensor;
  return (vocab_size + multiple - 1) / multiple * multiple;
}

int NumMicrobatches(const ParallelSpec& parallel) {
  return parallel.global_batch_size() / (parallel.micro_batch_size() * parallel.data());
}

}  // namespace mtrain
