// The series names the coordinator exports, taken from a real CoordinatorMetrics that has
// seen every kind of update (a job in every state, steps of ranks with and without the
// loss, a restart, a failed generation, a checkpoint, workers, a missed heartbeat, an RPC
// error). Tests check that dashboards and alert rules name only these.
#ifndef MTRAIN_DASHBOARD_EXPORTED_METRICS_H_
#define MTRAIN_DASHBOARD_EXPORTED_METRICS_H_

#include <set>
#include <string>

#include "absl/status/statusor.h"

namespace mtrain {

// Every series name of a scrape (histograms as _bucket, _sum and _count).
absl::StatusOr<std::set<std::string>> CoordinatorSeriesNames();

}  // namespace mtrain

#endif  // MTRAIN_DASHBOARD_EXPORTED_METRICS_H_
