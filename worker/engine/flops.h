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
//   "cpu"          this machine's cores (every core this process may run on) x FLOPs a
//                  cycle a core x the measured clock (kernels/cpu_peak.h)
//   "h100"/"h200"  989e12 (dense BF16, datasheet, SXM)
// Overridden by the MTRAIN_PEAK_TFLOPS environment variable (TFLOP/s per device).
double PeakFlopsPerDevice(const std::string& device_kind);

// The peak of one CPU rank: the cores it owns (plan/cluster_description.h,
// CpuCoresPerRank: its threads, at most its share of the host among `ranks_on_host`) x
// FLOPs a cycle a core x the measured clock. MTRAIN_PEAK_TFLOPS, when set, is the peak of
// one whole machine and is shared the same way.
double CpuRankPeakFlops(int threads, int ranks_on_host);

}  // namespace mtrain

#endif  // MTRAIN_WORKER_ENGINE_FLOPS_H_
