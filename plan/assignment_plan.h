// Plans every rank of a job generation: its grid coordinates, its layer chunks and its
// pipeline schedule, checked by the schedule checker before anyone runs it. The coordinator
// hands the result to workers; `train` (static mode) computes the same plan locally, so
// both run exactly the same thing.
//
//   ASSIGN_OR_RETURN(std::vector<Assignment> plan, PlanAssignments(spec, "job-1", 1, {}));
//   const Assignment& mine = plan[my_rank];
#ifndef MTRAIN_PLAN_ASSIGNMENT_PLAN_H_
#define MTRAIN_PLAN_ASSIGNMENT_PLAN_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/assignment.pb.h"
#include "proto/job_spec.pb.h"

namespace mtrain {

// `spec` must be resolved (defaults applied, valid). `peers[r]` describes global rank r
// (worker id, host); empty means every rank on loopback. Returns one Assignment per global
// rank, indexed by global rank. INVALID_ARGUMENT for a spec the plan cannot realise;
// INTERNAL if a generated schedule fails the checker (a bug, never the user's).
absl::StatusOr<std::vector<Assignment>> PlanAssignments(const JobSpec& spec,
                                                        const std::string& job_id,
                                                        int64_t generation,
                                                        const std::vector<Peer>& peers);

}  // namespace mtrain

#endif  // MTRAIN_PLAN_ASSIGNMENT_PLAN_H_
