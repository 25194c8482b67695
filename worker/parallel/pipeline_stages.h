// The compute a pipeline executor (pipeline_executor.h) drives on one rank: forward and
// backward of one of the rank's model chunks on one microbatch. The hidden states that
// cross stage boundaries are float [B, S, C], whatever the engine computes in, so the
// executor's messages are the same for every engine. They live where the engine says
// (NewMessage): host memory by default, device memory for an engine whose stages
// exchange them over a GPU communicator (NCCL), so they never cross the host.
//
// The interface carries only what the executor needs to size and route those messages
// (plain numbers, and which ends of the model a chunk holds); the model itself stays the
// engine's, so this library knows no engine.
//
// Two engines implement it: RankModelStages (the CPU engine,
// worker/engine/cpu/rank_model_stages.h) and the CUDA engine (worker/engine/cuda/cuda_engine.h),
// which copies the hidden states between the host and the GPU at stage boundaries.
//
// A forward keeps its activations under (chunk, microbatch) until the matching backward;
// the schedule decides how many are in flight at once.
#ifndef MTRAIN_WORKER_PARALLEL_PIPELINE_STAGES_H_
#define MTRAIN_WORKER_PARALLEL_PIPELINE_STAGES_H_

#include <cstddef>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/parallel/microbatch.h"

namespace mtrain {

// One message's memory: `size()` floats at `data()`, host or device memory (the stages'
// messages_on_device()). Releasing it may hand the memory back to a pool.
class MessageBuffer {
 public:
  virtual ~MessageBuffer() = default;
  virtual float* data() = 0;
  virtual size_t size() const = 0;
};

// Host memory.
class HostMessageBuffer : public MessageBuffer {
 public:
  explicit HostMessageBuffer(size_t elements) : data_(elements) {}
  float* data() override { return data_.data(); }
  size_t size() const override { return data_.size(); }

 private:
  std::vector<float> data_;
};

// Which ends of the model one chunk holds: they decide whether its forward takes a
// hidden state from the previous stage and whether it sends one to the next.
struct ChunkEnds {
  bool has_embedding = true;  // first virtual stage: reads tokens, takes no hidden state
  bool has_head = true;       // last virtual stage: computes the loss, sends no hidden state
};

class PipelineStages {
 public:
  virtual ~PipelineStages() = default;

  virtual int num_chunks() const = 0;
  virtual ChunkEnds chunk_ends(int chunk) const = 0;
  // S and C of the hidden state [B, S, C] exchanged between stages (B follows from a
  // microbatch's tokens: B * S of them).
  virtual int seq_length() const = 0;
  virtual int hidden_size() const = 0;

  // Where messages live. True: NewMessage hands out device memory, Forward and Backward
  // take and fill device pointers, and the executor's communicators must move device
  // buffers (NCCL). The engine must have finished writing a hidden_out / d_hidden_in when
  // Forward / Backward returns (a communicator on another stream reads it next).
  virtual bool messages_on_device() const { return false; }
  // A message of `elements` floats, contents unspecified. RESOURCE_EXHAUSTED when device
  // memory runs out.
  virtual absl::StatusOr<std::unique_ptr<MessageBuffer>> NewMessage(size_t elements) {
    return std::make_unique<HostMessageBuffer>(elements);
  }

  // Forward of `microbatch` (index `index` in the step) on `chunk`. Messages are where
  // messages_on_device() says. hidden_in: the previous stage's output unless the chunk holds the
  // embeddings; hidden_out receives this chunk's output unless it holds the head. Returns the sum
  // of the per-token losses on the chunk holding the head, 0 elsewhere.
  virtual absl::StatusOr<double> Forward(int chunk, int index, const Microbatch& microbatch,
                                         const float* hidden_in, float* hidden_out) = 0;

  // Backward of the forward kept under (chunk, index), accumulating into the gradients.
  // The chunk holding the head seeds it with d_loss_per_token, the others take
  // d_hidden_out from the next stage; chunks without the embeddings write the gradient of
  // their input into d_hidden_in. `last_of_step`: the chunk's last backward of the step
  // (its gradients are final afterwards).
  virtual absl::Status Backward(int chunk, int index, const float* d_hidden_out,
                                float d_loss_per_token, float* d_hidden_in, bool last_of_step) = 0;

  // The backward in two parts (PipelineAction BACKWARD_INPUT, BACKWARD_WEIGHT: zero-bubble
  // schedules): BackwardInput is Backward with the weights' gradients left for a later
  // BackwardWeight of the same (chunk, index), which keeps the activations until then.
  // `last_of_step`: the chunk's last of that kind in the step. An engine without a split
  // backward says UNIMPLEMENTED (the spec keeps such schedules off it).
  virtual absl::Status BackwardInput(int chunk, int index, const float* d_hidden_out,
                                     float d_loss_per_token, float* d_hidden_in,
                                     bool last_of_step) {
    return absl::UnimplementedError("this engine does not split the backward (zero-bubble)");
  }
  virtual absl::Status BackwardWeight(int chunk, int index, bool last_of_step) {
    return absl::UnimplementedError("this engine does not split the backward (zero-bubble)");
  }
};

}  // namespace mtrain

#endif  // MTRAIN_WORKER_PARALLEL_PIPELINE_STAGES_H_
