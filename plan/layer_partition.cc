#include "plan/layer_partition.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "plan/pipeline_placement.h"

namespace mtrain {

absl::StatusOr<std::vector<LayerRange>> PartitionLayers(int num_layers, int pipeline,
                                                        int virtual_stages, int stage,
                                                        bool v_shape) {
  if (pipeline <= 0 || virtual_stages <= 0 || num_layers <= 0 ||
      num_layers % (pipeline * virtual_stages) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cannot split ", num_layers, " layers into ", pipeline, " stages x ", virtual_stages,
        " chunks [rule: num_layers % (pipeline * virtual_stages) "
        "== 0]"));
  }
  if (stage < 0 || stage >= pipeline) {
    return absl::InvalidArgumentError(
        absl::StrCat("stage ", stage, " is outside [0, ", pipeline, ")"));
  }
  if (v_shape && virtual_stages != 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("the V placement holds 2 chunks a stage, not ", virtual_stages,
                     " [rule: virtual_stages == 2 with SCHEDULE_ZB_V]"));
  }
  const int per_chunk = num_layers / (pipeline * virtual_stages);
  std::vector<LayerRange> chunks;
  for (int chunk = 0; chunk < virtual_stages; ++chunk) {
    LayerRange range;
    range.set_chunk(chunk);
    range.set_first_layer(VirtualStageOf(stage, chunk, pipeline, v_shape) * per_chunk);
    range.set_num_layers(per_chunk);
    chunks.push_back(range);
  }
  return chunks;
}

}  // namespace mtrain
