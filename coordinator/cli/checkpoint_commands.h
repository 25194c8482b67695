// What trainctl does with checkpoints beyond listing them: export one as a HuggingFace
// GPT-2 directory, and turn a HuggingFace GPT-2 file into a job's initial weights (read
// and checked before the job is submitted, uploaded after).
//
//   ASSIGN_OR_RETURN(int64_t step, ExportCheckpoint(stub, prepare, job, 120, "out/"));
//   ASSIGN_OR_RETURN(auto weights, ReadInitialWeights("gpt2.safetensors", spec));
//   ... submit ...
//   RETURN_IF_ERROR(UploadInitialWeights(stub, prepare, job_id, spec, weights));
#ifndef MTRAIN_COORDINATOR_CLI_CHECKPOINT_COMMANDS_H_
#define MTRAIN_COORDINATOR_CLI_CHECKPOINT_COMMANDS_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "checkpoint/checkpoint_transfer.h"
#include "checkpoint/full_tensor.h"
#include "proto/coordinator.grpc.pb.h"

namespace mtrain {

// Downloads checkpoint `step` of `job` (the newest when absent) and writes it to
// `out_dir` as model.safetensors + config.json that transformers' GPT2LMHeadModel loads
// (docs/HUGGINGFACE.md). Returns the step exported. NOT_FOUND if the job has no such
// checkpoint (the message lists the steps it has); the coordinator's and the converter's
// errors otherwise.
absl::StatusOr<int64_t> ExportCheckpoint(Coordinator::Stub* stub, const PrepareContext& prepare,
                                         const JobStatus& job, std::optional<int64_t> step,
                                         const std::string& out_dir);

// The parameters of checkpoint `step` of `job` (the newest when absent), downloaded, with
// the step. NOT_FOUND "JOB has no checkpoint yet" or naming the steps it has.
struct CheckpointParameters {
  int64_t step = 0;
  std::map<std::string, FullTensor> tensors;
};
absl::StatusOr<CheckpointParameters> DownloadParameters(Coordinator::Stub* stub,
                                                        const PrepareContext& prepare,
                                                        const JobStatus& job,
                                                        std::optional<int64_t> step);

// `trainctl eval` and `trainctl generate`: the spec of a job that runs `tasks` and
// `prompts` once on the weights of `job`'s checkpoint `step` (uploaded as its initial
// weights): the job's model, tensor and pipeline layout (one replica, 1F1B, one
// microbatch a stage), train.evaluate_only, named "<job id>-eval-<step>" (with tasks) or
// "<job id>-generate-<step>" (prompts only).
inline constexpr char kEvalJobInfix[] = "-eval-";
inline constexpr char kGenerationJobInfix[] = "-generate-";
JobSpec EvaluationJobSpec(const JobStatus& job, int64_t step, const std::vector<EvalTask>& tasks,
                          const std::vector<GenerationPrompt>& prompts);

// Reads a HuggingFace GPT-2 safetensors file and checks it against `spec` (resolved):
// our tensors, ready to upload. Errors name the file, the tensor and the spec field.
absl::StatusOr<std::map<std::string, FullTensor>> ReadInitialWeights(const std::string& path,
                                                                     const JobSpec& spec);

// Uploads `weights` as the step-0, parameters-only checkpoint of `job_id` (generation 0),
// which lets the job, waiting in PENDING, start.
absl::Status UploadInitialWeights(Coordinator::Stub* stub, const PrepareContext& prepare,
                                  const std::string& job_id, const JobSpec& spec,
                                  const std::map<std::string, FullTensor>& weights);

}  // namespace mtrain

#endif  // MTRAIN_COORDINATOR_CLI_CHECKPOINT_COMMANDS_H_
