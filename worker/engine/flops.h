// Model FLOPs and MFU, with the one formula the project uses everywhere (Megatron-LM,
// Narayanan et al. 2021, without recomputation):
//   FLOPs per iteration = 72 B s l h^2 (1 + s / (6 h) + V / (12 l h))
// B global batch (sequences), s sequence length, l layers, h hidden size, V vocabulary
// (padded, as computed). MFU = achieved model FLOP/s / peak FLOP/s of the devices used.
#ifndef MTRAIN_WORKER_ENGINE_FLOPS_H_
#define MTRAIN_WORKER_ENGINE_FLOPS_H_

#include <string>

#include "worker/engine/model_shape.h"

namespace mtrain {

double ModelFlopsPerIteration(const ModelShape& shape, long long global_batch);

// Peak dense FLOP/s of one device, by kind:
//   "cpu"          cores * 2.5 GHz * 32 FP32 FLOP/cycle (AVX2: 2 FMA units x 8 lanes x 2)
//   "h100"/"h200"  989e12 (dense BF16, datasheet, SXM)
// Overridden by the MTRAIN_PEAK_TFLOPS environment variable (TFLOP/s per device).
double PeakFlopsPerDevice(const std::string& device_kind);

}  // namespace mtrain

#endif  // MTRAIN_WORKER_ENGINE_FLOPS_H_
