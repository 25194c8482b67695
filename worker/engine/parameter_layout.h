// Where every parameter of one rank lives in the rank's single contiguous buffer.
//
// All parameters sit in one flat buffer (and their gradients in another of the same
// layout), so gradient all-reduce, clipping, the optimizer and checkpoints are operations
// on flat ranges. Each entry also records the tensor's GLOBAL shape and where this rank's
// shard sits in it, which is what lets initialisation and checkpoints be independent of
// the parallel layout.
//
// Which tensors a rank holds, their names, global shapes, tensor-parallel split and
// initialisation come from model/parameter_table.h; this file places them.
#ifndef MTRAIN_WORKER_ENGINE_PARAMETER_LAYOUT_H_
#define MTRAIN_WORKER_ENGINE_PARAMETER_LAYOUT_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/types/span.h"
#include "checkpoint/sharded_tensor.h"
#include "model/parameter_table.h"
#include "worker/engine/model_shape.h"

namespace mtrain {

// A parameter: its shard as the checkpoint library describes it (name, place in the flat
// buffer, place in the global tensor), plus what only the engine needs.
struct ParamTensor : ShardedTensor {
  ParameterRole role = ParameterRole::kTokenEmbedding;
  int layer = -1;  // the global layer; -1 outside the layers
  ParamInit init = ParamInit::kNormal;
  // AdamW's decoupled decay applies to weight matrices and embeddings, not to biases or
  // normalisation gains.
  bool weight_decay = false;
  // The first and the last pipeline stage each hold a copy (the token embedding as the tied
  // output layer): their gradients are summed between the stages.
  bool copy_on_first_and_last_stage = false;
  // Held by an earlier chunk of the same rank, whose elements this chunk reads and whose
  // gradient it adds to (ZB-V's stage 0 holds the embedding and the head: one copy).
  bool shared_with_earlier_chunk = false;
};

// Typed views into a flat buffer (parameters or gradients); shapes are local.
template <typename T>
struct LayerView {
  T* ln1_gamma = nullptr;       // [C]
  T* ln1_beta = nullptr;        // [C]
  T* qkv_weight = nullptr;      // [3 * C_local, C]
  T* qkv_bias = nullptr;        // [3 * C_local]
  T* proj_weight = nullptr;     // [C, C_local]
  T* proj_bias = nullptr;       // [C]
  T* ln2_gamma = nullptr;       // [C]
  T* ln2_beta = nullptr;        // [C]
  T* fc_weight = nullptr;       // [F_local, C]
  T* fc_bias = nullptr;         // [F_local]
  T* fc_proj_weight = nullptr;  // [C, F_local]
  T* fc_proj_bias = nullptr;    // [C]
  // Llama-style layers (model/parameter_table.h); null for GPT-2.
  T* q_weight = nullptr;     // [Q_local, C], then k_weight and v_weight contiguous
  T* k_weight = nullptr;     // [KV_local, C]
  T* v_weight = nullptr;     // [KV_local, C]
  T* q_bias = nullptr;       // [Q_local], then k_bias and v_bias contiguous
  T* k_bias = nullptr;       // [KV_local]
  T* v_bias = nullptr;       // [KV_local]
  T* gate_weight = nullptr;  // [F_local, C], then up_weight contiguous
  T* up_weight = nullptr;    // [F_local, C]
};

template <typename T>
struct ModelView {
  T* wte = nullptr;                  // [V_local, C]; null unless first or last stage
  T* wpe = nullptr;                  // [S, C]; null unless first stage
  std::vector<LayerView<T>> layers;  // this rank's layers, in order
  T* lnf_gamma = nullptr;            // [C]; last stage only
  T* lnf_beta = nullptr;             // [C]
  T* output_weight = nullptr;        // [V_local, C]; an untied output layer, last stage only
  // BERT (model/parameter_table.h): first stage, then last stage.
  T* tte = nullptr;                                    // [token types, C]
  T *emb_ln_gamma = nullptr, *emb_ln_beta = nullptr;   // [C]; post placement only
  T *pooler_weight = nullptr, *pooler_bias = nullptr;  // [C, C], [C]
  T *mlm_weight = nullptr, *mlm_bias = nullptr;        // [C, C], [C]
  T *mlm_ln_gamma = nullptr, *mlm_ln_beta = nullptr;   // [C]
  T* mlm_output_bias = nullptr;                        // [V_local]
  T *sop_weight = nullptr, *sop_bias = nullptr;        // [2, C], [2]
  // BERT's multiple-choice head, in place of the masked-LM and sentence-order heads.
  T *choice_weight = nullptr, *choice_bias = nullptr;  // [1, C], [1]
};

// The layer's projections as the engines run them, whatever the family: the attention
// input projection's weight [Ql + 2 KVl, C] and bias (null without biases), one GEMM over
// GPT-2's fused qkv tensor or Llama's q, k and v shards, which sit one after another in the
// buffer (model/parameter_table.h); the MLP's input projection [Fl, C] (GPT-2's fc) or
// [2 Fl, C] (Llama's adjacent [gate | up]) and its bias.
template <typename T>
T* QkvWeight(const LayerView<T>& w) {
  return w.qkv_weight != nullptr ? w.qkv_weight : w.q_weight;
}
template <typename T>
T* QkvBias(const LayerView<T>& w) {
  return w.qkv_weight != nullptr ? w.qkv_bias : w.q_bias;
}
template <typename T>
T* MlpInWeight(const LayerView<T>& w) {
  return w.fc_weight != nullptr ? w.fc_weight : w.gate_weight;
}
template <typename T>
T* MlpInBias(const LayerView<T>& w) {
  return w.fc_weight != nullptr ? w.fc_bias : nullptr;
}
// The output layer [V_local, C]: an untied one, or the token embedding.
template <typename T>
T* OutputWeight(const ModelView<T>& v) {
  return v.output_weight != nullptr ? v.output_weight : v.wte;
}

class ParameterLayout {
 public:
  // Tensor offsets start at `base_offset`: a rank holding several model chunks
  // (interleaved pipeline) lays them out one after another in one buffer. A tensor both
  // held by `earlier` (a chunk before this one on the rank) and by this chunk as the tied
  // copy of the first and the last stage is not laid out again: this chunk's entry points
  // at the earlier one's elements (shared_with_earlier_chunk).
  ParameterLayout(const ModelShape& shape, const ModelPlacement& placement, size_t base_offset = 0,
                  const ParameterLayout* earlier = nullptr);

  const std::vector<ParamTensor>& tensors() const { return tensors_; }
  // Elements of this layout, which occupy [begin_offset(), end_offset()) of the buffer.
  size_t total_size() const { return end_offset_ - begin_offset_; }
  size_t begin_offset() const { return begin_offset_; }
  size_t end_offset() const { return end_offset_; }
  const ModelShape& shape() const { return shape_; }
  const ModelPlacement& placement() const { return placement_; }

  // Null if this rank does not hold the tensor.
  const ParamTensor* Find(const std::string& name) const;

  template <typename T>
  ModelView<T> View(T* base) const;

 private:
  void Add(const ParameterEntry& entry, const ParamTensor* shared = nullptr);

  ModelShape shape_;
  ModelPlacement placement_;
  std::vector<ParamTensor> tensors_;
  size_t begin_offset_ = 0;
  size_t end_offset_ = 0;
};

// In the header: the CUDA engine views device buffers of its own element types.
template <typename T>
ModelView<T> ParameterLayout::View(T* base) const {
  ModelView<T> view;
  view.layers.resize(placement_.num_layers);
  for (const ParamTensor& tensor : tensors_) {
    T* data = base + tensor.offset;
    LayerView<T>* layer =
        tensor.layer >= 0 ? &view.layers[tensor.layer - placement_.first_layer] : nullptr;
    switch (tensor.role) {
      case ParameterRole::kTokenEmbedding:
        view.wte = data;
        break;
      case ParameterRole::kPositionEmbedding:
        view.wpe = data;
        break;
      case ParameterRole::kAttentionNormWeight:
        layer->ln1_gamma = data;
        break;
      case ParameterRole::kAttentionNormBias:
        layer->ln1_beta = data;
        break;
      case ParameterRole::kQkvWeight:
        layer->qkv_weight = data;
        break;
      case ParameterRole::kQkvBias:
        layer->qkv_bias = data;
        break;
      case ParameterRole::kAttentionOutWeight:
        layer->proj_weight = data;
        break;
      case ParameterRole::kAttentionOutBias:
        layer->proj_bias = data;
        break;
      case ParameterRole::kMlpNormWeight:
        layer->ln2_gamma = data;
        break;
      case ParameterRole::kMlpNormBias:
        layer->ln2_beta = data;
        break;
      case ParameterRole::kMlpInWeight:
        layer->fc_weight = data;
        break;
      case ParameterRole::kMlpInBias:
        layer->fc_bias = data;
        break;
      case ParameterRole::kMlpOutWeight:
        layer->fc_proj_weight = data;
        break;
      case ParameterRole::kMlpOutBias:
        layer->fc_proj_bias = data;
        break;
      case ParameterRole::kFinalNormWeight:
        view.lnf_gamma = data;
        break;
      case ParameterRole::kFinalNormBias:
        view.lnf_beta = data;
        break;
      case ParameterRole::kQueryWeight:
        layer->q_weight = data;
        break;
      case ParameterRole::kKeyWeight:
        layer->k_weight = data;
        break;
      case ParameterRole::kValueWeight:
        layer->v_weight = data;
        break;
      case ParameterRole::kQueryBias:
        layer->q_bias = data;
        break;
      case ParameterRole::kKeyBias:
        layer->k_bias = data;
        break;
      case ParameterRole::kValueBias:
        layer->v_bias = data;
        break;
      case ParameterRole::kMlpGateWeight:
        layer->gate_weight = data;
        break;
      case ParameterRole::kMlpUpWeight:
        layer->up_weight = data;
        break;
      case ParameterRole::kOutputWeight:
        view.output_weight = data;
        break;
      case ParameterRole::kTokenTypeEmbedding:
        view.tte = data;
        break;
      case ParameterRole::kEmbeddingNormWeight:
        view.emb_ln_gamma = data;
        break;
      case ParameterRole::kEmbeddingNormBias:
        view.emb_ln_beta = data;
        break;
      case ParameterRole::kPoolerWeight:
        view.pooler_weight = data;
        break;
      case ParameterRole::kPoolerBias:
        view.pooler_bias = data;
        break;
      case ParameterRole::kMlmTransformWeight:
        view.mlm_weight = data;
        break;
      case ParameterRole::kMlmTransformBias:
        view.mlm_bias = data;
        break;
      case ParameterRole::kMlmNormWeight:
        view.mlm_ln_gamma = data;
        break;
      case ParameterRole::kMlmNormBias:
        view.mlm_ln_beta = data;
        break;
      case ParameterRole::kMlmOutputBias:
        view.mlm_output_bias = data;
        break;
      case ParameterRole::kSentenceOrderWeight:
        view.sop_weight = data;
        break;
      case ParameterRole::kSentenceOrderBias:
        view.sop_bias = data;
        break;
      case ParameterRole::kChoiceWeight:
        view.choice_weight = data;
        break;
      case ParameterRole::kChoiceBias:
        view.choice_bias = data;
        break;
    }
  }
  return view;
}

// The shards of `tensors` as the checkpoint library takes them (WriteRankShards,
// LoadRankTensors, FilesOverlapping): copies without the engine-only fields.
std::vector<ShardedTensor> ShardsOf(absl::Span<const ParamTensor> tensors);

}  // namespace mtrain

#endif  // MTRAIN_WORKER_ENGINE_PARAMETER_LAYOUT_H_
