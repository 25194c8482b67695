#include "plan/pipeline_schedule.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "plan/pipeline_placement.h"
#include "plan/zero_bubble_schedule.h"

namespace mtrain {
namespace {

// PipelineMessageTag packs (microbatch, receiving virtual stage, direction) into 64 bits;
// the virtual stage gets 20 bits, so p * v must stay below this.
constexpr int64_t kVirtualStageTagRange = int64_t{1} << 20;

// One computation of a stage's order; AppendCompute adds the messages around it.
struct Compute {
  enum Kind { kForward, kBackward, kBackwardInput, kBackwardWeight };
  Kind kind;
  int microbatch;
  int chunk;
};

bool IsVShaped(const ScheduleConfig& config) { return config.schedule == SCHEDULE_ZB_V; }

absl::Status ValidateConfig(const ScheduleConfig& config, int stage, size_t num_stage_ranks) {
  const int p = config.pipeline;
  const int v = config.virtual_stages;
  const int m = config.microbatches;
  const auto invalid = [&](absl::string_view rule) {
    return absl::InvalidArgumentError(absl::StrCat("pipeline schedule: ", rule, " (m=", m,
                                                   ", p=", p, ", v=", v, ", stage=", stage, ")"));
  };
  switch (config.schedule) {
    case SCHEDULE_UNSPECIFIED:
    case SCHEDULE_GPIPE:
    case SCHEDULE_1F1B:
    case SCHEDULE_INTERLEAVED_1F1B:
    case SCHEDULE_ZB_H1:
    case SCHEDULE_ZB_V:
      break;
    default:
      return invalid(absl::StrCat("unknown schedule ", static_cast<int>(config.schedule)));
  }
  if (p < 1) return invalid("needs pipeline >= 1");
  if (v < 1) return invalid("needs virtual_stages >= 1");
  if (m < 1) return invalid("needs microbatches >= 1");
  if (int64_t{p} * v >= kVirtualStageTagRange) {
    return invalid(absl::StrCat("needs pipeline * virtual_stages < ", kVirtualStageTagRange));
  }
  const bool interleaved = config.schedule == SCHEDULE_INTERLEAVED_1F1B;
  if (config.schedule == SCHEDULE_ZB_V) {
    if (v != 2) return invalid("the ZB-V schedule places exactly 2 chunks per stage");
  } else if (v > 1 && !interleaved) {
    return invalid("virtual_stages > 1 needs the interleaved or the ZB-V schedule");
  }
  if (interleaved && p < 2) return invalid("interleaved schedule needs pipeline >= 2");
  if (interleaved && m % p != 0) {
    return invalid("interleaved schedule needs microbatches % pipeline == 0");
  }
  if (stage < 0 || stage >= p) return invalid("needs 0 <= stage < pipeline");
  if (num_stage_ranks != static_cast<size_t>(p)) {
    return invalid(
        absl::StrCat("needs one rank per stage (stage_ranks.size()=", num_stage_ranks, ")"));
  }
  return absl::OkStatus();
}

std::vector<Compute> GPipeOrder(int m) {
  std::vector<Compute> order;
  for (int mb = 0; mb < m; ++mb) order.push_back({Compute::kForward, mb, 0});
  for (int mb = 0; mb < m; ++mb) order.push_back({Compute::kBackward, mb, 0});
  return order;
}

// PipeDream-Flush: stage s runs ahead by p - s - 1 forwards, which is exactly enough to
// keep it busy until the first output gradient comes back, and no more (memory).
std::vector<Compute> OneFOneBOrder(int p, int m, int stage) {
  const int warmup = std::min(p - stage - 1, m);
  const int steady = m - warmup;
  std::vector<Compute> order;
  for (int mb = 0; mb < warmup; ++mb) order.push_back({Compute::kForward, mb, 0});
  for (int i = 0; i < steady; ++i) {
    order.push_back({Compute::kForward, warmup + i, 0});
    order.push_back({Compute::kBackward, i, 0});
  }
  for (int mb = steady; mb < m; ++mb) order.push_back({Compute::kBackward, mb, 0});
  return order;
}

// Megatron-LM's forward_backward_pipelining_with_interleaving: the k-th forward (and the
// k-th backward) of a stage walk groups of p microbatches through the chunks, forwards in
// chunk order, backwards in reverse chunk order.
Compute InterleavedCompute(int p, int v, int k, bool forward) {
  const int in_group = k % (p * v);
  const int chunk = in_group / p;
  const int microbatch = (k / (p * v)) * p + k % p;
  return {forward ? Compute::kForward : Compute::kBackward, microbatch,
          forward ? chunk : v - 1 - chunk};
}

std::vector<Compute> InterleavedOrder(int p, int v, int m, int stage) {
  const int total = m * v;
  // Megatron runs everything as warm-up when m == p; otherwise the extra 2 (p - s - 1)
  // forwards cover the round trip to the last stage and back.
  const int warmup = m == p ? total : std::min((p - stage - 1) * 2 + (v - 1) * p, total);
  const int steady = total - warmup;
  std::vector<Compute> order;
  for (int k = 0; k < warmup; ++k) order.push_back(InterleavedCompute(p, v, k, true));
  for (int k = 0; k < steady; ++k) {
    order.push_back(InterleavedCompute(p, v, warmup + k, true));
    order.push_back(InterleavedCompute(p, v, k, false));
  }
  for (int k = steady; k < total; ++k) order.push_back(InterleavedCompute(p, v, k, false));
  return order;
}

void AddAction(PipelineAction::Kind kind, const Compute& compute, int peer_rank,
               PipelineSchedule* schedule) {
  PipelineAction* action = schedule->add_actions();
  action->set_kind(kind);
  action->set_microbatch(compute.microbatch);
  action->set_chunk(compute.chunk);
  action->set_peer_rank(peer_rank);
}

// The zero-bubble orders (zero_bubble_schedule.h) of stage `stage`.
std::vector<Compute> ZeroBubbleOrder(const ScheduleConfig& config, int stage) {
  std::vector<Compute> order;
  const std::vector<std::vector<ZeroBubbleCompute>> orders =
      ZeroBubbleOrders(config.pipeline, config.microbatches, IsVShaped(config));
  for (const ZeroBubbleCompute& c : orders[stage]) {
    const Compute::Kind kind = c.kind == ZeroBubbleCompute::kForward ? Compute::kForward
                               : c.kind == ZeroBubbleCompute::kBackwardInput
                                   ? Compute::kBackwardInput
                                   : Compute::kBackwardWeight;
    order.push_back({kind, c.microbatch, c.chunk});
  }
  return order;
}

// Each receive goes immediately before the compute that needs it and each send right
// after the compute that produced it: receives block as late as possible and sends are
// posted as early as possible, so the lists deadlock only if the compute order itself
// has a cycle (schedule_checker proves it has none). The peers are the ranks of the
// adjacent virtual stages (pipeline_placement.h): this rank itself at ZB-V's turn.
void AppendCompute(const Compute& compute, int stage, const ScheduleConfig& config,
                   const std::vector<int>& stage_ranks, PipelineSchedule* schedule) {
  const int p = config.pipeline;
  const bool v_shape = IsVShaped(config);
  const int virtual_stage = VirtualStageOf(stage, compute.chunk, p, v_shape);
  const bool first = virtual_stage == 0;
  const bool last = virtual_stage == p * config.virtual_stages - 1;
  const int prev_rank = first ? 0 : stage_ranks[StageChunkOf(virtual_stage - 1, p, v_shape).stage];
  const int next_rank = last ? 0 : stage_ranks[StageChunkOf(virtual_stage + 1, p, v_shape).stage];
  switch (compute.kind) {
    case Compute::kForward:
      if (!first) AddAction(PipelineAction::RECV_FORWARD, compute, prev_rank, schedule);
      AddAction(PipelineAction::FORWARD, compute, 0, schedule);
      if (!last) AddAction(PipelineAction::SEND_FORWARD, compute, next_rank, schedule);
      break;
    case Compute::kBackward:
    case Compute::kBackwardInput:
      if (!last) AddAction(PipelineAction::RECV_BACKWARD, compute, next_rank, schedule);
      AddAction(compute.kind == Compute::kBackward ? PipelineAction::BACKWARD
                                                   : PipelineAction::BACKWARD_INPUT,
                compute, 0, schedule);
      if (!first) AddAction(PipelineAction::SEND_BACKWARD, compute, prev_rank, schedule);
      break;
    case Compute::kBackwardWeight:
      AddAction(PipelineAction::BACKWARD_WEIGHT, compute, 0, schedule);
      break;
  }
}

}  // namespace

absl::StatusOr<PipelineSchedule> BuildPipelineSchedule(const ScheduleConfig& config, int stage,
                                                       const std::vector<int>& stage_ranks) {
  absl::Status status = ValidateConfig(config, stage, stage_ranks.size());
  if (!status.ok()) return status;
  const int p = config.pipeline;
  const int m = config.microbatches;
  std::vector<Compute> order;
  switch (config.schedule) {
    case SCHEDULE_GPIPE:
      order = GPipeOrder(m);
      break;
    case SCHEDULE_INTERLEAVED_1F1B:
      order = InterleavedOrder(p, config.virtual_stages, m, stage);
      break;
    case SCHEDULE_ZB_H1:
    case SCHEDULE_ZB_V:
      order = ZeroBubbleOrder(config, stage);
      break;
    default:  // SCHEDULE_1F1B, and SCHEDULE_UNSPECIFIED which means it (job_spec.proto).
      order = OneFOneBOrder(p, m, stage);
      break;
  }
  PipelineSchedule schedule;
  schedule.set_num_microbatches(m);
  schedule.set_v_shape(IsVShaped(config));
  for (const Compute& compute : order) {
    AppendCompute(compute, stage, config, stage_ranks, &schedule);
  }
  return schedule;
}

// Compute actions get the tag of the message they consume (the same as their RECV_*); the
// value is only meaningful for actions that pass the checker's structural rules.
uint64_t PipelineMessageTag(const PipelineAction& action, int stage, int pipeline, bool v_shape) {
  int64_t receiver = VirtualStageOf(stage, action.chunk(), pipeline, v_shape);
  if (action.kind() == PipelineAction::SEND_FORWARD) ++receiver;
  if (action.kind() == PipelineAction::SEND_BACKWARD) --receiver;
  const bool backward = action.kind() == PipelineAction::BACKWARD ||
                        action.kind() == PipelineAction::BACKWARD_INPUT ||
                        action.kind() == PipelineAction::SEND_BACKWARD ||
                        action.kind() == PipelineAction::RECV_BACKWARD;
  const uint64_t key = static_cast<uint64_t>(action.microbatch()) * kVirtualStageTagRange +
                       static_cast<uint64_t>(receiver);
  return key * 2 + (backward ? 1 : 0);
}

}  // namespace mtrain
