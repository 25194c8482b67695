#include "worker/engine/flops.h"

#include <unistd.h>

#include <cstdlib>

namespace mtrain {

double ModelFlopsPerIteration(const ModelShape& shape, long long global_batch) {
  const double B = static_cast<double>(global_batch);
  const double s = shape.seq_length;
  const double l = shape.num_layers;
  const double h = shape.hidden;
  const double V = shape.padded_vocab;
  return 72.0 * B * s * l * h * h * (1.0 + s / (6.0 * h) + V / (12.0 * l * h));
}

double PeakFlopsPerDevice(const std::string& device_kind) {
  if (const char* env = std::getenv("MTRAIN_PEAK_TFLOPS")) {
    const double tflops = std::atof(env);
    if (tflops > 0) return tflops * 1e12;
  }
  if (device_kind == "h100" || device_kind == "h200" || device_kind == "cuda") return 989e12;
  const long cores = sysconf(_SC_NPROCESSORS_ONLN);
  return static_cast<double>(cores > 0 ? cores : 1) * 2.5e9 * 32.0;
}

}  // namespace mtrain
