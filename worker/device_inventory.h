// What a worker daemon offers the coordinator: its host, its device kind and count, and
// its memory, found from the --device choice and what the machine really has.
#ifndef MTRAIN_WORKER_DEVICE_INVENTORY_H_
#define MTRAIN_WORKER_DEVICE_INVENTORY_H_

#include <string>

#include "absl/status/statusor.h"
#include "proto/coordinator.pb.h"

namespace mtrain {

enum class DeviceChoice { kAuto, kCpu, kCuda };

// Parses --device: "auto", "cpu" or "cuda". INVALID_ARGUMENT otherwise.
absl::StatusOr<DeviceChoice> ParseDeviceChoice(const std::string& text);

// Fills host, device kind/count/name and memory. `auto` picks CUDA when a device passes
// the self-test and the CPU otherwise; `cuda` without a usable GPU is FAILED_PRECONDITION
// carrying CUDA's reason. `note` receives a one-line human description of the choice.
absl::StatusOr<WorkerInfo> DetectDevices(DeviceChoice choice, std::string* note);

// This machine's host name ("localhost" if it cannot be read).
std::string LocalHostName();

}  // namespace mtrain

#endif  // MTRAIN_WORKER_DEVICE_INVENTORY_H_
