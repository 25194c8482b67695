// The peak FLOP/s that MFU divides by. MFU = model FLOPs of a step (model/model_flops.h,
// the one count the planner uses too) / step time / the peak of the devices used.
#ifndef MTRAIN_WORKER_ENGINE_FLOPS_H_
#define MTRAIN_WORKER_ENGINE_FLOPS_H_

#include <string>

namespace mtrain {

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
