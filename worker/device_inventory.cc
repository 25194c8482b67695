#include "worker/device_inventory.h"

#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "kernels/cuda_device_query.h"

namespace mtrain {

absl::StatusOr<DeviceChoice> ParseDeviceChoice(const std::string& text) {
  if (text == "auto") return DeviceChoice::kAuto;
  if (text == "cpu") return DeviceChoice::kCpu;
  if (text == "cuda") return DeviceChoice::kCuda;
  return absl::InvalidArgumentError(
      absl::StrCat("--device: '", text, "' is not one of auto, cpu, cuda"));
}

std::string LocalHostName() {
  char name[256] = {0};
  if (gethostname(name, sizeof(name) - 1) != 0 || name[0] == '\0') return "localhost";
  return name;
}

namespace {

int64_t HostMemoryBytes() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page_size = sysconf(_SC_PAGESIZE);
  return pages > 0 && page_size > 0 ? static_cast<int64_t>(pages) * page_size : 0;
}

void DescribeCpu(WorkerInfo* info) {
  info->set_device_kind(DEVICE_KIND_CPU);
  info->set_device_count(0);
  info->set_device_name(absl::StrCat("cpu (", sysconf(_SC_NPROCESSORS_ONLN), " cores)"));
  info->set_memory_bytes(HostMemoryBytes());
}

}  // namespace

absl::StatusOr<WorkerInfo> DetectDevices(DeviceChoice choice, std::string* note) {
  WorkerInfo info;
  info.set_host(LocalHostName());
  if (choice == DeviceChoice::kCpu) {
    DescribeCpu(&info);
    *note = "device: cpu (--device=cpu)";
    return info;
  }
  absl::StatusOr<std::vector<CudaDeviceInfo>> devices = QueryCudaDevices();
  absl::Status usable = devices.status();
  if (usable.ok()) usable = RunCudaSelfTest(devices->front().index);
  if (!usable.ok()) {
    if (choice == DeviceChoice::kCuda) {
      return absl::FailedPreconditionError(
          absl::StrCat("--device=cuda but CUDA is not usable: ", usable.message()));
    }
    DescribeCpu(&info);
    *note = absl::StrCat("device: cpu (--device=auto; ", usable.message(), ")");
    return info;
  }
  const CudaDeviceInfo& first = devices->front();
  info.set_device_kind(DEVICE_KIND_CUDA);
  info.set_device_count(static_cast<int>(devices->size()));
  info.set_device_name(first.name);
  info.set_memory_bytes(first.total_memory_bytes);
  *note = absl::StrCat("device: cuda, ", devices->size(), " x ", first.name, " (sm_",
                       first.compute_capability_major, first.compute_capability_minor, ")");
  return info;
}

}  // namespace mtrain
