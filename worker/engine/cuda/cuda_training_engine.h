// The CUDA engine behind TrainingEngine (worker/engine/training_engine.h): a CudaEngine
// (cuda_engine.h) holding the rank's state on its GPU, with the rank's groups wired in.
// Data-parallel and tensor-parallel sums go over NCCL where the caller connected device
// groups (RankGroups::device_*), otherwise through host memory and the Gloo groups.
//
// No CPU model is built. The only host copy of the state is a mirror of the parameters
// and the AdamW moments, allocated the first time host_state() is asked for (a
// checkpoint, a weight gather or a load needs it; plain training never does).
//
//   ASSIGN_OR_RETURN(std::unique_ptr<CudaTrainingEngine> engine,
//                    CudaTrainingEngine::Create(config));
#ifndef MTRAIN_WORKER_ENGINE_CUDA_CUDA_TRAINING_ENGINE_H_
#define MTRAIN_WORKER_ENGINE_CUDA_CUDA_TRAINING_ENGINE_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/engine/cuda/cuda_engine.h"
#include "worker/engine/rank_layout.h"
#include "worker/engine/training_engine.h"

namespace mtrain::cuda {

class CudaTrainingEngine : public TrainingEngine {
 public:
  // Allocates the device state and uploads the initial weights (from config.seed, the
  // same values as the CPU engine's). Errors as CudaEngine::Create.
  static absl::StatusOr<std::unique_ptr<CudaTrainingEngine>> Create(
      const TrainingEngineConfig& config);
  ~CudaTrainingEngine() override;

  const RankLayout& layout() const override { return layout_; }
  const OptimizerSlice& optimizer_slice() const override { return slice_; }
  PipelineStages& stages() override { return *engine_; }
  std::string device_description() const override;

  // One chunk on one tensor rank without a pipeline takes CudaEngine::ForwardBackward
  // (every microbatch back to back on the stream); any other layout the executor.
  absl::StatusOr<double> ComputeGradients(PipelineExecutor& executor,
                                          const std::vector<Microbatch>& microbatches,
                                          float d_loss_per_token) override;
  absl::StatusOr<bool> UnscaleGradients(float factor) override;
  // ZeRO-1 reduces each gradient range into the replica that updates it (CudaEngine's
  // sharded sums): the norm covers this replica's shard.
  bool gradient_sums_sharded() const override { return sharded_sums_; }
  absl::StatusOr<double> GradientSumOfSquares(const std::vector<ParamTensor>& counted) override;
  absl::Status Update(long long step, double lr, double clip_coefficient) override;
  absl::Status GatherParameters() override;
  // Measured: the overlapped all-reduces' time on the communication thread plus the tied
  // embedding's exchange.
  double CollectiveSeconds(double step_seconds, const PipelineTimings& timings) const override;
  std::optional<int64_t> device_memory_peak_bytes() const override;
  std::optional<int64_t> activation_memory_peak_bytes() const override {
    return static_cast<int64_t>(engine_->activation_peak_bytes());
  }

  // Generation on the GPU (CudaEngine::GenerateChunk), the chunks' hidden states passed
  // between stages through the host as in training.
  absl::Status StartGeneration(int capacity) override;
  absl::StatusOr<std::vector<float>> GenerateStep(const std::vector<int32_t>& tokens) override;
  void EndGeneration() override;

  HostState host_state() override;
  absl::Status SyncToHost() override;
  absl::Status SyncFromHost() override;

 private:
  explicit CudaTrainingEngine(RankLayout layout) : layout_(std::move(layout)) {}

  RankLayout layout_;  // the CudaEngine keeps pointers to its chunks
  OptimizerSlice slice_;
  const RankGroups* groups_ = nullptr;
  int pipeline_ = 1;
  bool v_shape_ = false;
  bool whole_model_ = false;
  bool sharded_sums_ = false;  // ZeRO-1 with replicas
  int device_ = 0;
  Precision precision_ = PRECISION_FP32;
  std::unique_ptr<CudaEngine> engine_;
  double collective_seconds_ = 0;  // of the last step
  bool generating_ = false;
  int64_t generated_positions_ = 0;  // of the sequence, for the pipeline messages' tags
  // The host mirror; empty until host_state() is first asked for.
  std::vector<float> host_params_, host_m_, host_v_;
};

}  // namespace mtrain::cuda

#endif  // MTRAIN_WORKER_ENGINE_CUDA_CUDA_TRAINING_ENGINE_H_
