// Where every parameter of one rank lives in the rank's single contiguous buffer.
//
// All parameters sit in one flat buffer (and their gradients in another of the same
// layout), so gradient all-reduce, clipping, the optimizer and checkpoints are operations
// on flat ranges. Each entry also records the tensor's GLOBAL shape and where this rank's
// shard sits in it, which is what lets initialisation and checkpoints be independent of
// the parallel layout.
//
// Tensor names and global shapes (C hidden, S seq, Vp padded vocab; per layer i):
//   wte                      [Vp, C]      token embedding, tied output layer; split on Vp
//   wpe                      [S, C]       position embedding
//   layers.i.ln1.weight/bias [C]
//   layers.i.attn.qkv.weight [3, C, C]    Q, K, V blocks of [out=C, in=C]; split on dim 1
//   layers.i.attn.qkv.bias   [3, C]       split on dim 1
//   layers.i.attn.proj.weight [C, C]      [out, in]; split on in (row parallel)
//   layers.i.attn.proj.bias  [C]
//   layers.i.ln2.weight/bias [C]
//   layers.i.mlp.fc.weight   [4C, C]      split on out (column parallel)
//   layers.i.mlp.fc.bias     [4C]         split
//   layers.i.mlp.proj.weight [C, 4C]      split on in (row parallel)
//   layers.i.mlp.proj.bias   [C]
//   lnf.weight/bias          [C]
#ifndef MTRAIN_WORKER_ENGINE_PARAMETER_LAYOUT_H_
#define MTRAIN_WORKER_ENGINE_PARAMETER_LAYOUT_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "checkpoint/sharded_tensor.h"
#include "worker/engine/model_shape.h"

namespace mtrain {

enum class ParamInit {
  kNormal,        // N(0, 0.02)
  kScaledNormal,  // N(0, 0.02 / sqrt(2 L)): output projections of attention and MLP
  kOnes,          // LayerNorm gains
  kZeros,         // biases
};

// A parameter: its shard as the checkpoint library describes it (name, place in the flat
// buffer, place in the global tensor), plus what only the engine needs.
struct ParamTensor : ShardedTensor {
  ParamInit init = ParamInit::kNormal;
  // AdamW's decoupled decay applies to weight matrices and embeddings, not to biases or
  // LayerNorm parameters.
  bool weight_decay = false;
};

// Typed views into a flat buffer (parameters or gradients); shapes are local.
template <typename T>
struct LayerView {
  T* ln1_gamma;       // [C]
  T* ln1_beta;        // [C]
  T* qkv_weight;      // [3 * C_local, C]
  T* qkv_bias;        // [3 * C_local]
  T* proj_weight;     // [C, C_local]
  T* proj_bias;       // [C]
  T* ln2_gamma;       // [C]
  T* ln2_beta;        // [C]
  T* fc_weight;       // [4C_local, C]
  T* fc_bias;         // [4C_local]
  T* fc_proj_weight;  // [C, 4C_local]
  T* fc_proj_bias;    // [C]
};

template <typename T>
struct ModelView {
  T* wte = nullptr;                  // [V_local, C]; null unless first or last stage
  T* wpe = nullptr;                  // [S, C]; null unless first stage
  std::vector<LayerView<T>> layers;  // this rank's layers, in order
  T* lnf_gamma = nullptr;            // [C]; last stage only
  T* lnf_beta = nullptr;             // [C]
};

class ParameterLayout {
 public:
  // Tensor offsets start at `base_offset`: a rank holding several model chunks
  // (interleaved pipeline) lays them out one after another in one buffer.
  ParameterLayout(const ModelShape& shape, const ModelPlacement& placement, size_t base_offset = 0);

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
  size_t Add(std::string name, std::vector<int64_t> global_shape, std::vector<int64_t> local_shape,
             std::vector<int64_t> global_offset, ParamInit init, bool weight_decay);

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
  auto at = [&](const std::string& name) -> T* {
    const ParamTensor* tensor = Find(name);
    return tensor == nullptr ? nullptr : base + tensor->offset;
  };
  view.wte = at("wte");
  view.wpe = at("wpe");
  for (int i = 0; i < placement_.num_layers; ++i) {
    const std::string p = absl::StrCat("layers.", placement_.first_layer + i, ".");
    LayerView<T> layer;
    layer.ln1_gamma = at(p + "ln1.weight");
    layer.ln1_beta = at(p + "ln1.bias");
    layer.qkv_weight = at(p + "attn.qkv.weight");
    layer.qkv_bias = at(p + "attn.qkv.bias");
    layer.proj_weight = at(p + "attn.proj.weight");
    layer.proj_bias = at(p + "attn.proj.bias");
    layer.ln2_gamma = at(p + "ln2.weight");
    layer.ln2_beta = at(p + "ln2.bias");
    layer.fc_weight = at(p + "mlp.fc.weight");
    layer.fc_bias = at(p + "mlp.fc.bias");
    layer.fc_proj_weight = at(p + "mlp.proj.weight");
    layer.fc_proj_bias = at(p + "mlp.proj.bias");
    view.layers.push_back(layer);
  }
  view.lnf_gamma = at("lnf.weight");
  view.lnf_beta = at("lnf.bias");
  return view;
}

// The shards of `tensors` as the checkpoint library takes them (WriteRankShards,
// LoadRankTensors, FilesOverlapping): copies without the engine-only fields.
std::vector<ShardedTensor> ShardsOf(absl::Span<const ParamTensor> tensors);

}  // namespace mtrain

#endif  // MTRAIN_WORKER_ENGINE_PARAMETER_LAYOUT_H_
