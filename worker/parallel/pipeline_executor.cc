#include "worker/parallel/pipeline_executor.h"

#include <algorithm>
#include <chrono>

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
      last_backward_(stages->num_chunks(), 0) {
  for (int i = 0; i < schedule_.actions_size(); ++i) {
    const PipelineAction& a = schedule_.actions(i);
    if (a.kind() == PipelineAction::BACKWARD && a.chunk() >= 0 && a.chunk() < num_chunks_) {
      last_backward_[a.chunk()] = i;
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
  switch (action.kind()) {
    case PipelineAction::RECV_FORWARD:
      slot->input.resize(elements);
      return Receive(action, &slot->input);
    case PipelineAction::FORWARD: {
      if (!ends.has_embedding && slot->input.size() != elements) {
        return absl::FailedPreconditionError("forward before its input was received");
      }
      if (!ends.has_head) slot->output.resize(elements);
      const auto start = std::chrono::steady_clock::now();
      ASSIGN_OR_RETURN(const double sum,
                       stages_->Forward(c, mb, microbatches[mb],
                                        ends.has_embedding ? nullptr : slot->input.data(),
                                        ends.has_head ? nullptr : slot->output.data()));
      timings_.compute_seconds += SecondsSince(start);
      *loss_sum += sum;
      slot->forward_done = true;
      std::vector<float>().swap(slot->input);  // copied into the activations
      return absl::OkStatus();
    }
    case PipelineAction::SEND_FORWARD:
      return StartSend(action, &slot->output);
    case PipelineAction::RECV_BACKWARD:
      slot->d_output.resize(elements);
      return Receive(action, &slot->d_output);
    case PipelineAction::BACKWARD: {
      if (!slot->forward_done) return absl::FailedPreconditionError("backward before forward");
      if (!ends.has_head && slot->d_output.size() != elements) {
        return absl::FailedPreconditionError("backward before its output gradient arrived");
      }
      if (!ends.has_embedding) slot->d_input.resize(elements);
      const auto start = std::chrono::steady_clock::now();
      RETURN_IF_ERROR(stages_->Backward(
          c, mb, ends.has_head ? nullptr : slot->d_output.data(), d_loss_per_token,
          ends.has_embedding ? nullptr : slot->d_input.data(), index == last_backward_[c]));
      timings_.compute_seconds += SecondsSince(start);
      slot->forward_done = false;
      std::vector<float>().swap(slot->d_output);
      return absl::OkStatus();
    }
    case PipelineAction::SEND_BACKWARD:
      return StartSend(action, &slot->d_input);
    default:
      return absl::InvalidArgumentError("unknown action kind");
  }
}

size_t PipelineExecutor::SliceBegin(size_t elements) const {
  return scatter_gather_ == nullptr ? 0
                                    : elements / scatter_gather_->size() * scatter_gather_->rank();
}

size_t PipelineExecutor::SliceSize(size_t elements) const {
  return scatter_gather_ == nullptr ? elements : elements / scatter_gather_->size();
}

absl::Status PipelineExecutor::StartSend(const PipelineAction& action, std::vector<float>* data) {
  if (data->empty()) return absl::FailedPreconditionError("send before its data was computed");
  if (p2p_ == nullptr) return absl::FailedPreconditionError("no point-to-point group");
  if (scatter_gather_ != nullptr && data->size() % scatter_gather_->size() != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a message of ", data->size(), " floats does not split over ", scatter_gather_->name()));
  }
  ASSIGN_OR_RETURN(std::unique_ptr<PendingSend> pending,
                   p2p_->StartSend(data->data() + SliceBegin(data->size()),
                                   SliceSize(data->size()) * sizeof(float), action.peer_rank(),
                                   PipelineMessageTag(action, stage_, pipeline_)));
  // Moving the vector keeps its heap block, which the pending send points into.
  sends_.push_back(Send{std::move(pending), std::move(*data)});
  data->clear();
  return absl::OkStatus();
}

absl::Status PipelineExecutor::Receive(const PipelineAction& action, std::vector<float>* data) {
  if (p2p_ == nullptr) return absl::FailedPreconditionError("no point-to-point group");
  const auto start = std::chrono::steady_clock::now();
  if (scatter_gather_ == nullptr) {
    absl::Status status = p2p_->Recv(data->data(), data->size() * sizeof(float), action.peer_rank(),
                                     PipelineMessageTag(action, stage_, pipeline_));
    timings_.wait_seconds += SecondsSince(start);
    return status;
  }
  // This rank's slice from its peer, then every tensor rank's over the tensor group.
  std::vector<float> slice(SliceSize(data->size()));
  absl::Status status = p2p_->Recv(slice.data(), slice.size() * sizeof(float), action.peer_rank(),
                                   PipelineMessageTag(action, stage_, pipeline_));
  timings_.wait_seconds += SecondsSince(start);
  RETURN_IF_ERROR(status);
  return scatter_gather_->AllGather(slice.data(), data->data(), slice.size());
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
