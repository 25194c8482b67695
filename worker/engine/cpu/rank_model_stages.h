// PipelineStages (worker/parallel/pipeline_stages.h) over the CPU engine's RankModel: each chunk's
// ModelChunk<float>, with a pool of activation sets per chunk (a set is reused once its
// backward is done, so memory follows the schedule's in-flight count).
//
//   RankModelStages stages(model.get());
//   stages.SetFinalGradsHook(&hook);  // buckets start their all-reduce from it
//   PipelineExecutor executor(&stages, schedule, stage, pipeline, world);
#ifndef MTRAIN_WORKER_ENGINE_CPU_RANK_MODEL_STAGES_H_
#define MTRAIN_WORKER_ENGINE_CPU_RANK_MODEL_STAGES_H_

#include <cstdint>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "worker/engine/cpu/rank_model.h"
#include "worker/engine/heap_peak.h"
#include "worker/parallel/pipeline_stages.h"

namespace mtrain {

class RankModelStages : public PipelineStages {
 public:
  // `model` must outlive this.
  // `heap_baseline`: HeapBytesInUse() before `model` was built, so that heap_peak_bytes()
  // counts the engine's own allocations.
  RankModelStages(RankModel* model, int64_t heap_baseline);

  // Passed to each chunk's last backward of a step (null: none). Must outlive the step.
  void SetFinalGradsHook(const GradReadyHook* hook) { final_grads_hook_ = hook; }

  int num_chunks() const override { return model_->num_chunks(); }
  ChunkEnds chunk_ends(int chunk) const override {
    const ModelPlacement& placement = model_->chunk_layout(chunk).placement();
    return ChunkEnds{placement.has_embedding, placement.has_head};
  }
  int seq_length() const override { return model_->shape().seq_length; }
  int hidden_size() const override { return model_->shape().hidden; }
  absl::StatusOr<double> Forward(int chunk, int index, const Microbatch& microbatch,
                                 const float* hidden_in, float* hidden_out) override;
  absl::Status Backward(int chunk, int index, const float* d_hidden_out, float d_loss_per_token,
                        float* d_hidden_in, bool last_of_step) override;
  absl::Status BackwardInput(int chunk, int index, const float* d_hidden_out,
                             float d_loss_per_token, float* d_hidden_in,
                             bool last_of_step) override;
  absl::Status BackwardWeight(int chunk, int index, bool last_of_step) override;

  // The most heap in use after any microbatch's forward or backward so far.
  int64_t heap_peak_bytes() const { return heap_peak_.peak_bytes(); }
  // The most bytes the activation sets of microbatches in flight (forward done, backward
  // not yet) have held together so far.
  int64_t activation_peak_bytes() const { return activation_peak_bytes_; }

 private:
  RankModel* const model_;
  const GradReadyHook* final_grads_hook_ = nullptr;
  using SetsByMicrobatch = std::map<std::pair<int, int>, std::unique_ptr<Activations<float>>>;
  // The set of (chunk, index) out of `sets`, no longer counted in activation_bytes_;
  // FAILED_PRECONDITION `missing` if it is not there.
  absl::StatusOr<std::unique_ptr<Activations<float>>> Take(SetsByMicrobatch* sets, int chunk,
                                                           int index, const char* missing);

  SetsByMicrobatch in_flight_;
  // Sets whose BackwardInput ran and BackwardWeight has not: still counted as in flight.
  SetsByMicrobatch weights_owed_;
  std::vector<std::vector<std::unique_ptr<Activations<float>>>> free_;  // per chunk
  HeapPeak heap_peak_;
  int64_t activation_bytes_ = 0;  // of the sets in in_flight_
  int64_t activation_peak_bytes_ = 0;
};

}  // namespace mtrain

#endif  // MTRAIN_WORKER_ENGINE_CPU_RANK_MODEL_STAGES_H_
