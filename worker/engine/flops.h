// The peak FLOP/s that MFU divides by. MFU = model FLOPs of a step (model/model_flops.h,
// the one count the planner uses too) / step time / the peak of the devices used.
#ifndef MTRAIN_WORKER_ENGINE_FLOPS_H_
#define MTRAIN_WORKER_ENGINE_FLOPS_H_

namespace mtrain {

// Peak dense FLOP/s of one GPU: 989e12 (H100/H200 SXM dense bf16, data sheet), or the
// MTRAIN_PEAK_TFLOPS environment variable (TFLOP/s per device) when set.
double GpuPeakFlops();

// The peak of one CPU rank: the cores it owns (plan/cluster_description.h,
// CpuCoresPerRank: its threads, at most its share of the host among `ranks_on_host`) x
// FLOPs a cycle a core x the measured clock. MTRAIN_PEAK_TFLOPS, when set, is the peak of
// one whole machine and is shared the same way.
// With `bf16_gemms` (PRECISION_BF16 on the CPU engine) the cores' nominal bf16 peak
// (CpuPeak::Bf16FlopsPerCore) instead of fp32's.
double CpuRankPeakFlops(int threads, int ranks_on_host, bool bf16_gemms = false);

}  // namespace mtrain

#endif  // MTRAIN_WORKER_ENGINE_FLOPS_H_
