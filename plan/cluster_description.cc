#include "plan/cluster_description.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "google/protobuf/util/json_util.h"

namespace mtrain {
namespace {

absl::Status Invalid(absl::string_view field, absl::string_view rule, double value) {
  return absl::InvalidArgumentError(
      absl::StrCat("cluster description: ", field, " must be ", rule, " (got ", value, ")"));
}

absl::Status CheckPositive(absl::string_view field, double value) {
  if (!std::isfinite(value) || value <= 0) return Invalid(field, "a positive number", value);
  return absl::OkStatus();
}

absl::Status CheckNonNegative(absl::string_view field, double value) {
  if (!std::isfinite(value) || value < 0) return Invalid(field, "finite and >= 0", value);
  return absl::OkStatus();
}

absl::Status CheckLink(absl::string_view name, const LinkProfile& link) {
  if (absl::Status s = CheckPositive(absl::StrCat(name, ".bandwidth_bytes_per_second"),
                                     link.bandwidth_bytes_per_second());
      !s.ok()) {
    return s;
  }
  return CheckNonNegative(absl::StrCat(name, ".latency_seconds"), link.latency_seconds());
}

}  // namespace

absl::Status ValidateClusterDescription(const ClusterDescription& cluster) {
  if (cluster.nodes() <= 0) return Invalid("nodes", "> 0", cluster.nodes());
  if (cluster.devices_per_node() <= 0) {
    return Invalid("devices_per_node", "> 0", cluster.devices_per_node());
  }
  const DeviceProfile& device = cluster.device();
  for (const auto& [field, value] :
       {std::pair<absl::string_view, double>{"device.fp32_flops", device.fp32_flops()},
        {"device.memory_bandwidth_bytes_per_second", device.memory_bandwidth_bytes_per_second()},
        {"device.memory_bytes", static_cast<double>(device.memory_bytes())}}) {
    if (absl::Status s = CheckPositive(field, value); !s.ok()) return s;
  }
  if (absl::Status s = CheckNonNegative("device.half_flops", device.half_flops()); !s.ok()) {
    return s;
  }
  if (!(device.matmul_efficiency() > 0 && device.matmul_efficiency() <= 1)) {
    return Invalid("device.matmul_efficiency", "in (0, 1]", device.matmul_efficiency());
  }
  if (absl::Status s = CheckNonNegative("device.matmul_half_size", device.matmul_half_size());
      !s.ok()) {
    return s;
  }
  if (absl::Status s = CheckLink("intra_node", cluster.intra_node()); !s.ok()) return s;
  if (cluster.nodes() > 1) return CheckLink("inter_node", cluster.inter_node());
  return absl::OkStatus();
}

absl::StatusOr<ClusterDescription> ParseClusterDescription(absl::string_view json) {
  ClusterDescription cluster;
  const auto parsed = google::protobuf::util::JsonStringToMessage(
      std::string(json), &cluster, google::protobuf::util::JsonParseOptions());
  if (!parsed.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("cluster description: not valid JSON for ClusterDescription "
                     "(proto/cluster.proto): ",
                     parsed.ToString()));
  }
  if (absl::Status s = ValidateClusterDescription(cluster); !s.ok()) return s;
  return cluster;
}

ClusterDescription SingleNodeCluster(const DeviceProfile& device, const LinkProfile& intra_node,
                                     int devices) {
  ClusterDescription cluster;
  cluster.set_name(absl::StrCat(devices, " x ", device.name()));
  cluster.set_nodes(1);
  cluster.set_devices_per_node(devices);
  *cluster.mutable_device() = device;
  *cluster.mutable_intra_node() = intra_node;
  return cluster;
}

ClusterDescription ShareDevices(const ClusterDescription& cluster, int ranks) {
  ClusterDescription shared = cluster;
  if (ranks <= 1) return shared;
  shared.set_devices_per_node(cluster.devices_per_node() * ranks);
  DeviceProfile* device = shared.mutable_device();
  device->set_fp32_flops(device->fp32_flops() / ranks);
  device->set_half_flops(device->half_flops() / ranks);
  device->set_memory_bandwidth_bytes_per_second(device->memory_bandwidth_bytes_per_second() /
                                                ranks);
  device->set_memory_bytes(device->memory_bytes() / ranks);
  return shared;
}

LinkProfile AssumedIntraHostLink() {
  LinkProfile link;
  link.set_bandwidth_bytes_per_second(2e9);
  link.set_latency_seconds(50e-6);
  return link;
}

LinkProfile AssumedInterHostLink() {
  LinkProfile link;
  link.set_bandwidth_bytes_per_second(1.1e9);
  link.set_latency_seconds(100e-6);
  return link;
}

double CpuCoresPerRank(int host_cores, int threads, int ranks_on_host) {
  const double cores = std::max(1, host_cores);
  const double used = threads > 0 ? std::min<double>(threads, cores) : cores;
  return std::min(used, cores / std::max(1, ranks_on_host));
}

absl::StatusOr<ClusterDescription> ClusterFromWorkers(const std::vector<PlannedWorker>& workers) {
  std::map<std::string, int> per_host;
  for (const PlannedWorker& worker : workers) ++per_host[worker.host];
  std::optional<DeviceProfile> slowest;
  for (const PlannedWorker& worker : workers) {
    if (worker.profile.fp32_flops() <= 0) continue;
    DeviceProfile profile = worker.profile;
    if (profile.cores() > 0) {
      // The profile covers min(threads, cores) cores; the rank owns CpuCoresPerRank.
      const int threads = profile.threads() > 0 ? profile.threads() : profile.cores();
      const double measured_cores = std::min(threads, profile.cores());
      const int ranks = per_host[worker.host];
      const double share = CpuCoresPerRank(profile.cores(), threads, ranks) / measured_cores;
      profile.set_fp32_flops(profile.fp32_flops() * share);
      profile.set_half_flops(profile.half_flops() * share);
      profile.set_memory_bandwidth_bytes_per_second(profile.memory_bandwidth_bytes_per_second() /
                                                    ranks);
      profile.set_memory_bytes(profile.memory_bytes() / ranks);
    }
    if (!slowest.has_value() || profile.fp32_flops() < slowest->fp32_flops()) {
      slowest = std::move(profile);
    }
  }
  if (workers.empty()) return absl::FailedPreconditionError("no live workers to plan for");
  if (!slowest.has_value()) {
    return absl::FailedPreconditionError(
        "no live worker reported a measured device profile (workers measure their CPU at "
        "start unless --probe_device=false; CUDA workers do not measure yet): give the "
        "cluster with --cluster FILE");
  }
  int most = 0;
  for (const auto& [host, count] : per_host) most = std::max(most, count);
  ClusterDescription cluster;
  cluster.set_name(absl::StrCat(workers.size(), " live workers on ", per_host.size(), " host(s)"));
  cluster.set_nodes(static_cast<int>(per_host.size()));
  cluster.set_devices_per_node(most);
  *cluster.mutable_device() = *slowest;
  *cluster.mutable_intra_node() = AssumedIntraHostLink();
  *cluster.mutable_inter_node() = AssumedInterHostLink();
  cluster.set_source(
      "device: the slowest worker's own measurement at start; links assumed (loopback "
      "2 GB/s, 50 us within a host; 1.1 GB/s, 100 us between hosts), not probed");
  return cluster;
}

}  // namespace mtrain
