// The metric names a PromQL expression reads, so a dashboard or a rules file can be checked
// against what the coordinator really exports (a panel naming a metric that does not exist
// shows "No data" instead of failing).
//
//   absl::StatusOr<std::set<std::string>> names = MetricNamesIn(
//       "sum by (job) (rate(mtrain_step_duration_seconds_sum{job=~\"$job\"}[5m]))");
//   // {"mtrain_step_duration_seconds_sum"}
//
// A tokenizer, not a full parser: it skips string literals, label matchers (but reads a
// `__name__="..."` matcher), range and subquery brackets, numbers and durations, Grafana
// variables (`$job`, `${datasource}`, `$__rate_interval`), keywords, aggregation operators
// and the label lists after by/without/on/ignoring/group_left/group_right; an identifier
// followed by `(` is a function. Every other identifier is a metric name. Recording-rule
// names (`mtrain:job_mfu_ratio:avg1h`) are metric names too.
#ifndef MTRAIN_DASHBOARD_PROMQL_NAMES_H_
#define MTRAIN_DASHBOARD_PROMQL_NAMES_H_

#include <set>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace mtrain {

// INVALID_ARGUMENT (naming the position) for an unterminated string, an unbalanced
// bracket, or a character PromQL does not have.
absl::StatusOr<std::set<std::string>> MetricNamesIn(absl::string_view expression);

// The series names a Prometheus text exposition can hold: every `# TYPE` family, and for
// histograms and summaries their `_bucket`, `_sum` and `_count` series.
std::set<std::string> ExposedSeriesNames(absl::string_view exposition);

}  // namespace mtrain

#endif  // MTRAIN_DASHBOARD_PROMQL_NAMES_H_
