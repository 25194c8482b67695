// Measures what the planner's cost model needs to know about one GPU, in about a second:
// cuBLASLt GEMM rates (fp32 without TF32, and bf16 on the tensor cores at a large and a
// small cube, from which the small-matrix efficiency curve follows), device-to-device copy
// bandwidth, and the memory free for a rank. `train --measure_cuda_device=N` prints it as
// a DeviceProfile; a CUDA worker runs that at start and reports the profile at
// registration, as CPU workers report worker/device_probe.h's.
//
//   ASSIGN_OR_RETURN(CudaDeviceMeasurement m, MeasureCudaDevice(0, {}));
#ifndef MTRAIN_WORKER_ENGINE_CUDA_CUDA_DEVICE_PROBE_H_
#define MTRAIN_WORKER_ENGINE_CUDA_CUDA_DEVICE_PROBE_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace mtrain::cuda {

struct CudaProbeOptions {
  // Each measurement repeats until it has run this long and keeps its fastest repetition.
  double seconds_per_measurement = 0.1;
  int large = 4096;  // side of the large GEMM cubes
  int small = 256;   // side of the small bf16 cube
};

struct CudaDeviceMeasurement {
  std::string name;
  int64_t total_memory_bytes = 0;
  int64_t free_memory_bytes = 0;     // before the probe allocated anything
  double fp32_flops = 0;             // large cube, fp32 compute
  double bf16_flops = 0;             // large cube, bf16 tensor cores
  double bf16_small_flops = 0;       // small cube, bf16
  double copy_bytes_per_second = 0;  // device-to-device copy: bytes read + written a second
};

// FAILED_PRECONDITION when the device cannot be used; INTERNAL naming the CUDA or cuBLAS
// call that failed.
absl::StatusOr<CudaDeviceMeasurement> MeasureCudaDevice(int device,
                                                        const CudaProbeOptions& options);

}  // namespace mtrain::cuda

#endif  // MTRAIN_WORKER_ENGINE_CUDA_CUDA_DEVICE_PROBE_H_
