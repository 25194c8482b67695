#include "spec/job_spec_mutator.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iterator>
#include <limits>
#include <string>
#include <vector>

#include "google/protobuf/descriptor.h"
#include "google/protobuf/message.h"
#include "google/protobuf/util/json_util.h"

namespace mtrain {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;

// Valid specs as users write them (omitted fields take defaults).
constexpr const char* kSeedSpecs[] = {
    "{}",
    R"({"model": {"num_layers": 2, "num_heads": 2, "hidden_size": 32, "seq_length": 16},
        "train": {"steps": 2}, "device": "DEVICE_CPU"})",
    R"({"model": {"num_layers": 8, "num_heads": 8, "hidden_size": 256, "seq_length": 128},
        "parallel": {"tensor": 2, "pipeline": 2, "data": 2, "virtual_stages": 2,
                     "micro_batch_size": 2, "global_batch_size": 16,
                     "schedule": "SCHEDULE_INTERLEAVED_1F1B", "zero_stage": 1, "min_data": 1},
        "optimizer": {"lr": 3e-4, "min_lr": 3e-5, "warmup_steps": 5, "decay_steps": 50,
                      "weight_decay": 0.01, "beta1": 0.9, "beta2": 0.95, "eps": 1e-8,
                      "grad_clip": 1.0},
        "precision": "PRECISION_FP32", "device": "DEVICE_CPU",
        "data": {"format": "DATA_FORMAT_TEXT", "tokenizer": "TOKENIZER_BYTE"},
        "train": {"steps": 50, "seed": 7, "dropout": 0.0, "recompute": true,
                  "checkpoint_every": 10, "max_restarts": 2}})",
    R"({"model": {"num_layers": 8}, "parallel": {"pipeline": 4, "global_batch_size": 16,
        "schedule": "SCHEDULE_GPIPE"}})",
    R"({"parallel": {"data": 4, "min_data": 2, "global_batch_size": 8, "zero_stage": 1}})",
    R"({"parallel": {"tensor": 2, "sequence_parallel": true, "scatter_gather": true},
        "train": {"recompute_granularity": "full", "recompute_method": "block",
                  "recompute_num_layers": 1}})",
    R"({"device": "DEVICE_CUDA", "precision": "PRECISION_BF16",
        "model": {"num_layers": 12, "num_heads": 12, "hidden_size": 768, "seq_length": 1024,
                  "vocab_size": 50257}})",
    R"({"data": {"path": "tests/data/shakespeare.txt"}, "train": {"steps": 1, "dropout": 0}})",
    R"({"data": {"format": "DATA_FORMAT_MMIDIDX", "split": "969,30,1",
                 "paths": [{"path": "/d/a", "weight": 0.3}, {"path": "/d/b", "weight": 0.7}]},
        "train": {"eval_interval": 5, "eval_iters": 2, "checkpoint_every": 5,
                  "eval_tasks": [{"task": "cloze", "data": "/d/lambada.jsonl"}],
                  "generate": [{"prompt": "ROMEO:", "max_new_tokens": 8, "top_p": 0.9}]}})",
};

int64_t Pick(std::mt19937_64& rng, std::initializer_list<int64_t> values) {
  const size_t i = std::uniform_int_distribution<size_t>(0, values.size() - 1)(rng);
  return *(values.begin() + i);
}

struct Leaf {
  Message* message;
  const FieldDescriptor* field;
};

void CollectLeaves(Message* message, std::vector<Leaf>* leaves) {
  const Descriptor* descriptor = message->GetDescriptor();
  const Reflection* reflection = message->GetReflection();
  for (int i = 0; i < descriptor->field_count(); ++i) {
    const FieldDescriptor* field = descriptor->field(i);
    if (field->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE && field->is_repeated()) {
      // Each element present (a seed spec's blend entries, say) is mutated like a message.
      for (int k = 0; k < reflection->FieldSize(*message, field); ++k) {
        CollectLeaves(reflection->MutableRepeatedMessage(message, field, k), leaves);
      }
    } else if (field->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
      CollectLeaves(reflection->MutableMessage(message, field), leaves);
    } else if (field->is_repeated()) {
      continue;  // no repeated scalars in a JobSpec; the setters below take singular ones
    } else {
      leaves->push_back({message, field});
    }
  }
}

void CollectNames(const Descriptor* descriptor, const std::string& prefix,
                  std::set<std::string>* names) {
  for (int i = 0; i < descriptor->field_count(); ++i) {
    const FieldDescriptor* field = descriptor->field(i);
    const std::string path = prefix.empty() ? field->name() : prefix + "." + field->name();
    names->insert(path);
    if (field->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
      CollectNames(field->message_type(), path, names);
    }
  }
}

int32_t ToInt32(int64_t value) {
  return static_cast<int32_t>(
      std::max<int64_t>(std::numeric_limits<int32_t>::min(), std::min<int64_t>(value, INT32_MAX)));
}

}  // namespace

int64_t JobSpecMutator::EdgeInt() {
  // Half plausible values, so mutated specs often stay valid and reach the planner.
  if (Below(2) == 0) return static_cast<int64_t>(Below(8)) + 1;
  return Pick(rng_, {0,
                     -1,
                     -5,
                     2,
                     3,
                     4,
                     6,
                     7,
                     8,
                     12,
                     16,
                     64,
                     100,
                     128,
                     255,
                     256,
                     1000,
                     1024,
                     1025,
                     4096,
                     4097,
                     8192,
                     8193,
                     32768,
                     32769,
                     65536,
                     65537,
                     1 << 20,
                     (1 << 20) + 1,
                     1000000,
                     100000000,
                     100000001,
                     1000000000,
                     1 << 30,
                     INT32_MAX,
                     INT32_MIN});
}

// Not a member: the table is static.
static float EdgeFloatValue(std::mt19937_64& rng) {
  constexpr float kInf = std::numeric_limits<float>::infinity();
  static const float kValues[] = {std::nanf(""),
                                  kInf,
                                  -kInf,
                                  0.0f,
                                  -0.0f,
                                  std::numeric_limits<float>::denorm_min(),
                                  1e-30f,
                                  1e-8f,
                                  1e-4f,
                                  6e-4f,
                                  0.01f,
                                  0.1f,
                                  0.5f,
                                  0.9f,
                                  0.999999f,
                                  1.0f,
                                  1.5f,
                                  10.0f,
                                  10.5f,
                                  1e6f,
                                  1.5e6f,
                                  1e30f,
                                  std::numeric_limits<float>::max(),
                                  -1.0f,
                                  -1e-8f};
  const size_t i = std::uniform_int_distribution<size_t>(0, std::size(kValues) - 1)(rng);
  return kValues[i];
}

float JobSpecMutator::EdgeFloat() { return EdgeFloatValue(rng_); }

int JobSpecMutator::EdgeEnum() {
  if (Below(2) == 0) return static_cast<int>(Below(4));  // known values, UNSPECIFIED included
  return static_cast<int>(Pick(rng_, {-1, -5, 4, 7, 99, INT32_MAX, INT32_MIN}));
}

std::string JobSpecMutator::EdgeString() {
  switch (Below(14)) {
    case 0:
      return "";
    case 1:
      return "x";
    case 2:
      return "/etc/passwd";
    case 3:
      return "../../etc/passwd";
    case 4:
      return "/dev/zero";
    case 5:
      return std::string(4096, 'a');
    case 6:
      return std::string(4097, 'a');
    case 7:
      return "corpus\xff\xfe.txt";  // not UTF-8
    case 8:
      return std::string("a\0b", 3);
    case 9:
      return "line\nbreak";
    case 10:
      return "caf\xC3\xA9";
    case 11:
      return std::string(128, 'n');
    case 12:
      return std::string(129, 'n');
    default:
      return "/nonexistent/data.txt";
  }
}

JobSpec JobSpecMutator::SeedSpec() {
  JobSpec spec;
  google::protobuf::util::JsonParseOptions options;
  const char* json = kSeedSpecs[Below(std::size(kSeedSpecs))];
  // The seeds are constants that parse; a failure would leave the empty spec, also valid.
  (void)google::protobuf::util::JsonStringToMessage(json, &spec, options);
  return spec;
}

JobSpec JobSpecMutator::Mutate(const JobSpec& spec, int max_changes) {
  JobSpec mutated = spec;
  std::vector<Leaf> leaves;
  CollectLeaves(&mutated, &leaves);
  const size_t changes = 1 + Below(static_cast<size_t>(std::max(max_changes, 1)));
  for (size_t c = 0; c < changes; ++c) {
    const Leaf& leaf = leaves[Below(leaves.size())];
    const Reflection* r = leaf.message->GetReflection();
    if (Below(10) == 0) {
      r->ClearField(leaf.message, leaf.field);
      continue;
    }
    switch (leaf.field->cpp_type()) {
      case FieldDescriptor::CPPTYPE_INT32: {
        const int64_t current = r->GetInt32(*leaf.message, leaf.field);
        int64_t value = EdgeInt();
        // Near the current value: divisibility rules break at +-1 and x2.
        if (Below(4) == 0) value = Pick(rng_, {current + 1, current - 1, current * 2, current / 2});
        r->SetInt32(leaf.message, leaf.field, ToInt32(value));
        break;
      }
      case FieldDescriptor::CPPTYPE_INT64:
        r->SetInt64(leaf.message, leaf.field, EdgeInt());
        break;
      case FieldDescriptor::CPPTYPE_UINT32:
        r->SetUInt32(leaf.message, leaf.field, static_cast<uint32_t>(rng_()));
        break;
      case FieldDescriptor::CPPTYPE_UINT64:
        r->SetUInt64(leaf.message, leaf.field,
                     Below(2) == 0 ? rng_() : static_cast<uint64_t>(Pick(rng_, {0, -1, 1})));
        break;
      case FieldDescriptor::CPPTYPE_FLOAT:
        r->SetFloat(leaf.message, leaf.field, EdgeFloat());
        break;
      case FieldDescriptor::CPPTYPE_DOUBLE:
        r->SetDouble(leaf.message, leaf.field, EdgeFloat());
        break;
      case FieldDescriptor::CPPTYPE_BOOL:
        r->SetBool(leaf.message, leaf.field, Below(2) == 0);
        break;
      case FieldDescriptor::CPPTYPE_ENUM:
        r->SetEnumValue(leaf.message, leaf.field, EdgeEnum());
        break;
      case FieldDescriptor::CPPTYPE_STRING:
        r->SetString(leaf.message, leaf.field, EdgeString());
        break;
      case FieldDescriptor::CPPTYPE_MESSAGE:
        break;  // not a leaf
    }
  }
  return mutated;
}

JobSpec JobSpecMutator::RandomSpec() {
  JobSpec spec;
  std::vector<Leaf> leaves;
  CollectLeaves(&spec, &leaves);
  return Mutate(spec, static_cast<int>(leaves.size()) * 2);
}

std::string JobSpecMutator::MutateText(const std::string& text) {
  std::string out = text;
  static const char kSignificant[] = "\"'{}[],:0-e.+ \\nN\xff";
  static const char* const kTokens[] = {
      "1e999", "-0",   "NaN", "\"Infinity\"", "2147483648",  "99999999999999999999",
      "null",  "true", "[]",  "{}",           "\"\\u0000\"", "\"\\ud800\"",
      "0x10",  "1.5"};
  const size_t edits = 1 + Below(4);
  for (size_t e = 0; e < edits; ++e) {
    const size_t at = out.empty() ? 0 : Below(out.size() + 1);
    switch (Below(6)) {
      case 0:  // replace a byte
        if (!out.empty())
          out[std::min(at, out.size() - 1)] = kSignificant[Below(sizeof(kSignificant) - 1)];
        break;
      case 1:  // delete a run
        if (at < out.size()) out.erase(at, 1 + Below(8));
        break;
      case 2:  // insert a byte
        out.insert(at, 1, kSignificant[Below(sizeof(kSignificant) - 1)]);
        break;
      case 3:  // insert a token
        out.insert(at, kTokens[Below(std::size(kTokens))]);
        break;
      case 4:  // duplicate a run
        if (at < out.size()) out.insert(at, out.substr(at, 1 + Below(16)));
        break;
      default:  // truncate
        out.resize(at);
        break;
    }
  }
  return out;
}

std::set<std::string> JobSpecFieldNames() {
  std::set<std::string> names;
  CollectNames(JobSpec::descriptor(), "", &names);
  names.insert("model and parallel");
  names.insert("job spec JSON");
  return names;
}

}  // namespace mtrain
