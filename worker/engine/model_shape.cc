#include "worker/engine/model_shape.h"

namespace mtrain {

ModelPlacement WholeModel(const ModelShape& shape) {
  ModelPlacement placement;
  placement.num_layers = shape.num_layers;
  return placement;
}

ModelShape ShapeFromSpec(const JobSpec& spec) { return TransformerConfigOf(spec); }

}  // namespace mtrain
