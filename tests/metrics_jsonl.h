// Reads the metrics JSON lines `train` writes (flat objects of numbers, one per step per
// rank) for integration tests.
#ifndef MTRAIN_TESTS_METRICS_JSONL_H_
#define MTRAIN_TESTS_METRICS_JSONL_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace mtrain {

using MetricsLine = std::map<std::string, double>;

// Every line of `path`, in file order. INVALID_ARGUMENT names a line that is not a flat
// JSON object of numbers; NOT_FOUND if the file is missing.
absl::StatusOr<std::vector<MetricsLine>> ReadMetricsJsonl(const std::string& path);

// The loss of each step (index step - 1) as reported by `rank`. INVALID_ARGUMENT if a step
// is missing or repeated.
absl::StatusOr<std::vector<double>> LossesOfRank(const std::vector<MetricsLine>& lines, int rank);

}  // namespace mtrain

#endif  // MTRAIN_TESTS_METRICS_JSONL_H_
