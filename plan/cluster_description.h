// Cluster descriptions (proto/cluster.proto) from protobuf JSON, checked field by field, and
// the description of the machine a CPU job runs on. `trainctl plan --cluster FILE` reads one;
// deploy/clusters/ holds examples with the sources of their numbers.
//
//   ASSIGN_OR_RETURN(ClusterDescription cluster, ParseClusterDescription(json_text));
#ifndef MTRAIN_PLAN_CLUSTER_DESCRIPTION_H_
#define MTRAIN_PLAN_CLUSTER_DESCRIPTION_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "proto/cluster.pb.h"

namespace mtrain {

// INVALID_ARGUMENT naming the field and the rule for JSON that does not parse, unknown
// fields, counts that are not positive, an efficiency outside (0, 1], a peak, bandwidth
// or memory that is not positive, or a negative latency or half size.
absl::StatusOr<ClusterDescription> ParseClusterDescription(absl::string_view json);

// The same checks on a description built in code.
absl::Status ValidateClusterDescription(const ClusterDescription& cluster);

// `devices` identical devices in one node (a CPU host's ranks, or `trainctl plan --workers
// N` without a file): `device` for each, `intra_node` between them.
ClusterDescription SingleNodeCluster(const DeviceProfile& device, const LinkProfile& intra_node,
                                     int devices);

// `cluster` with each device shared by `ranks` ranks (CPU ranks on one host, each with
// 1/ranks of its cores and memory bandwidth): devices_per_node times `ranks`, fp32_flops,
// half_flops and the memory bandwidth divided by it, the memory too.
ClusterDescription ShareDevices(const ClusterDescription& cluster, int ranks);

// A worker the planner may use, as the coordinator knows it.
struct PlannedWorker {
  std::string host;
  DeviceProfile profile;  // measured at the worker's start (worker/device_probe.h)
};

// The links between workers until they are probed: ranks on one host talk over loopback
// TCP (Gloo) or shared memory, hosts over a 10 Gb/s network. Stated assumptions, printed
// with every plan made from workers.
LinkProfile AssumedIntraHostLink();
LinkProfile AssumedInterHostLink();

// The cores one CPU rank owns, for MFU (the trainer's) and the planner alike: the threads
// it runs, but no more than an equal share of its host's cores among the ranks on that
// host (ranks time-sharing cores own only their share). One definition of the CPU's peak
// for a job follows: the sum over its ranks of this times FLOPs a cycle times the clock.
double CpuCoresPerRank(int host_cores, int threads, int ranks_on_host);

// The cluster the planner sees in `workers`: a node per host, devices_per_node the most
// workers any host has, and the slowest profile (lowest fp32_flops) for every device, so a
// plan never counts on the fastest worker. A measured CPU profile (cores > 0) is first cut
// to the rank's share of its host (CpuCoresPerRank, with the workers of that host): its
// fp32_flops, memory bandwidth and memory. FAILED_PRECONDITION when there are no workers
// or none has a measured profile.
absl::StatusOr<ClusterDescription> ClusterFromWorkers(const std::vector<PlannedWorker>& workers);

}  // namespace mtrain

#endif  // MTRAIN_PLAN_CLUSTER_DESCRIPTION_H_
