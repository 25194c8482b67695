// A static world started by Slurm's `srun` alone (no coordinator, no `launch`): each task
// learns its rank, the world and its node-local index from the variables srun sets, as
// Megatron's and torchrun's users expect.
//
//   srun --ntasks=8 train --spec=job.json      # inside an sbatch allocation
//
// SLURM_PROCID is the rank, SLURM_NTASKS the world, SLURM_LOCALID the task's index on its
// node; SLURM_JOB_ID and SLURM_STEP_ID name the step (its rendezvous directory);
// SLURM_STEP_NODELIST (a Slurm host list, "node[01-04],gpu7") names the nodes, the first
// of which hosts rank 0.
#ifndef MTRAIN_WORKER_SLURM_TASK_H_
#define MTRAIN_WORKER_SLURM_TASK_H_

#include <functional>
#include <optional>
#include <string>

#include "absl/status/statusor.h"

namespace mtrain {

struct SlurmTask {
  int rank = 0;            // SLURM_PROCID
  int world_size = 1;      // SLURM_NTASKS
  int local_rank = 0;      // SLURM_LOCALID
  int nodes = 1;           // SLURM_STEP_NUM_NODES (or SLURM_NNODES)
  std::string job_id;      // SLURM_JOB_ID
  std::string step_id;     // SLURM_STEP_ID
  std::string first_host;  // the first host of SLURM_STEP_NODELIST (or SLURM_JOB_NODELIST)
  std::string submit_dir;  // SLURM_SUBMIT_DIR
};

// The task srun started this process as; nullopt when not started by srun (no
// SLURM_PROCID). INVALID_ARGUMENT naming the variable and the rule for a value that is not
// a number in range (0 <= SLURM_PROCID < SLURM_NTASKS, and so on). `getenv` is the
// environment (std::getenv in production).
absl::StatusOr<std::optional<SlurmTask>> SlurmTaskFromEnvironment(
    const std::function<const char*(const char*)>& getenv);

// The first host of a Slurm host list: "node[07-09,12],gpu1" -> "node07", "a,b" -> "a",
// "n[1-2]x" -> "n1x". INVALID_ARGUMENT for an empty or malformed list.
absl::StatusOr<std::string> FirstSlurmHost(const std::string& nodelist);

// The rendezvous directory of the step: SUBMIT_DIR/.mtrain-rendezvous/JOB.STEP, on the file
// system the submitting directory is on (shared by every node of a Slurm cluster).
std::string SlurmRendezvousDir(const SlurmTask& task);

}  // namespace mtrain

#endif  // MTRAIN_WORKER_SLURM_TASK_H_
