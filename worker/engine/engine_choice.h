// Which engine trains a rank: the CPU engine or the CUDA engine, from the spec's device
// and precision, the parallel layout and whether this machine has a usable GPU. Pure
// logic (the caller asks CUDA), so every rule is tested on machines without a GPU.
//
// Rules:
//   DEVICE_CPU   -> CPU; precision FP32, or BF16 where the processor multiplies bf16 in
//                   hardware (AVX512_BF16 or AMX; otherwise the CPU's reason); FP16 is
//                   CUDA-only.
//   DEVICE_CUDA  -> CUDA; FAILED_PRECONDITION without a GPU (with CUDA's reason),
//                   UNIMPLEMENTED for what the CUDA engine cannot run yet (below).
//   DEVICE_AUTO  -> CUDA when a GPU is usable and the CUDA engine runs the job; otherwise
//                   the CPU, with a note saying why (where the CPU can run its precision,
//                   as for DEVICE_CPU).
// The CUDA engine (worker/engine/cuda) runs any tensor, pipeline (interleaved or not) and
// data degree (collectives on NCCL or staged through the host's Gloo groups), with or
// without ZeRO-1, at head dimensions 32, 64 and 128, in FP32, BF16 or FP16 (with dynamic
// loss scaling).
#ifndef MTRAIN_WORKER_ENGINE_ENGINE_CHOICE_H_
#define MTRAIN_WORKER_ENGINE_ENGINE_CHOICE_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "proto/job_spec.pb.h"

namespace mtrain {

enum class EngineKind { kCpu, kCuda };

struct EngineChoice {
  EngineKind kind = EngineKind::kCpu;
  // One line for the rank's log: what was chosen and, for DEVICE_AUTO, why.
  std::string note;
};

// `gpu` is OK when this machine has a usable GPU, else CUDA's reason; `cpu_bf16` is OK when
// its processor multiplies bf16 in hardware, else the reason (cpu::CpuBf16Support).
// INVALID_ARGUMENT naming the field for a `device` or `precision` number that is no value
// of its enum.
absl::StatusOr<EngineChoice> ChooseEngine(const JobSpec& spec, const absl::Status& gpu,
                                          const absl::Status& cpu_bf16);

// The GPU a rank uses among the `device_count` it sees: ranks take them in turn (one
// worker per GPU gives each its own; more ranks than GPUs share them, as tests on one GPU
// do). `local_rank` is the rank's index on its machine (SLURM_LOCALID under srun) or -1
// when unknown: under srun every task of a node may see all of its GPUs and tasks may be
// placed on nodes cyclically, so the node-local index, not the global rank, picks.
inline int CudaDeviceForRank(int global_rank, int local_rank, int device_count) {
  const int turn = local_rank >= 0 ? local_rank : global_rank;
  return device_count > 0 ? turn % device_count : 0;
}

// OK if the CUDA engine can run `spec`; otherwise UNIMPLEMENTED naming the field and the
// limit.
absl::Status CudaEngineSupports(const JobSpec& spec);

}  // namespace mtrain

#endif  // MTRAIN_WORKER_ENGINE_ENGINE_CHOICE_H_
