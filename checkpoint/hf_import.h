// Importing a HuggingFace GPT-2 checkpoint as users have one (train.init_from, trainctl
// submit --init-from): a .safetensors file, a transformers save_pretrained directory
// (model.safetensors, or model.safetensors.index.json and its shards, beside
// config.json), or a shard index file itself.
//
// The config.json beside the weights (or in the directory given) is checked against the
// job's model before a tensor is read: the weights cannot show the number of heads, the
// layer norm's epsilon, the activation or the attention scaling, and a model that differs
// there trains as a different model without any error. Every setting that changes the
// computation must be ours (hf_interchange.h's HuggingFaceConfigJson writes them).
//
// Tensors are read one at a time (SafetensorsReader), so the import holds the result
// (every parameter in float) plus one tensor's bytes, not copies of whole files.
//
//   ASSIGN_OR_RETURN(auto params, ImportHuggingFace("/models/gpt2", spec.model()));
#ifndef MTRAIN_CHECKPOINT_HF_IMPORT_H_
#define MTRAIN_CHECKPOINT_HF_IMPORT_H_

#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "checkpoint/full_tensor.h"
#include "checkpoint/hf_interchange.h"
#include "proto/job_spec.pb.h"

namespace mtrain {

inline constexpr char kHuggingFaceIndexFile[] = "model.safetensors.index.json";

struct HuggingFaceFiles {
  // The weights: one file, or the shards an index names (sorted, each once).
  std::vector<std::string> safetensors;
  // For a sharded checkpoint: tensor name -> the shard (a path of `safetensors`).
  std::map<std::string, std::string> weight_map;
  // config.json beside the weights, or empty when there is none.
  std::string config;
};

// Where the files of `path` are. NOT_FOUND naming the path for a directory with neither
// model.safetensors nor an index, or an index naming a shard that does not exist;
// INVALID_ARGUMENT for an index that is not {"weight_map": {tensor: file}} or names a
// shard outside its directory ("../x", "/x").
absl::StatusOr<HuggingFaceFiles> FindHuggingFaceFiles(const std::string& path);

// INVALID_ARGUMENT listing every setting of `config_json` (config.json's text, from
// `config_path`) that makes transformers compute another model than `model` describes:
// model_type other than gpt2, n_layer, n_embd, n_head, vocab_size not the spec's,
// n_positions below model.seq_length, layer_norm_epsilon other than 1e-5, an activation
// other than GeLU's tanh form (gelu_new, gelu_pytorch_tanh, gelu_fast), n_inner other
// than 4 x n_embd, scale_attn_weights false, scale_attn_by_inverse_layer_idx true,
// tie_word_embeddings false, add_cross_attention true. Settings it omits take
// transformers' GPT2Config defaults, which match ours.
absl::Status CheckHuggingFaceConfig(absl::string_view config_json, const std::string& config_path,
                                    const ModelSpec& model);

// FindHuggingFaceFiles, CheckHuggingFaceConfig when there is a config.json, then
// FromHuggingFace (hf_interchange.h) over every shard's tensors read one at a time. A tensor
// in two shards, or one the index places in a shard that lacks it, is DATA_LOSS naming
// both.
// `only` and `sink`: as FromHuggingFace's (the tensors a rank holds; each taken as
// it is read).
absl::StatusOr<std::map<std::string, FullTensor>> ImportHuggingFace(
    const std::string& path, const ModelSpec& model, const std::set<std::string>* only = nullptr,
    const HfTensorSink* sink = nullptr);

}  // namespace mtrain

#endif  // MTRAIN_CHECKPOINT_HF_IMPORT_H_
