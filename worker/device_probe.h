// Measures what the planner's cost model needs to know about this worker's CPU, in well
// under a second at start: the matrix-multiply rate at a large and a small shape (from
// which the small-matrix efficiency curve follows) and the memory bandwidth; the usable
// memory is the inventory's (device_inventory.h), which the worker copies in. It reports it at
// registration (WorkerInfo.profile) and `trainctl workers
// --wide` shows it. A measured profile states the measured large-GEMM rate as fp32_flops
// with matmul_efficiency 1: it is what the kernels reach, not the chip's data-sheet peak.
// CUDA devices are measured by the rank binary (`train --measure_cuda_device=N`,
// worker/engine/cuda/cuda_device_probe.h), so that the daemon itself never loads the CUDA
// runtime: MeasureCudaWithRankBinary runs it and reads the profile it prints.
//
//   ASSIGN_OR_RETURN(DeviceProfile profile, ProbeCpu({.threads = 2}));
#ifndef MTRAIN_WORKER_DEVICE_PROBE_H_
#define MTRAIN_WORKER_DEVICE_PROBE_H_

#include <string>

#include "absl/status/statusor.h"
#include "proto/cluster.pb.h"

namespace mtrain {

struct CpuProbeOptions {
  int threads = 0;  // the threads one rank uses (0: every available core)
  // Each measurement repeats until it has run this long, and keeps its fastest repetition.
  double seconds_per_measurement = 0.1;
};

// Solves rate(small) / rate(large) = (f(small) / f(large))^3 with f(x) = x / (x + h) for
// the half size h (cubes of side `small` and `large`); 0 when the small cube is not slower.
double MatmulHalfSize(double small, double small_rate, double large, double large_rate);

DeviceProfile ProbeCpu(const CpuProbeOptions& options);

// Runs `train_binary --measure_cuda_device=<device>` and parses the DeviceProfile JSON line
// it prints last. FAILED_PRECONDITION carrying the binary's own message when it exits
// non-zero (no such GPU, CUDA unusable); INTERNAL when it cannot be started or prints no
// profile with positive rates.
absl::StatusOr<DeviceProfile> MeasureCudaWithRankBinary(const std::string& train_binary,
                                                        int device);

}  // namespace mtrain

#endif  // MTRAIN_WORKER_DEVICE_PROBE_H_
