// Measures what the planner's cost model needs to know about this worker's CPU, in well
// under a second at start: the peak (kernels/cpu_peak.h: FLOPs a cycle from the ISA and the
// measured FMA units, times the measured clock, times the cores a rank uses), the
// matrix-multiply rate at a large and a small shape (the large one over the peak is the
// matmul efficiency; the small-matrix curve follows from both) and the memory bandwidth;
// the usable memory is the inventory's (device_inventory.h), which the worker copies in.
// It names the processor, its ISA and the GEMM library's kernel (cpu_gemm_library.h). It
// reports it at registration (WorkerInfo.profile) and `trainctl workers --wide` shows it.
// CUDA devices are measured by the rank binary (`train --measure_cuda_device=N`,
// worker/engine/cuda/cuda_device_probe.h), so that the daemon itself never loads the CUDA
// runtime: MeasureCudaWithRankBinary runs it and reads the profile it prints; a CUDA
// profile states the measured large-GEMM rates as the peaks, with matmul_efficiency 1.
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
  // Workers started together on one host (the demo's four, a Slurm allocation's) would
  // measure at the same moment and each see a fraction of the cores: probes on one host
  // take turns through an exclusive lock on this file (flock), waiting at most
  // `lock_wait_seconds` (then measuring anyway). Empty: no lock.
  std::string lock_file = DefaultProbeLockFile();
  double lock_wait_seconds = 30;

  // $TMPDIR/mtrain-cpu-probe.lock (/tmp when TMPDIR is unset).
  static std::string DefaultProbeLockFile();
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
