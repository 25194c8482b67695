// Our GPT parameters <-> HuggingFace transformers' GPT-2 (GPT2LMHeadModel), both ways.
//
// Our model IS GPT-2 (pre-LN blocks, LayerNorm eps 1e-5, GeLU in its tanh form, learned
// positions, output layer tied to wte, Q/K/V blocks with heads contiguous inside each), so
// the mapping is a renaming plus layout changes, exact in fp32 (docs/HUGGINGFACE.md has
// the table):
//   - HF stores linear weights as Conv1D [in, out]; ours are [out, in]: transposed.
//     Our qkv [3, C, C] is [3C (out), C (in)]: c_attn.weight is its transpose [C, 3C].
//   - wte: ours has the padded vocabulary (a multiple of 128 * tensor), HF the real one;
//     export drops the padding rows, import returns the real rows only (the checkpoint
//     loader zero-fills the padding: LoadRankTensors).
//   - wpe: HF may hold more positions (n_positions) than our seq_length; import keeps the
//     first seq_length.
//
// Export (a checkpoint's parameters to a directory transformers loads):
//   ASSIGN_OR_RETURN(Checkpoint checkpoint, OpenCheckpoint(checkpoint_dir));
//   ASSIGN_OR_RETURN(auto params, ReadFullParameters(checkpoint));  // checkpoint_tensors.h
//   RETURN_IF_ERROR(ExportHuggingFace(params, spec, out_dir));
//   # python: GPT2LMHeadModel.from_pretrained(out_dir)
//
// Import (a HuggingFace GPT-2 as a job's initial weights):
//   ASSIGN_OR_RETURN(SafetensorsFile file, ReadSafetensors(path));
//   ASSIGN_OR_RETURN(auto params, FromHuggingFace(file, spec.model()));
//   ASSIGN_OR_RETURN(auto manifest, WriteParameterCheckpoint(dir, job_id, 0, params, seed));
//
// A ModelSpec's omitted fields take the job spec's defaults (job_spec_defaults.h), as a
// submitted job's would. The number of heads is not visible in the weights: an import
// cannot check it, the caller pairs the file with the right num_heads (the n_head of its
// config.json).
//
// Errors are INVALID_ARGUMENT naming the tensor (ours or HF's, as spelled by the caller),
// the shape found, the shape expected and the spec field that decides it; INTERNAL for
// I/O errors. All functions are thread-safe (no shared state).
#ifndef MTRAIN_CHECKPOINT_HF_INTERCHANGE_H_
#define MTRAIN_CHECKPOINT_HF_INTERCHANGE_H_

#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "checkpoint/full_tensor.h"
#include "checkpoint/safetensors.h"
#include "proto/job_spec.pb.h"

namespace mtrain {

// The files of an exported directory, the names transformers' from_pretrained looks for.
inline constexpr char kHuggingFaceModelFile[] = "model.safetensors";
inline constexpr char kHuggingFaceConfigFile[] = "config.json";

// Our full tensors (names and global shapes of parameter_layout.h; wte may have any
// number of rows >= model.vocab_size) as HuggingFace GPT-2 tensors: F32, names with the
// "transformer." prefix, Conv1D layouts, wte cut to model.vocab_size rows, no lm_head
// (tied). Metadata {"format": "pt"}, which transformers requires of a safetensors file.
// INVALID_ARGUMENT naming the tensor if one is missing, has another shape than the spec
// implies (the shape found and the shape expected), holds a number of values its shape
// does not, or is not a parameter of the model (e.g. a layer >= model.num_layers).
absl::StatusOr<SafetensorsFile> ToHuggingFace(const std::map<std::string, FullTensor>& ours,
                                              const ModelSpec& model);

// A config.json with which GPT2LMHeadModel computes exactly our model in fp32:
// model_type gpt2, vocab_size, n_positions = n_ctx = seq_length, n_embd, n_layer, n_head,
// activation_function "gelu_new" (GeLU's tanh form), layer_norm_epsilon 1e-5, attention
// scaled by 1/sqrt(head_dim) only, the three dropouts = train.dropout, tied embeddings.
// bos/eos token ids are null: our tokenizers have no special tokens (GPT-2's default
// 50256 would lie outside a small vocabulary).
std::string HuggingFaceConfigJson(const JobSpec& spec);

// Creates `out_dir` if needed and writes `out_dir`/model.safetensors (ToHuggingFace)
// and `out_dir`/config.json (HuggingFaceConfigJson). Deterministic: the same tensors
// and spec give byte-identical files. Errors as ToHuggingFace; INTERNAL naming the
// path for I/O errors.
absl::Status ExportHuggingFace(const std::map<std::string, FullTensor>& ours, const JobSpec& spec,
                               const std::string& out_dir);

// The inverse: a HuggingFace GPT-2 file (GPT2Model or GPT2LMHeadModel, names with or
// without the "transformer." prefix) as our full tensors. Rules:
//   - every tensor of a GPT-2 with model.num_layers / hidden_size must be present, and no
//     other, except the ignored "lm_head.weight" (only if it equals wte: an untied output
//     layer is not supported; without wte it is wte) and the attention-mask buffers
//     "h.<i>.attn.bias" / "h.<i>.attn.masked_bias" that older transformers saved;
//   - dtypes F32, F64, F16 and BF16 are converted to float (exactly: each is a subset of
//     float except F64, which is rounded);
//   - wte must have exactly model.vocab_size rows and comes back as [vocab_size, C] (the
//     loader pads it to the job's padded vocabulary with zero rows);
//   - wpe must have at least model.seq_length rows; the first seq_length are kept;
//   - every other shape must be the one model.hidden_size implies.
// INVALID_ARGUMENT naming the HF tensor, the shape found, the shape expected and the spec
// field for any violation. A BERT with model.bert_head BERT_HEAD_MULTIPLE_CHOICE fine-tunes
// a pretrained one: a file's pretraining heads ("cls.*") are ignored and a file without the
// classifier ("classifier.weight/bias", HF BertForMultipleChoice's) leaves it out of the
// result, so that it keeps the job's seeded initialisation.
absl::StatusOr<std::map<std::string, FullTensor>> FromHuggingFace(const SafetensorsFile& file,
                                                                  const ModelSpec& model);

// The same over tensors read one at a time (a file or the shards of a sharded checkpoint,
// hf_import.h): `shapes` names every tensor with its shape, `read` gives one tensor's
// bytes, called once per tensor used, so at most one raw tensor is held beside the result.
// A file with "lm_head.weight" and no token embedding (a GPT2LMHeadModel saved with its
// tied head only) takes the head as wte, as transformers loads it.
using HfTensorShapes = std::map<std::string, std::vector<int64_t>>;
using HfTensorReader = std::function<absl::StatusOr<SafetensorsTensor>(const std::string& name)>;
// `only`, when given, names the tensors (ours) to return: the others are still checked
// (present, right shape) but never read, so a pipeline stage holds its own layers only.
// `sink`, when given, takes each converted tensor (ours) as soon as it is read, instead of
// the returned map (then empty): a tensor-parallel rank keeps its slice of it and lets the
// rest go, holding one whole tensor at a time. Its error ends the import.
using HfTensorSink = std::function<absl::Status(const std::string& name, FullTensor tensor)>;
absl::StatusOr<std::map<std::string, FullTensor>> FromHuggingFace(
    const HfTensorShapes& shapes, const HfTensorReader& read, const ModelSpec& model,
    const std::set<std::string>* only = nullptr, const HfTensorSink* sink = nullptr);

}  // namespace mtrain

#endif  // MTRAIN_CHECKPOINT_HF_INTERCHANGE_H_
