// The PromQL a Grafana dashboard JSON runs: every panel target's `expr` (panels nested in
// rows included) and the selector inside each query variable's `label_values(...)`, so
// tests can check them against what the coordinator exports and run them on a real
// Prometheus.
//
//   ASSIGN_OR_RETURN(std::vector<DashboardQuery> queries, DashboardQueries(json_text));
//   for (const DashboardQuery& q : queries) Run(ExpandGrafanaVariables(q.expr, "1m"));
#ifndef MTRAIN_DASHBOARD_DASHBOARD_QUERIES_H_
#define MTRAIN_DASHBOARD_DASHBOARD_QUERIES_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace mtrain {

struct DashboardQuery {
  std::string where;  // "panel 'Loss' target A" or "variable 'job'"
  std::string expr;   // PromQL, Grafana variables unexpanded
  // The data source the panel or target names: its uid ("${datasource}"), or empty.
  std::string datasource_uid;
  bool instant = false;
};

// INVALID_ARGUMENT if the text is not JSON, has no `panels`, or a panel that draws data
// has a target without `expr`.
absl::StatusOr<std::vector<DashboardQuery>> DashboardQueries(absl::string_view dashboard_json);

// Replaces Grafana's variables by values a plain Prometheus accepts: `$job`/`${job}` by
// `.*` (every panel matches it with =~), `$__rate_interval`, `$__interval` and
// `$__range` by `rate_interval`.
std::string ExpandGrafanaVariables(absl::string_view expr, absl::string_view rate_interval);

}  // namespace mtrain

#endif  // MTRAIN_DASHBOARD_DASHBOARD_QUERIES_H_
