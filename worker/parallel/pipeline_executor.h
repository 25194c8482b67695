// Executes one rank's pipeline schedule (plan/pipeline_schedule.h) for one
// optimizer step: forwards and backwards of its model chunks, activations and gradients
// exchanged with the neighbouring stages point to point. The executor decides nothing:
// it runs the list it was handed, in order.
//
// Sends are posted without waiting (the data stays owned by the pending send); receives
// block. All sends are completed before RunStep returns, so nothing of a step leaks into
// the next.
//
// Scatter/gather (Narayanan et al. 2021): every tensor rank of a stage holds the same hidden
// state at a stage boundary, so with a tensor group each rank sends only its 1/t slice to
// its peer (the next stage's rank of the same tensor rank), and the receiving ranks
// all-gather the slices over their tensor group: the link between stages carries 1/t of
// the bytes, the (fast) tensor group the rest.
//
// The compute is a PipelineStages (pipeline_stages.h): the CPU engine's RankModelStages
// (worker/engine/cpu/rank_model_stages.h) or the CUDA engine. Messages are float buffers the
// stages hand out (NewMessage): host memory moved by Gloo, or, for the CUDA engine with
// NCCL groups, device memory moved by NCCL (then `p2p` and `scatter_gather` must be NCCL
// groups too).
//
//   RankModelStages stages(model.get());
//   PipelineExecutor executor(&stages, assignment.schedule(), stage, pipeline, world.get());
//   ASSIGN_OR_RETURN(double loss_sum, executor.RunStep(microbatches, 1.0f / tokens));
#ifndef MTRAIN_WORKER_PARALLEL_PIPELINE_EXECUTOR_H_
#define MTRAIN_WORKER_PARALLEL_PIPELINE_EXECUTOR_H_

#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/assignment.pb.h"
#include "worker/parallel/communicator.h"
#include "worker/parallel/pipeline_stages.h"

namespace mtrain {

// Whether `schedule` (one rank's) passes its messages in an order a transport without
// tags can match (NCCL point to point: a receiver's Recvs pair with the sender's sends in
// order): towards each peer the rank sends one kind of message (activations or
// gradients) and receives one kind, each in increasing microbatch order. Every rank of a
// GPipe or 1F1B schedule does; an interleaved schedule sends both kinds to its neighbours
// and does not. INVALID_ARGUMENT naming the first action out of order.
absl::Status CheckMessagesInOrder(const PipelineSchedule& schedule);

// Where the last step's time went on this rank.
struct PipelineTimings {
  double compute_seconds = 0;  // forwards and backwards
  double wait_seconds = 0;     // blocked receiving, or completing sends
};

class PipelineExecutor {
 public:
  // `p2p` is the world group (group rank == global rank, as PipelineAction::peer_rank);
  // unused with one stage. `scatter_gather`: this rank's tensor group, to send slices and
  // all-gather them (null, or a group of one: whole messages). Both groups and `stages`
  // must outlive the executor.
  // `sequence_parallel`: the stages hold 1/t of each hidden state (t, sequence
  // parallelism): messages are that share, sent as they are.
  PipelineExecutor(PipelineStages* stages, PipelineSchedule schedule, int stage, int pipeline,
                   Communicator* p2p, Communicator* scatter_gather = nullptr,
                   int sequence_parallel = 1);

  // Runs every action of the schedule over `microbatches` (indexed by
  // PipelineAction::microbatch). Returns the sum of per-token losses on the rank holding the
  // last virtual stage, 0 elsewhere. Each chunk's LAST backward of the step is told so
  // (its gradients are final then). Gradients accumulate; the caller zeroes them.
  absl::StatusOr<double> RunStep(const std::vector<Microbatch>& microbatches,
                                 float d_loss_per_token);

  // The forwards alone (validation): the schedule's RECV_FORWARD, FORWARD and
  // SEND_FORWARD actions in their order, the rest skipped. That is deadlock-free whenever
  // the whole schedule is: every receive kept still follows its send in the schedule's
  // order, and only receives block. The microbatches should be marked evaluation (no
  // dropout, activations released after each forward). Returns the loss sum as RunStep;
  // last_timings() keeps the last training step's.
  absl::StatusOr<double> RunForward(const std::vector<Microbatch>& microbatches);

  const PipelineTimings& last_timings() const { return timings_; }

 private:
  // The messages of one (microbatch, chunk) in flight (the activations are the stages').
  struct InFlight {
    bool forward_done = false;
    std::unique_ptr<MessageBuffer> input, output, d_output, d_input;
  };
  struct Send {
    std::unique_ptr<PendingSend> pending;
    std::unique_ptr<MessageBuffer> data;  // kept alive until the send completes
  };
  // The part of a message of `elements` this rank sends or receives: all of it, or its
  // slice under scatter/gather.
  size_t SliceBegin(size_t elements) const;
  size_t SliceSize(size_t elements) const;

  absl::StatusOr<double> Run(const std::vector<Microbatch>& microbatches, float d_loss_per_token,
                             bool forward_only);
  absl::Status Execute(size_t index, const std::vector<Microbatch>& microbatches,
                       float d_loss_per_token, double* loss_sum);
  // A message of `elements` from the stages into *buffer, unless it already has that size.
  absl::Status Allocate(size_t elements, std::unique_ptr<MessageBuffer>* buffer);
  absl::Status StartSend(const PipelineAction& action, std::unique_ptr<MessageBuffer>* data);
  absl::Status Receive(const PipelineAction& action, MessageBuffer* data);
  // ZB-V's turn at stage p - 1 hands chunk 0's output (and chunk 1's input gradient) to
  // this rank itself: the buffer moves into self_messages_ under the message's tag, and
  // the receive takes it back, without the transport (which has no channel to itself).
  bool IsSelf(const PipelineAction& action) const;
  absl::Status ReceiveFromSelf(const PipelineAction& action, size_t elements,
                               std::unique_ptr<MessageBuffer>* data);
  absl::Status CompleteSends();
  // Once, before the first messages on the device: one tiny exchange both ways with the
  // previous stage, then with the next. NCCL sets up a pair's connections in the group
  // that first uses them and waits there for the peer to set up the reverse direction; a
  // 1F1B stage's first group (its sends and a receive) would wait for a peer that is itself
  // waiting for those sends. Stage s pairs with s-1 first and s+1 second, so the exchanges
  // complete in stage order.
  absl::Status ConnectPeers();

  PipelineStages* const stages_;
  const PipelineSchedule schedule_;
  const int stage_;
  const int pipeline_;
  Communicator* const p2p_;
  Communicator* const scatter_gather_;  // null: whole messages
  const int num_chunks_;
  const size_t seq_length_;            // S
  const size_t activation_elements_;   // S * C: one sequence's hidden state
  const size_t sequence_parallel_;     // t under sequence parallelism, else 1
  std::vector<size_t> last_backward_;  // per chunk: its last BACKWARD or BACKWARD_INPUT
  std::vector<size_t> last_weight_;    // per chunk: its last BACKWARD_WEIGHT
  std::vector<std::unique_ptr<InFlight>> in_flight_;  // by microbatch * chunks + chunk
  std::vector<Send> sends_;
  std::map<uint64_t, std::unique_ptr<MessageBuffer>> self_messages_;  // by message tag
  int previous_peer_ = -1;  // the previous stage's rank (-1 on the first stage)
  int next_peer_ = -1;      // the next stage's rank (-1 on the last stage)
  bool peers_connected_ = false;
  PipelineTimings timings_;
};

}  // namespace mtrain

#endif  // MTRAIN_WORKER_PARALLEL_PIPELINE_EXECUTOR_H_
