// The CPU engine behind TrainingEngine (training_engine.h): the rank's RankModel (fp32
// model chunks of the job's family, model_chunk.h, over one flat host buffer), AdamW on
// the host, data-parallel gradient
// buckets all-reduced over the Gloo data group while the last backward runs, and the
// chunks driven by the pipeline executor through RankModelStages. Its buffers are the host
// state itself: SyncToHost and SyncFromHost do nothing.
//
//   ASSIGN_OR_RETURN(std::unique_ptr<CpuEngine> engine, CpuEngine::Create(config));
#ifndef MTRAIN_WORKER_ENGINE_CPU_CPU_ENGINE_H_
#define MTRAIN_WORKER_ENGINE_CPU_CPU_ENGINE_H_

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/engine/cpu/rank_model.h"
#include "worker/engine/cpu/rank_model_stages.h"
#include "worker/engine/optimizer.h"
#include "worker/engine/training_engine.h"
#include "worker/parallel/grad_buckets.h"

namespace mtrain {

class CpuEngine : public TrainingEngine {
 public:
  // Builds the model chunks and initialises them from config.seed. INVALID_ARGUMENT for
  // a precision other than FP32 (reduced precision is CUDA's) or chunks RankLayout
  // refuses.
  static absl::StatusOr<std::unique_ptr<CpuEngine>> Create(const TrainingEngineConfig& config);
  ~CpuEngine() override;

  const RankLayout& layout() const override { return model_->layout(); }
  const OptimizerSlice& optimizer_slice() const override { return slice_; }
  PipelineStages& stages() override { return *stages_; }
  // The GEMM library, its kernel and the processor's ISA, and the peak a core:
  // "GEMM OpenBLAS 0.3.21, kernel Zen (avx2; ...), CPU avx2 (AMD EPYC); peak 32 FLOP/cycle ...".
  std::string device_description() const override;

  absl::StatusOr<double> ComputeGradients(PipelineExecutor& executor,
                                          const std::vector<Microbatch>& microbatches,
                                          float d_loss_per_token) override;
  absl::StatusOr<bool> UnscaleGradients(float factor) override;
  absl::StatusOr<double> GradientSumOfSquares(const std::vector<ParamTensor>& counted) override;
  absl::Status Update(long long step, double lr, double clip_coefficient) override;
  absl::Status GatherParameters() override;
  // The CPU cannot time its collectives apart from the compute they overlap: the part of
  // the step outside the pipeline's compute.
  double CollectiveSeconds(double step_seconds, const PipelineTimings& timings) const override;

  // The heap's peak, sampled after each microbatch's forward and backward.
  std::optional<int64_t> host_memory_peak_bytes() const override {
    return stages_->heap_peak_bytes();
  }

  std::optional<int64_t> activation_memory_peak_bytes() const override {
    return stages_->activation_peak_bytes();
  }

  // ZeRO-1 reduce-scatters the gradients: each replica's sum of squares covers its shard.
  bool gradient_sums_sharded() const override { return slice_.shard_size > 0; }

  absl::Status StartGeneration(int capacity) override;
  absl::StatusOr<std::vector<float>> GenerateStep(const std::vector<int32_t>& tokens) override;
  void EndGeneration() override { kv_caches_.clear(); }

  HostState host_state() override;
  absl::Status SyncToHost() override { return absl::OkStatus(); }
  absl::Status SyncFromHost() override { return absl::OkStatus(); }

  int num_gradient_buckets() const { return buckets_->num_buckets(); }

 private:
  CpuEngine() = default;

  const RankGroups* groups_ = nullptr;
  // Generation: the sequence's key-value cache of each model chunk (StartGeneration).
  std::vector<KvCache<float>> kv_caches_;
  int64_t generated_positions_ = 0;  // of the sequence, for the pipeline messages' tags
  int pipeline_ = 1;
  bool v_shape_ = false;
  OptimizerSlice slice_;
  std::unique_ptr<RankModel> model_;
  std::unique_ptr<AdamWOptimizer> optimizer_;
  std::unique_ptr<GradientBuckets> buckets_;
  std::unique_ptr<RankModelStages> stages_;
};

}  // namespace mtrain

#endif  // MTRAIN_WORKER_ENGINE_CPU_CPU_ENGINE_H_
