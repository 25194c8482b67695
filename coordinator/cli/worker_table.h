// Formats `trainctl workers` output: a fixed-width table a person can scan.
#ifndef MTRAIN_COORDINATOR_CLI_WORKER_TABLE_H_
#define MTRAIN_COORDINATOR_CLI_WORKER_TABLE_H_

#include <string>

#include "proto/coordinator.pb.h"

namespace mtrain {

// One header line, then one line per worker, each ending in '\n'. `wide` adds each
// worker's measured device profile: GEMM GFLOP/s, the small-matrix half size, memory GB/s
// ("-" for workers that did not measure).
std::string FormatWorkerTable(const ListWorkersResponse& workers, bool wide = false);

// "1.5 GiB", "512 MiB", ...
std::string FormatBytes(int64_t bytes);

}  // namespace mtrain

#endif  // MTRAIN_COORDINATOR_CLI_WORKER_TABLE_H_
