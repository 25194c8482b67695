// The compute of one rank's training behind one interface, implemented by the CPU engine
// (cpu_engine.h: RankModel, AdamW, data-parallel buckets) and by the CUDA engine
// (cuda/cuda_training_engine.h: the state on the GPU). Which one trains a rank is decided
// once (engine_choice.h) by whoever creates the Trainer; the Trainer then runs every step
// the same way, without asking which engine it has:
//
//   ASSIGN_OR_RETURN(double loss_sum, engine.ComputeGradients(executor, microbatches, d_loss));
//   ASSIGN_OR_RETURN(bool overflow, engine.UnscaleGradients(1 / loss_scale));  // fp16 only
//   ASSIGN_OR_RETURN(double sum_squares, engine.GradientSumOfSquares(counted_tensors));
//   RETURN_IF_ERROR(engine.Update(update, lr, clip_coefficient));
//   RETURN_IF_ERROR(engine.GatherParameters());  // ZeRO-1: every replica's updated slice
//
// The state is flat buffers laid out by the engine's RankLayout (parameters and gradients
// over the whole padded buffer, the AdamW moments over optimizer_slice()), so checkpoints
// and weight gathers work on the host view (host_state) whatever engine trains. Every
// floating-point operation stays the engine's own: the interface only orders them.
//
// Thread-safety: one thread drives an engine (the engines' communication threads are
// internal).
#ifndef MTRAIN_WORKER_ENGINE_TRAINING_ENGINE_H_
#define MTRAIN_WORKER_ENGINE_TRAINING_ENGINE_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "proto/job_spec.pb.h"
#include "worker/engine/model_options.h"
#include "worker/engine/model_shape.h"
#include "worker/engine/parameter_layout.h"
#include "worker/engine/rank_layout.h"
#include "worker/parallel/pipeline_executor.h"
#include "worker/parallel/pipeline_stages.h"
#include "worker/parallel/rank_groups.h"

namespace mtrain {

// What AdamW updates on this rank: the whole model, or under ZeRO-1 this replica's equal
// share of the padded flat buffer (the other replicas' shares arrive by GatherParameters).
struct OptimizerSlice {
  // [begin, end): the parameters this rank updates and keeps AdamW moments for (the
  // share clipped to the parameters: possibly empty when it is all padding).
  size_t begin = 0;
  size_t end = 0;
  // ZeRO-1: the share [shard_begin, shard_begin + shard_size) of the padded buffer;
  // shard_size is 0 without ZeRO-1.
  size_t shard_begin = 0;
  size_t shard_size = 0;

  size_t moment_size() const { return end - begin; }
};

// The whole model for shards <= 1; replica `shard_rank`'s 1/shards of the buffer
// otherwise (layout.buffer_size() must be a multiple of `shards`: RankLayout's padding).
OptimizerSlice OptimizerSliceOf(const RankLayout& layout, int shards, int shard_rank);

// What both engines are built from (Trainer::Create fills it from the assignment).
struct TrainingEngineConfig {
  ModelShape shape;
  std::vector<ModelPlacement> chunks;  // the rank's model chunks (ChunkPlacements)
  int micro_batch = 0;
  ModelOptions model;
  OptimizerSpec optimizer;
  Precision precision = PRECISION_FP32;  // resolved: never PRECISION_UNSPECIFIED
  // Pipeline stages of the job: above one, the tied embedding has a copy on the first and
  // on the last stage whose gradients are summed over groups->embedding, except under
  // ZB-V's V placement (`v_shape`), where stage 0 holds both ends in one copy.
  int pipeline = 1;
  bool v_shape = false;
  // ZeRO-1: the data-parallel degree the optimizer state is sharded over (1: none) and
  // this replica's data-parallel rank.
  int zero_shards = 1;
  int zero_rank = 0;
  uint64_t seed = 0;                   // initial weights (parameter_init.h)
  size_t bucket_elements = 0;          // CPU engine: data-parallel bucket size (grad_buckets.h)
  int cuda_device = 0;                 // CUDA engine: the device ordinal (CudaDeviceForRank)
  const RankGroups* groups = nullptr;  // the rank's groups; must outlive the engine
};

class TrainingEngine {
 public:
  virtual ~TrainingEngine() = default;

  // ---- What the rank holds.
  virtual const RankLayout& layout() const = 0;
  virtual const OptimizerSlice& optimizer_slice() const = 0;
  // The chunks' forwards and backwards, for the pipeline executor.
  virtual PipelineStages& stages() = 0;
  // The device and precision for the rank's log ("NVIDIA H100 #0, PRECISION_BF16");
  // empty for the CPU.
  virtual std::string device_description() const { return std::string(); }

  // ---- One step, in this order.
  // Zeroes the gradients; runs every microbatch forward and backward (through `executor`,
  // which drives stages(), or an equivalent path of the engine's own); sums the gradients
  // over the data-parallel replicas (overlapped with the last backward) and, with a
  // pipeline, between the tied embedding's two copies. Returns the sum of this rank's
  // per-token losses (0 without the head). `d_loss_per_token` seeds the backward.
  virtual absl::StatusOr<double> ComputeGradients(PipelineExecutor& executor,
                                                  const std::vector<Microbatch>& microbatches,
                                                  float d_loss_per_token) = 0;
  // Validation: every microbatch forward only (they must be marked evaluation: no dropout,
  // nothing kept), gradients untouched. Returns the sum of this rank's per-token losses
  // (0 without the head). Both engines run it through the executor's forward actions.
  virtual absl::StatusOr<double> ComputeLoss(PipelineExecutor& executor,
                                             const std::vector<Microbatch>& microbatches) {
    return executor.RunForward(microbatches);
  }
  // ---- Generation with a key-value cache, one sequence at a time (collective over the
  // tensor group). StartGeneration clears the cache for a sequence of at most `capacity`
  // positions; GenerateStep runs `tokens` (the prompt, then each new token) and returns
  // the last position's logits over the real vocabulary, the same on every tensor rank.
  // Engines without it say so (UNIMPLEMENTED). Collective over the tensor group and, with
  // several pipeline stages, the pipeline group (hidden states go stage to stage, the
  // last stage's logits come back to all).
  virtual absl::Status StartGeneration(int capacity) {
    (void)capacity;
    return absl::UnimplementedError("this engine does not generate");
  }
  virtual absl::StatusOr<std::vector<float>> GenerateStep(const std::vector<int32_t>& tokens) {
    (void)tokens;
    return absl::UnimplementedError("generation: StartGeneration first");
  }
  // The most bytes this rank's activations kept for backwards (microbatches in flight)
  // have held together so far; nullopt where the engine does not track them.
  virtual std::optional<int64_t> activation_memory_peak_bytes() const { return std::nullopt; }
  // Frees the cache (training goes on after a checkpoint's generation).
  virtual void EndGeneration() {}
  // fp16 loss scaling: multiplies every gradient by `factor` (1 / loss scale); true if
  // any is inf or NaN (an overflow: the step is to be skipped).
  virtual absl::StatusOr<bool> UnscaleGradients(float factor) = 0;
  // Whether each data-parallel replica holds only its ZeRO-1 shard's gradient sums (so
  // GradientSumOfSquares covers that shard and the caller sums it over the replicas).
  virtual bool gradient_sums_sharded() const { return false; }
  // Sum of the squared gradients of `counted` (tensors of layout(), each counted in the
  // global norm by this rank; under gradient_sums_sharded() their part in this replica's
  // shard); NaN or inf if a gradient is.
  virtual absl::StatusOr<double> GradientSumOfSquares(const std::vector<ParamTensor>& counted) = 0;
  // AdamW over optimizer_slice() (update number `step`, 1-based), every gradient
  // multiplied by `clip_coefficient` first.
  virtual absl::Status Update(long long step, double lr, double clip_coefficient) = 0;
  // ZeRO-1: collective over the data-parallel group: every replica's updated share to
  // all of them. Nothing without ZeRO-1.
  virtual absl::Status GatherParameters() = 0;
  // Seconds of the last step spent in collectives, for the step's metrics: measured by
  // an engine that can, else estimated from the step time and the pipeline's compute.
  virtual double CollectiveSeconds(double step_seconds, const PipelineTimings& timings) const = 0;
  // Peak device memory so far, for engines with a device.
  virtual std::optional<int64_t> device_memory_peak_bytes() const { return std::nullopt; }
  // Peak host heap in use so far, for engines whose tensors live there (the CPU's).
  virtual std::optional<int64_t> host_memory_peak_bytes() const { return std::nullopt; }

  // ---- The training state in host memory (checkpoints, weight gathers, loads).
  struct HostState {
    float* params = nullptr;        // layout().buffer_size() elements
    float* first_moment = nullptr;  // optimizer_slice().moment_size() elements each
    float* second_moment = nullptr;
  };
  // Valid until the engine is destroyed. Current after SyncToHost; what is written into
  // it trains after SyncFromHost.
  virtual HostState host_state() = 0;
  virtual absl::Status SyncToHost() = 0;
  virtual absl::Status SyncFromHost() = 0;
};

}  // namespace mtrain

#endif  // MTRAIN_WORKER_ENGINE_TRAINING_ENGINE_H_
