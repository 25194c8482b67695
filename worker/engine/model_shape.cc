#include "worker/engine/model_shape.h"

#include "spec/job_spec_arithmetic.h"

namespace mtrain {

ModelPlacement WholeModel(const ModelShape& shape) {
  ModelPlacement placement;
  placement.num_layers = shape.num_layers;
  return placement;
}

ModelShape ShapeFromSpec(const JobSpec& spec) {
  ModelShape shape;
  shape.num_layers = spec.model().num_layers();
  shape.num_heads = spec.model().num_heads();
  shape.hidden = spec.model().hidden_size();
  shape.seq_length = spec.model().seq_length();
  shape.vocab = spec.model().vocab_size();
  // Validated specs keep it far below INT_MAX (rank_allocation_estimate refuses more).
  shape.padded_vocab = static_cast<int>(PaddedVocabSize(shape.vocab, spec.parallel().tensor()));
  return shape;
}

}  // namespace mtrain
