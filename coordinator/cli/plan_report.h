// Formats `trainctl plan`: the fastest layouts the planner predicts for a job on a cluster,
// what training a number of tokens would take, and every rejected layout grouped by reason.
#ifndef MTRAIN_COORDINATOR_CLI_PLAN_REPORT_H_
#define MTRAIN_COORDINATOR_CLI_PLAN_REPORT_H_

#include <cstdint>
#include <string>

#include "plan/layout_search.h"
#include "proto/cluster.pb.h"
#include "proto/job_spec.pb.h"

namespace mtrain {

struct PlanReportOptions {
  int top = 5;        // layouts listed
  int examples = 3;   // rejected layouts shown per reason
  double tokens = 0;  // time-to-train estimate for this many tokens (0: skip)
};

// The model's parameter count (model/'s table, at the real vocabulary; a tied embedding
// counted once).
double ModelParameters(const JobSpec& spec);

std::string FormatPlanReport(const JobSpec& spec, const ClusterDescription& cluster,
                             const LayoutSearch& search, const PlanReportOptions& options);

}  // namespace mtrain

#endif  // MTRAIN_COORDINATOR_CLI_PLAN_REPORT_H_
