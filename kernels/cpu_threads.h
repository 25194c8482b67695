// How many threads the CPU kernels use: OpenBLAS's pool (GEMMs) and OpenMP's (the other
// kernels). Results never depend on it (every kernel is deterministic for any count).
#ifndef MTRAIN_KERNELS_CPU_THREADS_H_
#define MTRAIN_KERNELS_CPU_THREADS_H_

namespace mtrain::cpu {

// Sets both pools to `threads` (> 0). Call before training starts. Setting the
// OMP_NUM_THREADS environment variable from inside the process is too late: libgomp reads
// it when it is loaded, before main().
void SetCpuThreads(int threads);

// The number of cores this process may run on.
int AvailableCores();

}  // namespace mtrain::cpu

#endif  // MTRAIN_KERNELS_CPU_THREADS_H_
