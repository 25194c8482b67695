// The config.json of a HuggingFace Llama (LlamaForCausalLM), both ways: the one an export
// writes, and the check of an imported one against the job's model (hf_gpt2.h and
// hf_gpt2_import.h call these for model.family MODEL_FAMILY_LLAMA).
#ifndef MTRAIN_CHECKPOINT_HF_LLAMA_CONFIG_H_
#define MTRAIN_CHECKPOINT_HF_LLAMA_CONFIG_H_

#include <string>
#include <vector>

#include "google/protobuf/struct.pb.h"
#include "proto/job_spec.pb.h"

namespace mtrain {

// A config.json with which LlamaForCausalLM computes exactly our model in fp32:
// model_type llama, the sizes, num_key_value_heads, intermediate_size, hidden_act silu,
// max_position_embeddings = seq_length, rms_norm_eps, the rotary base (both as
// rope_parameters, transformers 5's, and as rope_theta, which 4.x reads), attention_bias =
// model.linear_bias, mlp_bias false, tie_word_embeddings, attention_dropout =
// train.dropout (HF's Llama has no other dropout), no bos/eos ids.
std::string HuggingFaceLlamaConfigJson(const JobSpec& spec);

// What in `config` (a parsed config.json) makes transformers compute another model than
// `model` (defaults applied) describes, one line per setting, naming it: model_type other
// than llama; num_hidden_layers, hidden_size, num_attention_heads, num_key_value_heads,
// intermediate_size, vocab_size or head_dim not the spec's; max_position_embeddings below
// model.seq_length; rms_norm_eps or the rotary base not the spec's; any rotary scaling
// (rope_scaling, or a rope_type other than "default": Llama 3.1's "llama3" included);
// hidden_act other than silu; attention_bias other than model.linear_bias; mlp_bias
// true; tie_word_embeddings other than the spec's. Absent settings take transformers'
// LlamaConfig defaults (intermediate_size 11008, rms_norm_eps 1e-6, rope_theta 10000, ...).
std::vector<std::string> HuggingFaceLlamaConfigProblems(const google::protobuf::Struct& config,
                                                        const ModelSpec& model);

}  // namespace mtrain

#endif  // MTRAIN_CHECKPOINT_HF_LLAMA_CONFIG_H_
