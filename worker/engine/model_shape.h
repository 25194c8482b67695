// The sizes of a model (model/'s TransformerConfig) and which part of it one rank holds.
#ifndef MTRAIN_WORKER_ENGINE_MODEL_SHAPE_H_
#define MTRAIN_WORKER_ENGINE_MODEL_SHAPE_H_

#include "absl/status/statusor.h"
#include "model/transformer_config.h"
#include "proto/job_spec.pb.h"

namespace mtrain {

// The global model (what a single rank would hold).
using ModelShape = TransformerConfig;

// The part of the model one rank holds: a slice of the heads, MLP width and vocabulary
// (tensor parallel), a run of layers (pipeline parallel).
struct ModelPlacement {
  int tensor_size = 1;
  int tensor_rank = 0;
  int first_layer = 0;        // global index of this rank's first layer
  int num_layers = 0;         // layers on this rank
  bool has_embedding = true;  // first pipeline stage: token + position embedding
  bool has_head = true;       // last pipeline stage: final LayerNorm, tied output layer, loss

  // Local sizes.
  int local_heads(const ModelShape& s) const { return s.num_heads / tensor_size; }
  int local_hidden(const ModelShape& s) const { return s.hidden / tensor_size; }
  int local_ffn(const ModelShape& s) const { return s.ffn_hidden / tensor_size; }
  int local_vocab(const ModelShape& s) const { return s.padded_vocab / tensor_size; }
  // The attention's widths: query heads, key-value heads (grouped-query attention: fewer),
  // the fused projection's output [q | k | v], and the MLP's input projection (a gated MLP:
  // [gate | up], twice the FFN width).
  int local_kv_heads(const ModelShape& s) const { return s.num_kv_heads / tensor_size; }
  int local_query(const ModelShape& s) const {
    return static_cast<int>(s.query_width() / tensor_size);
  }
  int local_kv(const ModelShape& s) const { return static_cast<int>(s.kv_width() / tensor_size); }
  int local_qkv(const ModelShape& s) const { return local_query(s) + 2 * local_kv(s); }
  int local_mlp_in(const ModelShape& s) const { return (s.gated_mlp ? 2 : 1) * local_ffn(s); }
  int vocab_start(const ModelShape& s) const { return tensor_rank * local_vocab(s); }
};

// A placement holding the whole model (one rank).
ModelPlacement WholeModel(const ModelShape& shape);

// The shape of a validated spec (defaults applied).
ModelShape ShapeFromSpec(const JobSpec& spec);

}  // namespace mtrain

#endif  // MTRAIN_WORKER_ENGINE_MODEL_SHAPE_H_
