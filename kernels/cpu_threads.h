// How many threads the CPU kernels use: OpenMP's (the kernels, and the GEMMs' row slices,
// matmul.cc) and OpenBLAS's (a GEMM called outside a parallel region). Every kernel gives
// the same bits on every run with the same count; the element-wise kernels and the
// attention core give the same bits for any count, the GEMMs may differ in the last bits
// between counts (matmul_test).
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
