// `trainctl checkpoints JOB`: one row per committed checkpoint, oldest first.
//
//   STEP   CREATED              LAYOUT(t,p,d)  FILES  TENSORS        SIZE  KIND
//   20     2026-11-23 16:40:02  2,2,2          4      148       1.2 MiB  full
#ifndef MTRAIN_COORDINATOR_CLI_CHECKPOINT_TABLE_H_
#define MTRAIN_COORDINATOR_CLI_CHECKPOINT_TABLE_H_

#include <cstdint>
#include <string>

#include "absl/time/time.h"
#include "proto/coordinator.pb.h"

namespace mtrain {

// A header line and one line per checkpoint, each ending in '\n'; "no checkpoints yet\n"
// when there are none. KIND is "full" (weights and optimizer state) or "weights" (the
// initial weights of train.init_from). Times in `zone`.
std::string FormatCheckpointTable(const ListCheckpointsResponse& checkpoints, absl::TimeZone zone);

// "512 B", "3.4 KiB", "1.2 MiB", "4.0 GiB".
std::string FormatBytes(uint64_t bytes);

}  // namespace mtrain

#endif  // MTRAIN_COORDINATOR_CLI_CHECKPOINT_TABLE_H_
