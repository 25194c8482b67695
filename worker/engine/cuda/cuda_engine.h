// The training state of one rank on its GPU, and the compute of a step: fp32 master
// weights, their bf16 copy that the layers read (mixed precision; fp32 training reads the
// masters themselves), fp32 gradients and AdamW moments, all in flat device buffers laid
// out exactly as the host's RankModel buffers, so the Trainer keeps doing checkpoints and
// weight gathers on the host copy after a Download, and resumes after an Upload.
//
// Two ways to run a step's forwards and backwards:
//   - ForwardBackward: the whole model on this rank (tensor = pipeline = 1): every
//     microbatch back to back on the stream, the data-parallel all-reduce overlapped with
//     the last backward. The fast path.
//   - As PipelineStages (pipeline_stages.h), driven by a PipelineExecutor: any chunks of a
//     pipeline schedule, tensor-parallel layers over the configured tensor group; hidden
//     states cross stages in device memory (NCCL point to point) or through the host. The caller
//     zeroes the gradients first (ZeroGradients) and waits for the data-parallel sums afterwards
//     (WaitForGradientSums); the tied embedding's exchange between the first and the last
//     stage is its own (AllReduceGradients).
//
//   ASSIGN_OR_RETURN(auto engine, CudaEngine::Create(config));
//   RETURN_IF_ERROR(engine->UploadParameters(host_params));
//   ASSIGN_OR_RETURN(double loss_sum, engine->ForwardBackward(microbatches, 1.0f / tokens));
//   ASSIGN_OR_RETURN(double sum_squares, engine->GradientSumOfSquares());
//   RETURN_IF_ERROR(engine->Update(step, lr, clip_coefficient));
#ifndef MTRAIN_WORKER_ENGINE_CUDA_CUDA_ENGINE_H_
#define MTRAIN_WORKER_ENGINE_CUDA_CUDA_ENGINE_H_

#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/cuda/adamw.h"
#include "kernels/cuda/matmul.h"
#include "proto/job_spec.pb.h"
#include "worker/engine/cpu/model_chunk.h"
#include "worker/engine/cuda/device_buffer.h"
#include "worker/engine/cuda/device_collectives.h"
#include "worker/engine/cuda/device_message_pool.h"
#include "worker/engine/cuda/overlapped_all_reduce.h"
#include "worker/engine/parameter_layout.h"
#include "worker/parallel/communicator.h"
#include "worker/parallel/pipeline_stages.h"

namespace mtrain::cuda {

struct CudaEngineConfig {
  // The rank's model chunks (RankModel::chunk_layout), offsets into the flat buffers; they
  // must outlive the engine.
  std::vector<const ParameterLayout*> chunks;
  size_t buffer_size = 0;  // elements of the flat buffers (>= every chunk's end, padding zero)
  int micro_batch = 0;
  ModelOptions model;
  Precision precision = PRECISION_FP32;  // FP32, BF16 or FP16 (the caller scales the loss)
  OptimizerSpec optimizer;
  int device = 0;  // CUDA device ordinal
  // The tensor-parallel group (null with one tensor rank; must outlive the engine): NCCL
  // (tensor_group_on_device) or a host group staged through host memory.
  Communicator* tensor_group = nullptr;
  bool tensor_group_on_device = false;
  // The flat range AdamW updates and keeps moments for: the whole buffer by default
  // (SIZE_MAX: buffer_size); under ZeRO-1 this replica's slice (possibly empty: a slice of
  // padding), the others' parameters arriving by AllGatherParameters after each update.
  size_t optimizer_begin = 0;
  size_t optimizer_end = SIZE_MAX;
  // The pipeline messages (PipelineStages) in device memory, for an executor whose groups
  // are NCCL; host memory otherwise.
  bool pipeline_messages_on_device = false;
};

// A flat-buffer range [begin, begin + count).
struct FlatRange {
  size_t begin = 0;
  size_t count = 0;
};

class CudaEngine : public PipelineStages {
 public:
  // Selects the device, allocates every buffer and the activations. INVALID_ARGUMENT for
  // a layout the CUDA model cannot hold or an unknown precision; FAILED_PRECONDITION
  // without a usable device;
  // RESOURCE_EXHAUSTED (naming the buffer) when the model does not fit.
  static absl::StatusOr<std::unique_ptr<CudaEngine>> Create(const CudaEngineConfig& config);
  ~CudaEngine() override;

  // Host <-> device copies of the flat buffers (buffer_size elements each; the moments
  // cover the optimizer range only: optimizer_end - optimizer_begin elements).
  absl::Status UploadParameters(const float* params);
  absl::Status DownloadParameters(float* params);
  absl::Status UploadMoments(const float* m, const float* v);
  absl::Status DownloadMoments(float* m, float* v);

  // Data parallelism: `group` (must outlive the engine; NCCL on device buffers when
  // on_device, else a host group such as Gloo, staged through host memory) sums the
  // gradients of the replicas, each layer's as soon as the last backward of the step has
  // passed it, overlapped with the rest of the backward: in ForwardBackward, and in the
  // backwards of PipelineStages marked last_of_step (every chunk's layers, then its
  // embeddings, final LayerNorm and head copy of the tied embedding). Without one (or with
  // a group of one) the gradients stay local.
  // ZeRO-1 (`shard_size` > 0): replica r updates [r * shard_size, (r + 1) * shard_size)
  // of the buffer and needs only that part's sums: each range is cut at the shards'
  // bounds and every piece reduced into its owner (half an all-reduce's bytes); the
  // other replicas' shards are left partial here.
  void SetDataParallelGroup(Communicator* group, bool on_device, size_t shard_size = 0);
  // A range (one of a chunk's tensors outside its layers) the backwards leave out of the
  // data-parallel sums: the tied embedding under ZeRO-1 with several stages, whose two
  // copies must be summed first (after the step's backwards: AllReduceGradients over
  // the embedding group). SumDeferredGradients then sums it as the backward would have,
  // and waits for it.
  void DeferGradientSum(FlatRange range);
  absl::Status SumDeferredGradients();
  // After a step driven through PipelineStages: waits for the sums the backwards started
  // (ForwardBackward waits itself); the first failure, if any. Call it on error paths
  // too: no sum may still be running when the gradients are next touched.
  absl::Status WaitForGradientSums();
  // Seconds the last step's overlapped all-reduces took on the communication thread.
  double last_all_reduce_seconds() const;

  // Zeroes the gradients, then forward and backward of every microbatch, accumulating the
  // gradients (summed over the replicas with a data-parallel group). Returns the sum of
  // the per-token losses (in double per microbatch, in token order, as the CPU engine).
  // FAILED_PRECONDITION unless the rank holds the whole model (one chunk, one tensor rank).
  absl::StatusOr<double> ForwardBackward(const std::vector<Microbatch>& microbatches,
                                         float d_loss_per_token);

  // PipelineStages: one chunk's forward or backward of one microbatch; the hidden states
  // are float [B*S, C] (converted to and from the compute precision on the device), in
  // device memory from a pool (config.pipeline_messages_on_device) or on the host.
  int num_chunks() const override;
  bool messages_on_device() const override { return config_.pipeline_messages_on_device; }
  absl::StatusOr<std::unique_ptr<MessageBuffer>> NewMessage(size_t elements) override;
  ChunkEnds chunk_ends(int chunk) const override {
    return ChunkEnds{placement(chunk).has_embedding, placement(chunk).has_head};
  }
  int seq_length() const override { return shape().seq_length; }
  int hidden_size() const override { return shape().hidden; }
  const ModelPlacement& placement(int chunk) const;
  const ModelShape& shape() const;
  absl::StatusOr<double> Forward(int chunk, int index, const Microbatch& microbatch,
                                 const float* hidden_in, float* hidden_out) override;
  absl::Status Backward(int chunk, int index, const float* d_hidden_out, float d_loss_per_token,
                        float* d_hidden_in, bool last_of_step) override;
  // The zero-bubble schedules' backward in two parts (CudaGptModel::BackwardInput and
  // BackwardWeight): the set waits between them, counted in the activation peak with the
  // copies its weight gradients read. Under data parallelism the chunk's last
  // BACKWARD_INPUT starts the sums of its embeddings, final norm and head, its last
  // BACKWARD_WEIGHT those of each layer as it passes.
  absl::Status BackwardInput(int chunk, int index, const float* d_hidden_out,
                             float d_loss_per_token, float* d_hidden_in,
                             bool last_of_step) override;
  absl::Status BackwardWeight(int chunk, int index, bool last_of_step) override;

  // Zeroes the gradients (before a step driven through PipelineStages).
  absl::Status ZeroGradients();
  // Sums gradients over `group` in place: NCCL on the device buffer (on_device), or a host
  // group staged through host memory. An empty `ranges` means the whole buffer.
  absl::Status AllReduceGradients(Communicator* group, bool on_device,
                                  const std::vector<FlatRange>& ranges = {});
  // fp16 loss scaling: multiplies every gradient by `factor` (1 / loss scale) and returns
  // whether any is inf or NaN (an overflow: the step is to be skipped).
  absl::StatusOr<bool> UnscaleGradients(float factor);
  // Sum of the squared gradients (for global-norm clipping) over `ranges` (empty: the
  // whole buffer), each range summed on the device and the ranges in order; NaN if a
  // gradient is inf or NaN (summed over the ranks by the caller, so all of them see it).
  absl::StatusOr<double> GradientSumOfSquares(const std::vector<FlatRange>& ranges = {});
  // AdamW over the fp32 masters of the optimizer range with every gradient multiplied by
  // `grad_scale` (the clipping coefficient), per tensor with its decay setting; refreshes
  // the 16-bit copy.
  absl::Status Update(long long step, double lr, double grad_scale);
  // ZeRO-1: every replica of `group` (the data-parallel group: NCCL on device memory, or a
  // host group staged through the host) updated its slice [rank * shard, (rank + 1) *
  // shard) of the masters; afterwards every replica holds all of them (and their 16-bit
  // copy). shard * group size must be buffer_size.
  absl::Status AllGatherParameters(Communicator* group, bool on_device, size_t shard);

  // Generation with a key-value cache, one sequence at a time (CudaGptModel::Decode):
  // StartGeneration gives every chunk an empty cache of `capacity` positions;
  // GenerateChunk runs `count` new positions through chunk `chunk`: `tokens` (host) on the
  // chunk with the embeddings, else `hidden_in` (host float [count, C]); writes `out` (host
  // float): [count, C] without the head, else the last position's logits over this rank's
  // vocabulary shard. Collective over the tensor group. EndGeneration frees the caches.
  absl::Status StartGeneration(int capacity);
  absl::Status GenerateChunk(int chunk, const int32_t* tokens, const float* hidden_in, int count,
                             float* out);
  void EndGeneration();

  const std::string& device_name() const { return device_name_; }
  // Which attention implementation the layers run and why (kernels/cuda/attention.h's
  // AttentionPathFor), e.g. "cuDNN 9.19.0 fused attention".
  std::string attention_path() const;
  // The most device bytes the activation sets of microbatches in flight have held
  // together so far (sampled after each forward).
  size_t activation_peak_bytes() const { return activation_peak_bytes_; }

 private:
  class Chunk;  // a CudaGptModel of the configured precision, with its activation sets
  template <typename T>
  class TypedChunk;
  CudaEngine() = default;
  absl::Status RefreshModelCopy();
  void NoteActivations();
  // The backward's per-layer hook (CudaGptModel's on_layer_done) that queues the chunk's
  // gradient ranges on reducer_ as the backward passes them.
  std::function<absl::Status(int)> GradientSumsAfterLayers(int chunk);
  // Queues one range's data-parallel sum: all-reduced, or under ZeRO-1 each shard's piece
  // reduced into its owner.
  absl::Status QueueGradientSum(const FlatRange& range);
  size_t MomentBytes() const {
    return (config_.optimizer_end - config_.optimizer_begin) * sizeof(float);
  }

  CudaEngineConfig config_;
  std::vector<ParamTensor> tensors_;  // every chunk's, in buffer order
  std::string device_name_;
  cudaStream_t stream_ = nullptr;
  DeviceBuffer<float> master_, grads_, m_, v_, losses_;
  DeviceBuffer<uint16_t> bf16_copy_;  // bf16 or fp16 bits; empty in fp32 training
  DeviceBuffer<double> sum_of_squares_;
  // The optimizer range cut into AdamW chunks (one launch a step), built at the first update.
  DeviceBuffer<AdamWChunk> adamw_chunks_;
  DeviceBuffer<int> nonfinite_;
  std::unique_ptr<CublasLt> blas_;
  DeviceCollectives tensor_group_;
  std::vector<std::unique_ptr<Chunk>> chunks_;
  // Per chunk: flat-buffer ranges whose gradients are final after each layer's backward
  // ([layer], chunk-local), and after the whole backward (the other tensors).
  struct ChunkRanges {
    std::vector<FlatRange> layers;
    std::vector<FlatRange> last;
  };
  std::vector<ChunkRanges> chunk_ranges_;
  bool whole_model_ = false;  // one chunk, one tensor rank, embeddings and head
  std::unique_ptr<OverlappedAllReduce> reducer_;
  size_t gradient_shard_ = 0;                        // ZeRO-1's shard size; 0: all-reduced
  std::vector<FlatRange> deferred_;                  // summed by SumDeferredGradients
  std::shared_ptr<DeviceMessagePool> message_pool_;  // with pipeline_messages_on_device
  size_t activation_peak_bytes_ = 0;
};

}  // namespace mtrain::cuda

#endif  // MTRAIN_WORKER_ENGINE_CUDA_CUDA_ENGINE_H_
