#include "worker/engine/generation_step.h"

#include <algorithm>
#include <memory>
#include <utility>

#include "common/status_macros.h"
#include "plan/pipeline_placement.h"

namespace mtrain {

absl::StatusOr<std::vector<float>> RunGenerationStep(const RankGroups& groups,
                                                     const std::vector<GenerationChunk>& chunks,
                                                     bool v_shape, int count, int hidden, int vocab,
                                                     int64_t first_position,
                                                     const DecodeChunkFn& decode) {
  const size_t elements = static_cast<size_t>(count) * hidden;
  Communicator* pipeline = groups.pipeline.get();
  const int stages = pipeline != nullptr ? pipeline->size() : 1;
  const int stage = pipeline != nullptr ? pipeline->rank() : 0;
  // A message carries the sending chunk's place in the model's order (its virtual stage,
  // below 1024 = kMaxVirtualStages) and the step's first position, far above the training
  // schedule's tags (communicators take tags below 2^55).
  const uint64_t first_tag = (uint64_t{1} << 54) | (static_cast<uint64_t>(first_position) << 10);
  std::vector<float> logits(vocab);
  std::vector<float> carried;  // the previous chunk's output when it ran on this rank
  for (int c = 0; c < static_cast<int>(chunks.size()); ++c) {
    const GenerationChunk& chunk = chunks[c];
    const int virtual_stage = VirtualStageOf(stage, c, stages, v_shape);
    const uint64_t tag = first_tag + static_cast<uint64_t>(virtual_stage);
    std::vector<float> hidden_in;
    if (!chunk.has_embedding) {
      const int from = StageChunkOf(virtual_stage - 1, stages, v_shape).stage;
      if (from == stage) {
        hidden_in = std::move(carried);
      } else {
        hidden_in.resize(elements);
        RETURN_IF_ERROR(pipeline->Recv(hidden_in.data(), elements * sizeof(float), from, tag - 1));
      }
    }
    std::vector<float> out(chunk.has_head ? static_cast<size_t>(chunk.local_vocab) : elements);
    RETURN_IF_ERROR(decode(c, hidden_in.empty() ? nullptr : hidden_in.data(), out.data()));
    if (!chunk.has_head) {
      const int to = StageChunkOf(virtual_stage + 1, stages, v_shape).stage;
      if (to == stage) {
        carried = std::move(out);
      } else {
        ASSIGN_OR_RETURN(std::unique_ptr<PendingSend> send,
                         pipeline->StartSend(out.data(), elements * sizeof(float), to, tag));
        RETURN_IF_ERROR(send->Wait());
      }
      continue;
    }
    // Each tensor rank holds a contiguous shard of the padded vocabulary, in rank order.
    Communicator& tensor = *groups.tensor;
    std::vector<float> all(static_cast<size_t>(chunk.local_vocab) * tensor.size());
    if (tensor.size() > 1) {
      RETURN_IF_ERROR(tensor.AllGather(out.data(), all.data(), out.size()));
    } else {
      all = std::move(out);
    }
    std::copy(all.begin(), all.begin() + vocab, logits.begin());  // no padding columns
  }
  // Every stage samples the same token from the logits of the stage with the head.
  if (stages > 1) {
    RETURN_IF_ERROR(pipeline->Broadcast(logits.data(), logits.size(), LossStage(stages, v_shape)));
  }
  return logits;
}

}  // namespace mtrain
