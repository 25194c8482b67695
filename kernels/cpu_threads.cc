#include "kernels/cpu_threads.h"

#include <cblas.h>
#include <omp.h>
#include <sched.h>

namespace mtrain::cpu {

void SetCpuThreads(int threads) {
  if (threads <= 0) return;
  openblas_set_num_threads(threads);
  omp_set_num_threads(threads);
}

int AvailableCores() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return 1;
  const int count = CPU_COUNT(&set);
  return count > 0 ? count : 1;
}

}  // namespace mtrain::cpu
