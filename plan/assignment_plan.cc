#include "plan/assignment_plan.h"

#include <cstdint>
#include <map>
#include <string>

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

absl::StatusOr<std::vector<Assignment>> PlanAssignments(const JobSpec& spec,
                                                        const std::string& job_id,
                                                        int64_t generation,
                                                        const std::vector<Peer>& peers) {
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

  // Each Assignment names its own peer entry and how many hosts run each number of ranks,
  // never every peer or host: its size grows with neither.
  std::map<std::string, int> ranks_per_host;
  for (const Peer& peer : peers) ++ranks_per_host[peer.host().empty() ? "127.0.0.1" : peer.host()];
  google::protobuf::Map<int32_t, int32_t> hosts_by_rank_count;
  for (const auto& [host, ranks] : ranks_per_host) ++hosts_by_rank_count[ranks];
  // Schedules depend only on the stage; peers are the ranks of one pipeline group.
  std::vector<Assignment> plan(world);
  for (int rank = 0; rank < world; ++rank) {
    const GridCoordinates c = grid.Coordinates(rank);
    const std::vector<int> stage_ranks = grid.GroupMembers(GroupKind::kPipeline, rank);
    Assignment& a = plan[rank];
    a.set_job_id(job_id);
    a.set_generation(generation);
    *a.mutable_spec() = spec;
    RankCoordinates* coords = a.mutable_rank();
    coords->set_global_rank(rank);
    coords->set_world_size(world);
    coords->set_tp_rank(c.tp);
    coords->set_pp_rank(c.pp);
    coords->set_dp_rank(c.dp);
    ASSIGN_OR_RETURN(
        std::vector<LayerRange> chunks,
        PartitionLayers(spec.model().num_layers(), parallel.pipeline(), parallel.virtual_stages(),
                        c.pp, parallel.schedule() == SCHEDULE_ZB_V));
    for (LayerRange& chunk : chunks) *a.add_layers() = std::move(chunk);
    ASSIGN_OR_RETURN(*a.mutable_schedule(), BuildPipelineSchedule(config, c.pp, stage_ranks));
    Peer* self = a.mutable_self();
    if (!peers.empty()) *self = peers[rank];
    self->set_global_rank(rank);
    if (self->host().empty()) self->set_host("127.0.0.1");
    *a.mutable_hosts_by_rank_count() = hosts_by_rank_count;
    a.set_rendezvous_prefix(absl::StrCat(job_id, "/gen-", generation, "/"));
  }
  // Prove every pipeline group's schedules before anyone runs them.
  for (const std::vector<int>& group : grid.AllGroups(GroupKind::kPipeline)) {
    std::vector<PipelineSchedule> schedules;
    for (int rank : group) schedules.push_back(plan[rank].schedule());
    absl::StatusOr<ScheduleReport> report = CheckPipelineSchedules(config, schedules, group);
    if (!report.ok()) {
      return absl::InternalError(absl::StrCat("generated pipeline schedule failed its check: ",
                                              report.status().message()));
    }
  }
  return plan;
}

}  // namespace mtrain
