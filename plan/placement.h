// Placement policy: which kind of worker a job may run on, which workers get its ranks,
// and which smaller data-parallel degrees it may shrink to when a worker is lost. Pure
// functions of the spec and the free workers, so the policy is tested by tables
// (placement_test.cc); the coordinator's JobManager gathers the inputs under its lock and
// acts on the answer.
//
//   for (DeviceKind kind : EligibleDeviceKinds(spec)) ...
//   std::optional<std::vector<std::string>> ranks = PackRanks(spec, free_workers);
//   if (ranks.has_value()) /* (*ranks)[r] runs global rank r */;
#ifndef MTRAIN_PLAN_PLACEMENT_H_
#define MTRAIN_PLAN_PLACEMENT_H_

#include <optional>
#include <string>
#include <vector>

#include "proto/coordinator.pb.h"
#include "proto/job_spec.pb.h"

namespace mtrain {

// The kinds of worker the job may run on, in order of preference: one job, one engine, so
// never a mix. DEVICE_AUTO prefers CUDA, and needs it for bf16/fp16 (the CPU engine trains
// in fp32 only); a Llama-family job runs on CPU workers (no CUDA kernels for its layers yet).
std::vector<DeviceKind> EligibleDeviceKinds(const JobSpec& spec);

// The data-parallel degrees a job may shrink to, largest first: the multiples of min_data
// from data - 1 down to min_data, keeping the global batch
// (global_batch_size % (micro_batch_size * d) == 0) and, interleaved, microbatches %
// pipeline == 0.
std::vector<int> ShrunkDataDegrees(const JobSpec& spec);

// A worker free to take a rank.
struct FreeWorker {
  std::string worker_id;
  std::string host;
  DeviceKind kind = DEVICE_KIND_UNSPECIFIED;
};

// The workers for the job's ranks, by global rank, or nullopt when `free` cannot hold it.
// Kinds are tried in EligibleDeviceKinds order and the first with room wins. Tensor-parallel
// groups (t consecutive ranks, whose all-reduces are the heaviest traffic) each go to one
// host: hosts are taken in name order and each gives as many whole groups as it has
// workers for, its workers in the order of `free`.
std::optional<std::vector<std::string>> PackRanks(const JobSpec& spec,
                                                  const std::vector<FreeWorker>& free);

}  // namespace mtrain

#endif  // MTRAIN_PLAN_PLACEMENT_H_
