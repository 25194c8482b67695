#include "worker/parallel/pipeline_executor.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "plan/pipeline_schedule.h"

namespace mtrain {
namespace {

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

std::string Describe(const PipelineAction& a) {
  return absl::StrCat(PipelineAction::Kind_Name(a.kind()), "(microbatch ", a.microbatch(),
                      ", chunk ", a.chunk(), ", peer ", a.peer_rank(), ")");
}

}  // namespace

absl::Status CheckMessagesInOrder(const PipelineSchedule& schedule) {
  // Per (peer, direction): the kind of message seen first and the last microbatch.
  struct Channel {
    PipelineAction::Kind kind;
    int last_microbatch;
  };
  std::map<std::pair<int, bool>, Channel> channels;
  for (int i = 0; i < schedule.actions_size(); ++i) {
    const PipelineAction& a = schedule.actions(i);
    const bool sends =
        a.kind() == PipelineAction::SEND_FORWARD || a.kind() == PipelineAction::SEND_BACKWARD;
    const bool receives =
        a.kind() == PipelineAction::RECV_FORWARD || a.kind() == PipelineAction::RECV_BACKWARD;
    if (!sends && !receives) continue;
    auto [it, first] = channels.try_emplace({a.peer_rank(), sends}, Channel{a.kind(), -1});
    if (!first && it->second.kind != a.kind()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "action ", i, " ", Describe(a), " mixes activations and gradients with peer ",
          a.peer_rank(), ": a transport without tags could not tell them apart"));
    }
    if (a.microbatch() <= it->second.last_microbatch) {
      return absl::InvalidArgumentError(absl::StrCat(
          "action ", i, " ", Describe(a), " comes after microbatch ", it->second.last_microbatch,
          " of the same kind: out of order for a transport without tags"));
    }
    it->second.last_microbatch = a.microbatch();
  }
  return absl::OkStatus();
}

PipelineExecutor::PipelineExecutor(PipelineStages* stages, PipelineSchedule schedule, int stage,
                                   int pipeline, Communicator* p2p, Communicator* scatter_gather,
                                   int sequence_parallel)
    : stages_(stages),
      schedule_(std::move(schedule)),
      stage_(stage),
      pipeline_(pipeline),
      p2p_(p2p),
      scatter_gather_(scatter_gather != nullptr && scatter_gather->size() > 1 ? scatter_gather
                                                                              : nullptr),
      num_chunks_(stages->num_chunks()),
      seq_length_(stages->seq_length()),
      activation_elements_(static_cast<size_t>(stages->seq_length()) * stages->hidden_size()),
      sequence_parallel_(static_cast<size_t>(std::max(1, sequence_parallel))),
      last_backward_(stages->num_chunks(), 0),
      last_weight_(stages->num_chunks(), 0) {
  for (int i = 0; i < schedule_.actions_size(); ++i) {
    const PipelineAction& a = schedule_.actions(i);
    const bool backward =
        a.kind() == PipelineAction::BACKWARD || a.kind() == PipelineAction::BACKWARD_INPUT;
    if (backward && a.chunk() >= 0 && a.chunk() < num_chunks_) last_backward_[a.chunk()] = i;
    if (a.kind() == PipelineAction::BACKWARD_WEIGHT && a.chunk() >= 0 && a.chunk() < num_chunks_) {
      last_weight_[a.chunk()] = i;
    }
    if (a.kind() == PipelineAction::RECV_FORWARD || a.kind() == PipelineAction::SEND_BACKWARD) {
      previous_peer_ = a.peer_rank();
    }
    if (a.kind() == PipelineAction::SEND_FORWARD || a.kind() == PipelineAction::RECV_BACKWARD) {
      next_peer_ = a.peer_rank();
    }
  }
}

absl::StatusOr<double> PipelineExecutor::RunStep(const std::vector<Microbatch>& microbatches,
                                                 float d_loss_per_token) {
  timings_ = PipelineTimings{};
  return Run(microbatches, d_loss_per_token, /*forward_only=*/false);
}

absl::StatusOr<double> PipelineExecutor::RunForward(const std::vector<Microbatch>& microbatches) {
  const PipelineTimings training = timings_;
  absl::StatusOr<double> loss_sum = Run(microbatches, 0.0f, /*forward_only=*/true);
  timings_ = training;
  return loss_sum;
}

absl::StatusOr<double> PipelineExecutor::Run(const std::vector<Microbatch>& microbatches,
                                             float d_loss_per_token, bool forward_only) {
  in_flight_.clear();
  in_flight_.resize(microbatches.size() * num_chunks_);
  self_messages_.clear();
  if (!peers_connected_ && stages_->messages_on_device()) {
    absl::Status connected = ConnectPeers();
    if (!connected.ok()) {
      return absl::Status(
          connected.code(),
          absl::StrCat("pipeline stage ", stage_,
                       ", connecting to the neighbouring stages: ", connected.message()));
    }
    peers_connected_ = true;
  }
  double loss_sum = 0;
  for (int i = 0; i < schedule_.actions_size(); ++i) {
    const PipelineAction::Kind kind = schedule_.actions(i).kind();
    if (forward_only && kind != PipelineAction::RECV_FORWARD && kind != PipelineAction::FORWARD &&
        kind != PipelineAction::SEND_FORWARD) {
      continue;
    }
    absl::Status status = Execute(i, microbatches, d_loss_per_token, &loss_sum);
    if (!status.ok()) {
      return absl::Status(status.code(),
                          absl::StrCat("pipeline stage ", stage_, ", action ", i, " ",
                                       Describe(schedule_.actions(i)), ": ", status.message()));
    }
  }
  RETURN_IF_ERROR(CompleteSends());
  return loss_sum;
}

absl::Status PipelineExecutor::Execute(size_t index, const std::vector<Microbatch>& microbatches,
                                       float d_loss_per_token, double* loss_sum) {
  const PipelineAction& action = schedule_.actions(index);
  const int mb = action.microbatch();
  const int c = action.chunk();
  if (mb < 0 || mb >= static_cast<int>(microbatches.size()) || c < 0 || c >= num_chunks_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the schedule names microbatch ", mb, " or chunk ", c, " that this rank lacks (",
        microbatches.size(), " microbatches, ", num_chunks_, " chunks)"));
  }
  std::unique_ptr<InFlight>& slot = in_flight_[static_cast<size_t>(mb) * num_chunks_ + c];
  if (slot == nullptr) slot = std::make_unique<InFlight>();
  const ChunkEnds ends = stages_->chunk_ends(c);
  const size_t elements =
      activation_elements_ * (microbatches[mb].tokens.size() / seq_length_) / sequence_parallel_;
  const auto has = [elements](const std::unique_ptr<MessageBuffer>& buffer) {
    return buffer != nullptr && buffer->size() == elements;
  };
  switch (action.kind()) {
    case PipelineAction::RECV_FORWARD:
      if (IsSelf(action)) return ReceiveFromSelf(action, elements, &slot->input);
      RETURN_IF_ERROR(Allocate(elements, &slot->input));
      return Receive(action, slot->input.get());
    case PipelineAction::FORWARD: {
      if (!ends.has_embedding && !has(slot->input)) {
        return absl::FailedPreconditionError("forward before its input was received");
      }
      if (!ends.has_head) RETURN_IF_ERROR(Allocate(elements, &slot->output));
      const auto start = std::chrono::steady_clock::now();
      ASSIGN_OR_RETURN(const double sum,
                       stages_->Forward(c, mb, microbatches[mb],
                                        ends.has_embedding ? nullptr : slot->input->data(),
                                        ends.has_head ? nullptr : slot->output->data()));
      timings_.compute_seconds += SecondsSince(start);
      *loss_sum += sum;
      slot->forward_done = true;
      slot->input.reset();  // copied into the activations
      return absl::OkStatus();
    }
    case PipelineAction::SEND_FORWARD:
      return StartSend(action, &slot->output);
    case PipelineAction::RECV_BACKWARD:
      if (IsSelf(action)) return ReceiveFromSelf(action, elements, &slot->d_output);
      RETURN_IF_ERROR(Allocate(elements, &slot->d_output));
      return Receive(action, slot->d_output.get());
    case PipelineAction::BACKWARD:
    case PipelineAction::BACKWARD_INPUT: {
      if (!slot->forward_done) return absl::FailedPreconditionError("backward before forward");
      if (!ends.has_head && !has(slot->d_output)) {
        return absl::FailedPreconditionError("backward before its output gradient arrived");
      }
      if (!ends.has_embedding) RETURN_IF_ERROR(Allocate(elements, &slot->d_input));
      const auto start = std::chrono::steady_clock::now();
      const float* d_output = ends.has_head ? nullptr : slot->d_output->data();
      float* d_input = ends.has_embedding ? nullptr : slot->d_input->data();
      const bool last = index == last_backward_[c];
      RETURN_IF_ERROR(
          action.kind() == PipelineAction::BACKWARD
              ? stages_->Backward(c, mb, d_output, d_loss_per_token, d_input, last)
              : stages_->BackwardInput(c, mb, d_output, d_loss_per_token, d_input, last));
      timings_.compute_seconds += SecondsSince(start);
      slot->forward_done = false;
      slot->d_output.reset();
      return absl::OkStatus();
    }
    case PipelineAction::SEND_BACKWARD:
      return StartSend(action, &slot->d_input);
    case PipelineAction::BACKWARD_WEIGHT: {
      const auto start = std::chrono::steady_clock::now();
      RETURN_IF_ERROR(stages_->BackwardWeight(c, mb, index == last_weight_[c]));
      timings_.compute_seconds += SecondsSince(start);
      return absl::OkStatus();
    }
    default:
      return absl::InvalidArgumentError("unknown action kind");
  }
}

absl::Status PipelineExecutor::Allocate(size_t elements, std::unique_ptr<MessageBuffer>* buffer) {
  if (*buffer != nullptr && (*buffer)->size() == elements) return absl::OkStatus();
  ASSIGN_OR_RETURN(*buffer, stages_->NewMessage(elements));
  if (*buffer == nullptr || (*buffer)->size() != elements) {
    return absl::InternalError(
        absl::StrCat("the stages handed out no message of ", elements, " floats"));
  }
  return absl::OkStatus();
}

size_t PipelineExecutor::SliceBegin(size_t elements) const {
  return scatter_gather_ == nullptr ? 0
                                    : elements / scatter_gather_->size() * scatter_gather_->rank();
}

size_t PipelineExecutor::SliceSize(size_t elements) const {
  return scatter_gather_ == nullptr ? elements : elements / scatter_gather_->size();
}

absl::Status PipelineExecutor::StartSend(const PipelineAction& action,
                                         std::unique_ptr<MessageBuffer>* data) {
  if (*data == nullptr) return absl::FailedPreconditionError("send before its data was computed");
  if (IsSelf(action)) {
    // Whole, as computed: the receiving chunk is on this rank (and this tensor rank).
    const uint64_t tag = PipelineMessageTag(action, stage_, pipeline_, schedule_.v_shape());
    if (!self_messages_.try_emplace(tag, std::move(*data)).second) {
      return absl::FailedPreconditionError("the same message sent to this rank twice");
    }
    return absl::OkStatus();
  }
  if (p2p_ == nullptr) return absl::FailedPreconditionError("no point-to-point group");
  const size_t elements = (*data)->size();
  if (scatter_gather_ != nullptr && elements % scatter_gather_->size() != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a message of ", elements, " floats does not split over ", scatter_gather_->name()));
  }
  ASSIGN_OR_RETURN(
      std::unique_ptr<PendingSend> pending,
      p2p_->StartSend((*data)->data() + SliceBegin(elements), SliceSize(elements) * sizeof(float),
                      action.peer_rank(),
                      PipelineMessageTag(action, stage_, pipeline_, schedule_.v_shape())));
  // The pending send points into the buffer: it moves along and lives until the send
  // completes.
  sends_.push_back(Send{std::move(pending), std::move(*data)});
  return absl::OkStatus();
}

bool PipelineExecutor::IsSelf(const PipelineAction& action) const {
  return p2p_ != nullptr && action.peer_rank() == p2p_->rank();
}

absl::Status PipelineExecutor::ReceiveFromSelf(const PipelineAction& action, size_t elements,
                                               std::unique_ptr<MessageBuffer>* data) {
  // The receive's tag is the send's: both name the receiving virtual stage.
  auto it = self_messages_.find(PipelineMessageTag(action, stage_, pipeline_, schedule_.v_shape()));
  if (it == self_messages_.end()) {
    return absl::FailedPreconditionError("a message from this rank before this rank sent it");
  }
  if (it->second->size() != elements) {
    return absl::InternalError(absl::StrCat("a message to this rank of ", it->second->size(),
                                            " floats where ", elements, " were expected"));
  }
  *data = std::move(it->second);
  self_messages_.erase(it);
  return absl::OkStatus();
}

absl::Status PipelineExecutor::Receive(const PipelineAction& action, MessageBuffer* data) {
  if (p2p_ == nullptr) return absl::FailedPreconditionError("no point-to-point group");
  const auto start = std::chrono::steady_clock::now();
  if (scatter_gather_ == nullptr) {
    absl::Status status =
        p2p_->Recv(data->data(), data->size() * sizeof(float), action.peer_rank(),
                   PipelineMessageTag(action, stage_, pipeline_, schedule_.v_shape()));
    timings_.wait_seconds += SecondsSince(start);
    return status;
  }
  // This rank's slice from its peer, then every tensor rank's over the tensor group.
  std::unique_ptr<MessageBuffer> slice;
  RETURN_IF_ERROR(Allocate(SliceSize(data->size()), &slice));
  absl::Status status =
      p2p_->Recv(slice->data(), slice->size() * sizeof(float), action.peer_rank(),
                 PipelineMessageTag(action, stage_, pipeline_, schedule_.v_shape()));
  timings_.wait_seconds += SecondsSince(start);
  RETURN_IF_ERROR(status);
  return scatter_gather_->AllGather(slice->data(), data->data(), slice->size());
}

absl::Status PipelineExecutor::ConnectPeers() {
  // Above every PipelineMessageTag (NCCL ignores tags; a tagged transport keeps them apart).
  constexpr uint64_t kConnectTag = ~uint64_t{0};
  for (const int peer : {previous_peer_, next_peer_}) {
    if (peer < 0 || (p2p_ != nullptr && peer == p2p_->rank())) continue;
    if (p2p_ == nullptr) return absl::FailedPreconditionError("no point-to-point group");
    std::unique_ptr<MessageBuffer> out, in;
    RETURN_IF_ERROR(Allocate(1, &out));
    RETURN_IF_ERROR(Allocate(1, &in));
    // The send is issued with the receive, in one NCCL group.
    ASSIGN_OR_RETURN(std::unique_ptr<PendingSend> sent,
                     p2p_->StartSend(out->data(), sizeof(float), peer, kConnectTag));
    RETURN_IF_ERROR(p2p_->Recv(in->data(), sizeof(float), peer, kConnectTag));
    RETURN_IF_ERROR(sent->Wait());
  }
  return absl::OkStatus();
}

absl::Status PipelineExecutor::CompleteSends() {
  const auto start = std::chrono::steady_clock::now();
  absl::Status first;
  for (Send& send : sends_) {
    absl::Status status = send.pending->Wait();
    if (first.ok() && !status.ok()) first = status;
  }
  sends_.clear();
  timings_.wait_seconds += SecondsSince(start);
  return first;
}

}  // namespace mtrain
