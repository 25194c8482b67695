// Plans every rank of a job generation: its grid coordinates, its layer chunks and its
// pipeline schedule, checked by the schedule checker before anyone runs it. The coordinator
// hands the result to workers; `train` (static mode) computes the same plan locally, so
// both run exactly the same thing.
//
// A GenerationPlan is the shared, per-generation table: what every rank of one pipeline
// stage has in common (layers, the schedule with stages where the peers go) plus the
// peers' list, built and checked once. Its size and its cost grow with the pipeline depth
// and the schedule, not with the world: the coordinator keeps one per live generation and
// turns it into a rank's Assignment only when that rank's worker collects it.
//
//   ASSIGN_OR_RETURN(std::unique_ptr<GenerationPlan> plan,
//                    GenerationPlan::Create(spec, "job-1", 1, peers));
//   const Assignment mine = plan->AssignmentFor(my_rank);
//
//   ASSIGN_OR_RETURN(std::vector<Assignment> all, PlanAssignments(spec, "job-1", 1, {}));
#ifndef MTRAIN_PLAN_ASSIGNMENT_PLAN_H_
#define MTRAIN_PLAN_ASSIGNMENT_PLAN_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "plan/rank_grid.h"
#include "proto/assignment.pb.h"
#include "proto/job_spec.pb.h"

namespace mtrain {

class GenerationPlan {
 public:
  // `spec` must be resolved (defaults applied, valid). `peers[r]` describes global rank r
  // (worker id, host); empty means every rank on loopback. INVALID_ARGUMENT for a spec the
  // plan cannot realise; INTERNAL if a generated schedule fails the checker (a bug, never
  // the user's). Every pipeline group runs the same stage schedules with its own ranks in
  // the peers' places, so checking the stages' schedules once proves every group's.
  static absl::StatusOr<std::unique_ptr<GenerationPlan>> Create(const JobSpec& spec,
                                                                const std::string& job_id,
                                                                int64_t generation,
                                                                std::vector<Peer> peers);

  // Set on every rank's Assignment (see proto/assignment.proto).
  void set_resume_step(std::optional<int64_t> step) { resume_step_ = step; }
  void set_collective_timeout_ms(int64_t ms) { collective_timeout_ms_ = ms; }

  const JobSpec& spec() const { return spec_; }
  const std::string& job_id() const { return job_id_; }
  int64_t generation() const { return generation_; }
  int world_size() const { return grid_.world_size(); }
  const std::string& rendezvous_prefix() const { return rendezvous_prefix_; }
  // Requires 0 <= rank < world_size().
  RankCoordinates Coordinates(int rank) const;
  // The Assignment of global rank `rank` (0 <= rank < world_size()).
  Assignment AssignmentFor(int rank) const;

 private:
  explicit GenerationPlan(RankGrid grid) : grid_(grid) {}

  JobSpec spec_;
  std::string job_id_;
  int64_t generation_ = 0;
  RankGrid grid_;
  std::vector<Peer> peers_;  // by global rank; empty: every rank on loopback
  std::map<int32_t, int32_t> hosts_by_rank_count_;
  // By pipeline stage; the schedules' SEND_*/RECV_* name stages, not ranks, as peers.
  std::vector<std::vector<LayerRange>> stage_layers_;
  std::vector<PipelineSchedule> stage_schedules_;
  std::string rendezvous_prefix_;
  std::optional<int64_t> resume_step_;
  int64_t collective_timeout_ms_ = 0;
};

// Every rank's Assignment of one generation, indexed by global rank (GenerationPlan's
// AssignmentFor for each): for `train`'s static mode and the tests.
absl::StatusOr<std::vector<Assignment>> PlanAssignments(const JobSpec& spec,
                                                        const std::string& job_id,
                                                        int64_t generation,
                                                        const std::vector<Peer>& peers);

}  // namespace mtrain

#endif  // MTRAIN_PLAN_ASSIGNMENT_PLAN_H_
