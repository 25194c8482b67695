// The config.json of a HuggingFace BERT, both ways: MegatronBertForPreTraining for
// model.layernorm_placement LAYERNORM_PLACEMENT_PRE (Megatron's rearranged LayerNorm) and
// BertForPreTraining for LAYERNORM_PLACEMENT_POST (the original); with model.bert_head
// BERT_HEAD_MULTIPLE_CHOICE, MegatronBertForMultipleChoice and BertForMultipleChoice.
// hf_interchange.h and hf_import.h call these for model.family MODEL_FAMILY_BERT.
#ifndef MTRAIN_CHECKPOINT_HF_BERT_CONFIG_H_
#define MTRAIN_CHECKPOINT_HF_BERT_CONFIG_H_

#include <string>
#include <vector>

#include "google/protobuf/struct.pb.h"
#include "proto/job_spec.pb.h"

namespace mtrain {

// A config.json with which transformers computes exactly our model in fp32:
// model_type megatron-bert (pre) or bert (post), the sizes, intermediate_size,
// hidden_act gelu (exact), max_position_embeddings = seq_length, type_vocab_size 2,
// layer_norm_eps, absolute positions, the dropouts = train.dropout, tied embeddings.
std::string HuggingFaceBertConfigJson(const JobSpec& spec);

// What in `config` (a parsed config.json) makes transformers compute another model than
// `model` (defaults applied) describes, one line per setting, naming it: model_type other
// than the placement's (megatron-bert for pre, bert for post); num_hidden_layers,
// hidden_size, num_attention_heads, intermediate_size or vocab_size not the spec's;
// max_position_embeddings below model.seq_length; type_vocab_size other than 2;
// layer_norm_eps not model.norm_epsilon; hidden_act other than "gelu";
// position_embedding_type other than "absolute"; tie_word_embeddings false. Absent
// settings take transformers' BertConfig defaults (intermediate_size 3072,
// layer_norm_eps 1e-12, max_position_embeddings 512, type_vocab_size 2, ...).
std::vector<std::string> HuggingFaceBertConfigProblems(const google::protobuf::Struct& config,
                                                       const ModelSpec& model);

}  // namespace mtrain

#endif  // MTRAIN_CHECKPOINT_HF_BERT_CONFIG_H_
