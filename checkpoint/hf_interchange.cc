#include "checkpoint/hf_interchange.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <functional>
#include <set>
#include <system_error>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "checkpoint/file_io.h"
#include "checkpoint/hf_bert_config.h"
#include "checkpoint/hf_llama_config.h"
#include "common/json_writer.h"
#include "common/status_macros.h"
#include "model/family_defaults.h"
#include "model/parameter_table.h"
#include "model/transformer_config.h"
#include "spec/job_spec_defaults.h"

namespace mtrain {
namespace {

constexpr absl::string_view kHfLmHead = "lm_head.weight";

// How transformers names one family's model: GPT2LMHeadModel keeps its GPT2Model under
// "transformer.", LlamaForCausalLM its LlamaModel under "model." (a bare GPT2Model or
// LlamaModel file lacks the prefix); the untied output layer ("lm_head.weight") sits
// outside it.
struct HfFamily {
  absl::string_view prefix;
  absl::string_view name;  // in messages
};

HfFamily HfFamilyOf(const ModelSpec& m) {
  if (m.family() == MODEL_FAMILY_LLAMA) return {"model.", "Llama"};
  // BertForPreTraining and MegatronBertForPreTraining: the heads ("cls.*") sit outside.
  if (m.family() == MODEL_FAMILY_BERT) return {"bert.", "BERT"};
  return {"transformer.", "GPT-2"};
}
// The engine's GeLU (kernels/gelu.h: the tanh form, which transformers calls "gelu_new").
constexpr char kHfActivation[] = "gelu_new";

struct TensorMapping {
  std::string ours;
  std::string hf;  // without kHfPrefix
  std::vector<int64_t> our_shape;
  std::vector<int64_t> hf_shape;
  HfLayout layout = HfLayout::kSame;
  HfRows rows = HfRows::kExact;
  std::string spec_fields;  // the spec fields that decide the shape, for error messages
  bool prefixed = true;     // inside the family's prefix (all but the untied output layer and
                            // BERT's heads)
  bool token_embedding = false;
  bool output_layer = false;  // an untied output layer
  // BERT's multiple-choice classifier: a pretrained file has none (fine-tuning starts it
  // from the seeded initialisation), so its absence on import is no error.
  bool fine_tuning_head = false;
};

std::string ShapeString(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

int64_t Volume(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// A spec's model with the job defaults applied, as a submitted job would have it.
ModelSpec ResolvedModel(const ModelSpec& model) {
  JobSpec spec;
  *spec.mutable_model() = model;
  ApplyJobSpecDefaults(&spec);
  return spec.model();
}

absl::Status CheckModel(const ModelSpec& m) {
  const std::pair<const char*, int> fields[] = {{"num_layers", m.num_layers()},
                                                {"num_heads", m.num_heads()},
                                                {"hidden_size", m.hidden_size()},
                                                {"seq_length", m.seq_length()},
                                                {"vocab_size", m.vocab_size()}};
  for (const auto& [name, value] : fields) {
    if (value <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("model.", name, " is ", value, "; it must be > 0"));
    }
  }
  if (m.hidden_size() % m.num_heads() != 0) {
    return absl::InvalidArgumentError(absl::StrCat("model.hidden_size ", m.hidden_size(),
                                                   " is not divisible by model.num_heads ",
                                                   m.num_heads()));
  }
  return absl::OkStatus();
}

// Every tensor of a model of this spec, in both namings (model/parameter_table.h);
// docs/HUGGINGFACE.md is this table written out.
std::vector<TensorMapping> Mappings(const ModelSpec& m) {
  JobSpec spec;
  *spec.mutable_model() = m;
  const TransformerConfig config = TransformerConfigOf(spec);
  const std::string hidden = absl::StrCat("model.hidden_size ", m.hidden_size());
  std::vector<TensorMapping> maps;
  for (ParameterEntry& entry : ParameterTable(config)) {
    TensorMapping map;
    map.ours = std::move(entry.name);
    map.hf = std::move(entry.hf_name);
    map.our_shape = std::move(entry.global_shape);
    // HF holds the real vocabulary's rows only.
    if (entry.hf_rows == HfRows::kOursPadded) map.our_shape[0] = m.vocab_size();
    map.hf_shape = std::move(entry.hf_shape);
    map.layout = entry.hf_layout;
    map.rows = entry.hf_rows;
    map.prefixed = entry.hf_in_base_model;
    map.token_embedding = entry.role == ParameterRole::kTokenEmbedding;
    map.output_layer = entry.role == ParameterRole::kOutputWeight;
    map.fine_tuning_head =
        entry.role == ParameterRole::kChoiceWeight || entry.role == ParameterRole::kChoiceBias;
    switch (entry.role) {
      case ParameterRole::kOutputWeight:
      case ParameterRole::kTokenEmbedding:
        map.spec_fields = absl::StrCat("model.vocab_size ", m.vocab_size(), ", ", hidden);
        break;
      case ParameterRole::kPositionEmbedding:
        map.spec_fields = absl::StrCat("model.seq_length ", m.seq_length(), ", ", hidden);
        break;
      default:
        map.spec_fields = entry.layer >= 0
                              ? absl::StrCat("layer ", entry.layer, " of model.num_layers ",
                                             m.num_layers(), ", ", hidden)
                              : hidden;
    }
    maps.push_back(std::move(map));
  }
  return maps;
}

// [rows, cols] -> [cols, rows].
std::vector<float> Transposed(const float* src, int64_t rows, int64_t cols) {
  std::vector<float> out(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) out[c * rows + r] = src[r * cols + c];
  }
  return out;
}

// The Volume(m.our_shape) leading elements of `src` in the other side's layout (for wte
// and wpe, the leading rows). Our last dimension is the "in" axis that Conv1D puts first.
std::vector<float> ToHfLayout(const float* src, const TensorMapping& m) {
  const int64_t n = Volume(m.our_shape);
  if (m.layout == HfLayout::kSame) return std::vector<float>(src, src + n);
  const int64_t cols = m.our_shape.back();
  return Transposed(src, n / cols, cols);
}

std::vector<float> FromHfLayout(const float* src, const TensorMapping& m) {
  const int64_t n = Volume(m.our_shape);
  if (m.layout == HfLayout::kSame) return std::vector<float>(src, src + n);
  const int64_t cols = m.our_shape.back();
  return Transposed(src, cols, n / cols);
}

// IEEE half precision to float, exactly (every half is a float).
float HalfToFloat(uint16_t h) {
  const float sign = (h & 0x8000) ? -1.0f : 1.0f;
  const int exponent = (h >> 10) & 0x1F;
  const int mantissa = h & 0x3FF;
  if (exponent == 0) return sign * std::ldexp(static_cast<float>(mantissa), -24);
  if (exponent == 31) return mantissa == 0 ? sign * INFINITY : NAN;
  return sign * std::ldexp(static_cast<float>(mantissa + 1024), exponent - 25);
}

// bfloat16 is the top half of a float.
float Bfloat16ToFloat(uint16_t h) {
  const uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

absl::StatusOr<std::vector<float>> HfFloats(const std::string& name, SafetensorsTensor tensor) {
  int element_bytes = 0;
  if (tensor.dtype == "F32") element_bytes = 4;
  if (tensor.dtype == "F64") element_bytes = 8;
  if (tensor.dtype == "F16" || tensor.dtype == "BF16") element_bytes = 2;
  if (element_bytes == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "HF tensor '", name, "' has dtype ", tensor.dtype, "; import reads F32, F64, F16 or BF16"));
  }
  const int64_t n = tensor.num_elements();
  if (tensor.dtype == "F32" && tensor.bytes.empty() &&
      static_cast<int64_t>(tensor.f32.size()) == n && n > 0) {
    return std::move(tensor.f32);  // read as floats already (SafetensorsReader::ReadFloat32)
  }
  if (static_cast<int64_t>(tensor.bytes.size()) != n * element_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "HF tensor '", name, "' has ", tensor.bytes.size(), " bytes; its shape ",
        ShapeString(tensor.shape), " of ", tensor.dtype, " needs ", n * element_bytes));
  }
  if (element_bytes != 2) return TensorAsFloats(tensor);
  std::vector<float> values(static_cast<size_t>(n));
  const bool half = tensor.dtype == "F16";
  for (int64_t i = 0; i < n; ++i) {
    uint16_t bits;
    std::memcpy(&bits, tensor.bytes.data() + 2 * i, 2);
    values[i] = half ? HalfToFloat(bits) : Bfloat16ToFloat(bits);
  }
  return values;
}

// Buffers older transformers saved with the weights, which are not parameters: GPT-2's
// causal mask "h.<i>.attn.bias" / "h.<i>.attn.masked_bias", Llama's rotary frequencies
// "layers.<i>.self_attn.rotary_emb.inv_freq", BERT's "embeddings.position_ids"; and BERT's
// masked-LM decoder, which older files hold beside the tensors it is tied to (the word
// embeddings and cls.predictions.bias), as transformers ties it on loading.
bool IsSavedBuffer(absl::string_view name) {
  if (absl::EndsWith(name, ".self_attn.rotary_emb.inv_freq")) return true;
  if (name == "embeddings.position_ids" || name == "cls.predictions.decoder.weight" ||
      name == "cls.predictions.decoder.bias") {
    return true;
  }
  if (!absl::ConsumePrefix(&name, "h.")) return false;
  const size_t dot = name.find('.');
  int layer;
  if (dot == absl::string_view::npos || !absl::SimpleAtoi(name.substr(0, dot), &layer)) {
    return false;
  }
  name.remove_prefix(dot);
  return name == ".attn.bias" || name == ".attn.masked_bias";
}

}  // namespace

absl::StatusOr<SafetensorsFile> ToHuggingFace(const std::map<std::string, FullTensor>& ours,
                                              const ModelSpec& model_spec) {
  const ModelSpec model = ResolvedModel(model_spec);
  RETURN_IF_ERROR(CheckModel(model));
  const HfFamily family = HfFamilyOf(model);
  const int64_t C = model.hidden_size(), V = model.vocab_size();
  const std::vector<TensorMapping> mappings = Mappings(model);
  SafetensorsFile file;
  std::set<std::string> mapped;
  for (const TensorMapping& m : mappings) {
    mapped.insert(m.ours);
    // Padded vocabulary rows: wte [>= V, C], BERT's masked-LM bias [>= V].
    const bool matrix = m.our_shape.size() == 2;
    const std::string expected =
        m.rows == HfRows::kOursPadded
            ? absl::StrCat("[>= ", V, matrix ? absl::StrCat(", ", C) : std::string(), "]")
            : ShapeString(m.our_shape);
    auto it = ours.find(m.ours);
    if (it == ours.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor '", m.ours, "' is missing; ", m.spec_fields, " expect ", expected));
    }
    const FullTensor& tensor = it->second;
    const bool shape_ok = m.rows == HfRows::kOursPadded
                              ? tensor.shape.size() == m.our_shape.size() && tensor.shape[0] >= V &&
                                    (!matrix || tensor.shape[1] == C)
                              : tensor.shape == m.our_shape;
    if (!shape_ok) {
      return absl::InvalidArgumentError(absl::StrCat("tensor '", m.ours, "' has shape ",
                                                     ShapeString(tensor.shape), "; ", m.spec_fields,
                                                     " expect ", expected));
    }
    if (static_cast<int64_t>(tensor.values.size()) != Volume(tensor.shape)) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor '", m.ours, "' has ", tensor.values.size(), " values; its shape ",
                       ShapeString(tensor.shape), " holds ", Volume(tensor.shape)));
    }
    // For wte, the leading vocab_size rows: the padding rows after them are never an
    // input (no token selects them) nor an output (the loss masks their logits).
    const std::vector<float> values = ToHfLayout(tensor.values.data(), m);
    file.tensors[absl::StrCat(m.prefixed ? family.prefix : "", m.hf)] =
        MakeF32Tensor(m.hf_shape, values.data());
  }
  for (const auto& [name, tensor] : ours) {
    if (!mapped.count(name)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tensor '", name, "' is not a parameter of a ", family.name, " with model.num_layers ",
          model.num_layers(), " (pass parameters only, of a model of this spec)"));
    }
  }
  // safetensors' torch loader (and so from_pretrained) refuses files without it.
  file.metadata["format"] = "pt";
  return file;
}

std::string HuggingFaceConfigJson(const JobSpec& spec_in) {
  if (spec_in.model().family() == MODEL_FAMILY_LLAMA) return HuggingFaceLlamaConfigJson(spec_in);
  if (spec_in.model().family() == MODEL_FAMILY_BERT) return HuggingFaceBertConfigJson(spec_in);
  JobSpec spec = spec_in;
  ApplyJobSpecDefaults(&spec);
  const ModelSpec& m = spec.model();
  const double dropout = spec.train().dropout();
  // One field per line, as people read and diff it; the float settings in the fewest
  // digits that give the same float ("0.1", not "0.100000001").
  JsonObject config(JsonNumberFormat::ShortestFloat(), JsonLayout::kOneFieldPerLine);
  // GPT2Config's other defaults already match (scale_attn_weights: 1/sqrt(head_dim));
  // they are written out so the file does not depend on a transformers version's defaults.
  config
      .Raw("architectures", JsonArray(std::vector<std::string>{"GPT2LMHeadModel"},
                                      [](const std::string& name) { return JsonString(name); }))
      .String("model_type", "gpt2")
      .Int("vocab_size", m.vocab_size())
      .Int("n_positions", m.seq_length())
      .Int("n_ctx", m.seq_length())
      .Int("n_embd", m.hidden_size())
      .Int("n_layer", m.num_layers())
      .Int("n_head", m.num_heads());
  // null: GPT-2's 4 * n_embd (what the engine's default exports have always written).
  if (m.ffn_hidden_size() == Gpt2FfnHidden(m.hidden_size())) {
    config.Null("n_inner");
  } else {
    config.Int("n_inner", m.ffn_hidden_size());
  }
  config.String("activation_function", kHfActivation)
      .Number("layer_norm_epsilon", m.norm_epsilon())
      .Number("embd_pdrop", dropout)
      .Number("attn_pdrop", dropout)
      .Number("resid_pdrop", dropout)
      .Number("initializer_range", static_cast<float>(kInitStd))
      .Bool("scale_attn_weights", true)
      .Bool("scale_attn_by_inverse_layer_idx", false)
      .Bool("reorder_and_upcast_attn", false)
      .Bool("tie_word_embeddings", true)
      .Null("bos_token_id")
      .Null("eos_token_id")
      .Bool("use_cache", true)
      .String("torch_dtype", "float32");
  return config.Close() + "\n";  // a text file ends with a newline
}

absl::Status ExportHuggingFace(const std::map<std::string, FullTensor>& ours, const JobSpec& spec,
                               const std::string& out_dir) {
  ASSIGN_OR_RETURN(const SafetensorsFile file, ToHuggingFace(ours, spec.model()));
  std::error_code error;
  std::filesystem::create_directories(out_dir, error);
  if (error) {
    return absl::InternalError(
        absl::StrCat("cannot create directory ", out_dir, ": ", error.message()));
  }
  RETURN_IF_ERROR(WriteSafetensors(absl::StrCat(out_dir, "/", kHuggingFaceModelFile), file));
  ASSIGN_OR_RETURN(AtomicFileWriter config,
                   AtomicFileWriter::Create(absl::StrCat(out_dir, "/", kHuggingFaceConfigFile)));
  RETURN_IF_ERROR(config.Append(HuggingFaceConfigJson(spec)));
  return config.Commit();
}

absl::StatusOr<std::map<std::string, FullTensor>> FromHuggingFace(const HfTensorShapes& shapes,
                                                                  const HfTensorReader& read,
                                                                  const ModelSpec& model_spec,
                                                                  const std::set<std::string>* only,
                                                                  const HfTensorSink* sink) {
  const ModelSpec model = ResolvedModel(model_spec);
  RETURN_IF_ERROR(CheckModel(model));
  const HfFamily family = HfFamilyOf(model);
  const int64_t C = model.hidden_size(), V = model.vocab_size(), S = model.seq_length();
  const std::vector<TensorMapping> mappings = Mappings(model);
  // An untied output layer is a tensor of the model; a tied one is the token embedding,
  // which a file may hold twice (or only as the head).
  const bool untied = std::any_of(mappings.begin(), mappings.end(),
                                  [](const TensorMapping& m) { return m.output_layer; });
  std::string embedding_hf;
  for (const TensorMapping& m : mappings) {
    if (m.token_embedding) embedding_hf = m.hf;
  }

  // A multiple-choice BERT fine-tunes a pretrained one: the pretraining heads ("cls.*",
  // outside the base model) are not its parameters and are left in the file.
  const bool multiple_choice =
      model.family() == MODEL_FAMILY_BERT && model.bert_head() == BERT_HEAD_MULTIPLE_CHOICE;
  // Names without the prefix -> (the name as the file spells it, its shape).
  std::map<std::string, std::pair<std::string, const std::vector<int64_t>*>> by_name;
  std::string lm_head;  // the head's name as the file spells it, if it has one
  for (const auto& [name, shape] : shapes) {
    if (multiple_choice && absl::StartsWith(name, "cls.")) continue;
    absl::string_view bare = name;
    absl::ConsumePrefix(&bare, family.prefix);
    if (bare == kHfLmHead && !untied) {
      lm_head = name;
      continue;
    }
    if (IsSavedBuffer(bare)) continue;
    auto [it, inserted] = by_name.emplace(std::string(bare), std::make_pair(name, &shape));
    if (!inserted) {
      return absl::InvalidArgumentError(absl::StrCat("HF tensor '", it->second.first, "' and '",
                                                     name, "' name the same parameter"));
    }
  }
  // A file that holds the tied head without the token embedding (as transformers may save
  // a GPT2LMHeadModel): the head is the embedding, as transformers loads it.
  bool wte_from_head = false;
  if (!lm_head.empty() && by_name.count(embedding_hf) == 0) {
    by_name.emplace(embedding_hf, std::make_pair(lm_head, &shapes.at(lm_head)));
    wte_from_head = true;
  }

  std::map<std::string, FullTensor> ours;
  std::vector<float> hf_wte;  // kept only to compare a saved head with it
  for (const TensorMapping& m : mappings) {
    auto it = by_name.find(m.hf);
    if (it == by_name.end() && m.fine_tuning_head) continue;
    if (it == by_name.end()) {
      // A file of the engine's own names (train --save_weights) is the likely mix-up.
      const bool ours_named = shapes.count(m.ours) > 0;
      return absl::InvalidArgumentError(absl::StrCat(
          "HF tensor '", m.prefixed ? family.prefix : "", m.hf, "' is missing; ", m.spec_fields,
          " expect ", ShapeString(m.hf_shape),
          ours_named ? absl::StrCat("; the file has '", m.ours,
                                    "': it uses the engine's own tensor names (train "
                                    "--save_weights); `trainctl export` writes HuggingFace ones")
                     : std::string()));
    }
    const std::string& name = it->second.first;
    const std::vector<int64_t>& shape = *it->second.second;
    const bool two_d_of_width_c = shape.size() == 2 && shape[1] == C;
    if (m.rows == HfRows::kOursPadded && two_d_of_width_c && shape[0] != V) {
      return absl::InvalidArgumentError(absl::StrCat("HF tensor '", name, "' has ", shape[0],
                                                     " rows (tokens); model.vocab_size is ", V,
                                                     " (the vocabularies must be the same)"));
    }
    if (m.rows == HfRows::kHfLonger && two_d_of_width_c && shape[0] < S) {
      return absl::InvalidArgumentError(absl::StrCat("HF tensor '", name, "' has ", shape[0],
                                                     " rows (positions); model.seq_length ", S,
                                                     " needs at least ", S));
    }
    const bool shape_ok = m.rows == HfRows::kHfLonger ? two_d_of_width_c : shape == m.hf_shape;
    if (!shape_ok) {
      const std::string expected = m.rows == HfRows::kHfLonger
                                       ? absl::StrCat("[>= ", S, ", ", C, "]")
                                       : ShapeString(m.hf_shape);
      return absl::InvalidArgumentError(absl::StrCat("HF tensor '", name, "' has shape ",
                                                     ShapeString(shape), "; ", m.spec_fields,
                                                     " expect ", expected));
    }
    // A saved head is compared with wte, so wte is read when there is one to compare.
    const bool compare_head = m.token_embedding && !lm_head.empty() && !wte_from_head;
    if (only != nullptr && only->count(m.ours) == 0 && !compare_head) {
      by_name.erase(it);
      continue;
    }
    // One tensor's bytes at a time: the raw bytes go as soon as they are floats.
    std::vector<float> values;
    {
      ASSIGN_OR_RETURN(SafetensorsTensor tensor, read(name));
      ASSIGN_OR_RETURN(values, HfFloats(name, std::move(tensor)));
    }
    // For wpe, the first seq_length positions (the leading rows).
    if (only == nullptr || only->count(m.ours) > 0) {
      // A tensor already in our layout is taken as it is (one copy, not two).
      const bool as_is = m.layout == HfLayout::kSame && !compare_head &&
                         static_cast<int64_t>(values.size()) == Volume(m.our_shape);
      FullTensor tensor{m.our_shape, as_is ? std::move(values) : FromHfLayout(values.data(), m)};
      if (sink != nullptr) {
        RETURN_IF_ERROR((*sink)(m.ours, std::move(tensor)));
      } else {
        ours[m.ours] = std::move(tensor);
      }
    }
    if (compare_head) hf_wte = std::move(values);
    by_name.erase(it);
  }

  if (!lm_head.empty() && !wte_from_head) {
    // GPT2LMHeadModel saves the tied head when asked to; it must be wte itself.
    const std::vector<int64_t>& head_shape = shapes.at(lm_head);
    absl::StatusOr<SafetensorsTensor> tensor = read(lm_head);
    if (!tensor.ok()) return tensor.status();
    absl::StatusOr<std::vector<float>> head = HfFloats(lm_head, *std::move(tensor));
    if (!head.ok()) return head.status();
    if (head_shape != std::vector<int64_t>{V, C} || *head != hf_wte) {
      return absl::InvalidArgumentError(absl::StrCat(
          "HF tensor '", lm_head, "' (shape ", ShapeString(head_shape),
          ") differs from the token embedding: the spec ties them (model.tie_word_embeddings "
          "true: the output layer is the embedding)"));
    }
  }
  if (!by_name.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("HF tensor '", by_name.begin()->second.first, "' is not a parameter of a ",
                     family.name, " with model.num_layers ", model.num_layers(), " (layers 0 to ",
                     model.num_layers() - 1, untied ? "" : ", tied output layer", ")"));
  }
  return ours;
}

absl::StatusOr<std::map<std::string, FullTensor>> FromHuggingFace(const SafetensorsFile& file,
                                                                  const ModelSpec& model) {
  HfTensorShapes shapes;
  for (const auto& [name, tensor] : file.tensors) shapes[name] = tensor.shape;
  const HfTensorReader read =
      [&file](const std::string& name) -> absl::StatusOr<SafetensorsTensor> {
    return file.tensors.at(name);
  };
  return FromHuggingFace(shapes, read, model);
}

}  // namespace mtrain
