#include "plan/assignment_plan.h"

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "plan/layer_partition.h"
#include "plan/pipeline_schedule.h"
#include "plan/rank_grid.h"
#include "plan/schedule_checker.h"
#include "spec/job_spec_arithmetic.h"
#include "spec/job_spec_limits.h"

namespace mtrain {

absl::StatusOr<std::unique_ptr<GenerationPlan>> GenerationPlan::Create(const JobSpec& spec,
                                                                       const std::string& job_id,
                                                                       int64_t generation,
                                                                       std::vector<Peer> peers) {
  const ParallelSpec& parallel = spec.parallel();
  ASSIGN_OR_RETURN(const RankGrid grid,
                   RankGrid::Create(parallel.tensor(), parallel.pipeline(), parallel.data()));
  // Validation bounds all of this; checked again because every schedule below is
  // materialised (a spec that slipped past validation once made a 2^31-entry schedule and
  // aborted the coordinator). Shrunk grids are planned too, so the bounds are restated
  // here rather than the whole spec re-validated. 64-bit: the inputs are unchecked.
  const auto beyond_bounds = [&](absl::string_view what) {
    return absl::InvalidArgumentError(absl::StrCat(
        "parallel: ", what,
        " exceeds the plan's bounds [rule: tensor, pipeline, data and "
        "their product <= ",
        kMaxWorldSize, ", virtual_stages <= ", kMaxVirtualStages,
        ", micro_batch_size >= 1, microbatches * virtual_stages <= ", kMaxScheduledMicrobatches,
        ", and world * that <= ", kMaxPlanScheduledMicrobatches, "]"));
  };
  if (parallel.tensor() > kMaxWorldSize || parallel.pipeline() > kMaxWorldSize ||
      parallel.data() > kMaxWorldSize || parallel.virtual_stages() < 1 ||
      parallel.virtual_stages() > kMaxVirtualStages || parallel.micro_batch_size() < 1) {
    return beyond_bounds("a degree or the micro batch size");
  }
  // Each factor is now at most 2^31: no product below overflows 64 bits.
  const int64_t world64 = int64_t{parallel.tensor()} * parallel.pipeline() * parallel.data();
  const int64_t scheduled =
      MicrobatchesPerReplica(parallel, parallel.data()) * parallel.virtual_stages();
  if (world64 > kMaxWorldSize || scheduled > kMaxScheduledMicrobatches ||
      world64 * scheduled > kMaxPlanScheduledMicrobatches) {
    return beyond_bounds(
        absl::StrCat(world64, " ranks with ", scheduled, " scheduled microbatches each"));
  }
  const int world = grid.world_size();
  if (!peers.empty() && static_cast<int>(peers.size()) != world) {
    return absl::InvalidArgumentError(
        absl::StrCat("plan for ", world, " ranks got ", peers.size(), " peers"));
  }
  ScheduleConfig config;
  config.schedule = parallel.schedule();
  config.pipeline = parallel.pipeline();
  config.virtual_stages = parallel.virtual_stages();
  config.microbatches = NumMicrobatches(parallel);

  std::unique_ptr<GenerationPlan> plan(new GenerationPlan(grid));
  plan->spec_ = spec;
  plan->job_id_ = job_id;
  plan->generation_ = generation;
  plan->rendezvous_prefix_ = absl::StrCat(job_id, "/gen-", generation, "/");
  // Each Assignment names its own peer entry and how many hosts run each number of ranks,
  // never every peer or host: its size grows with neither.
  std::map<std::string, int> ranks_per_host;
  for (const Peer& peer : peers) ++ranks_per_host[peer.host().empty() ? "127.0.0.1" : peer.host()];
  for (const auto& [host, ranks] : ranks_per_host) ++plan->hosts_by_rank_count_[ranks];
  plan->peers_ = std::move(peers);
  // What a stage's ranks share, built once: the layers and the schedule, with the stage
  // indices where the peers' ranks go (AssignmentFor puts in the ranks of each group).
  const int p = parallel.pipeline();
  std::vector<int> stages(p);
  for (int stage = 0; stage < p; ++stage) stages[stage] = stage;
  for (int stage = 0; stage < p; ++stage) {
    ASSIGN_OR_RETURN(std::vector<LayerRange> chunks,
                     PartitionLayers(spec.model().num_layers(), p, parallel.virtual_stages(), stage,
                                     parallel.schedule() == SCHEDULE_ZB_V));
    plan->stage_layers_.push_back(std::move(chunks));
    ASSIGN_OR_RETURN(PipelineSchedule schedule, BuildPipelineSchedule(config, stage, stages));
    plan->stage_schedules_.push_back(std::move(schedule));
  }
  // Prove the schedules before anyone runs them. Every pipeline group runs them with its
  // own ranks in the stages' places (a one-to-one renaming), so one proof covers all.
  absl::StatusOr<ScheduleReport> report =
      CheckPipelineSchedules(config, plan->stage_schedules_, stages);
  if (!report.ok()) {
    return absl::InternalError(
        absl::StrCat("generated pipeline schedule failed its check: ", report.status().message()));
  }
  return plan;
}

RankCoordinates GenerationPlan::Coordinates(int rank) const {
  const GridCoordinates c = grid_.Coordinates(rank);
  RankCoordinates coords;
  coords.set_global_rank(rank);
  coords.set_world_size(grid_.world_size());
  coords.set_tp_rank(c.tp);
  coords.set_pp_rank(c.pp);
  coords.set_dp_rank(c.dp);
  return coords;
}

Assignment GenerationPlan::AssignmentFor(int rank) const {
  const GridCoordinates c = grid_.Coordinates(rank);
  Assignment a;
  a.set_job_id(job_id_);
  a.set_generation(generation_);
  *a.mutable_spec() = spec_;
  *a.mutable_rank() = Coordinates(rank);
  for (const LayerRange& chunk : stage_layers_[c.pp]) *a.add_layers() = chunk;
  PipelineSchedule* schedule = a.mutable_schedule();
  *schedule = stage_schedules_[c.pp];
  const std::vector<int> stage_ranks = grid_.GroupMembers(GroupKind::kPipeline, rank);
  for (PipelineAction& action : *schedule->mutable_actions()) {
    switch (action.kind()) {
      case PipelineAction::SEND_FORWARD:
      case PipelineAction::RECV_FORWARD:
      case PipelineAction::SEND_BACKWARD:
      case PipelineAction::RECV_BACKWARD:
        action.set_peer_rank(stage_ranks[action.peer_rank()]);
        break;
      default:
        break;
    }
  }
  Peer* self = a.mutable_self();
  if (!peers_.empty()) *self = peers_[rank];
  self->set_global_rank(rank);
  if (self->host().empty()) self->set_host("127.0.0.1");
  a.mutable_hosts_by_rank_count()->insert(hosts_by_rank_count_.begin(), hosts_by_rank_count_.end());
  a.set_rendezvous_prefix(rendezvous_prefix_);
  if (resume_step_.has_value()) a.set_resume_step(*resume_step_);
  a.set_collective_timeout_ms(collective_timeout_ms_);
  return a;
}

absl::StatusOr<std::vector<Assignment>> PlanAssignments(const JobSpec& spec,
                                                        const std::string& job_id,
                                                        int64_t generation,
                                                        const std::vector<Peer>& peers) {
  ASSIGN_OR_RETURN(std::unique_ptr<GenerationPlan> plan,
                   GenerationPlan::Create(spec, job_id, generation, peers));
  std::vector<Assignment> assignments;
  assignments.reserve(plan->world_size());
  for (int rank = 0; rank < plan->world_size(); ++rank) {
    assignments.push_back(plan->AssignmentFor(rank));
  }
  return assignments;
}

}  // namespace mtrain
