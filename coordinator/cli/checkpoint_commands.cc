#include "coordinator/cli/checkpoint_commands.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/checkpoint_tensors.h"
#include "checkpoint/hf_import.h"
#include "checkpoint/hf_interchange.h"
#include "checkpoint/safetensors.h"
#include "common/grpc_status.h"
#include "common/scratch_dir.h"
#include "common/status_macros.h"

namespace mtrain {

absl::StatusOr<CheckpointParameters> DownloadParameters(Coordinator::Stub* stub,
                                                        const PrepareContext& prepare,
                                                        const JobStatus& job,
                                                        std::optional<int64_t> step) {
  ListCheckpointsRequest request;
  request.set_job_id(job.job_id());
  ListCheckpointsResponse listed;
  {
    grpc::ClientContext context;
    prepare(&context);
    RETURN_IF_ERROR(FromGrpcStatus(stub->ListCheckpoints(&context, request, &listed)));
  }
  std::vector<int64_t> steps;
  for (const CheckpointInfo& info : listed.checkpoints()) steps.push_back(info.step());
  if (steps.empty()) {
    return absl::NotFoundError(absl::StrCat(job.job_id(), " has no checkpoint yet"));
  }
  const int64_t chosen = step.value_or(steps.back());
  if (std::find(steps.begin(), steps.end(), chosen) == steps.end()) {
    return absl::NotFoundError(absl::StrCat(job.job_id(), " has no checkpoint of step ", chosen,
                                            " (it has steps ", absl::StrJoin(steps, ", "), ")"));
  }
  ASSIGN_OR_RETURN(ScratchDir scratch, ScratchDir::Create("export"));
  RETURN_IF_ERROR(
      DownloadCheckpoint(stub, prepare, job.job_id(), chosen, scratch.path(), nullptr).status());
  ASSIGN_OR_RETURN(Checkpoint checkpoint, OpenCheckpoint(scratch.path()));
  CheckpointParameters out;
  out.step = chosen;
  ASSIGN_OR_RETURN(out.tensors, ReadFullParameters(checkpoint));
  return out;
}

absl::StatusOr<int64_t> ExportCheckpoint(Coordinator::Stub* stub, const PrepareContext& prepare,
                                         const JobStatus& job, std::optional<int64_t> step,
                                         const std::string& out_dir) {
  ASSIGN_OR_RETURN(const CheckpointParameters parameters,
                   DownloadParameters(stub, prepare, job, step));
  RETURN_IF_ERROR(ExportHuggingFace(parameters.tensors, job.spec(), out_dir));
  return parameters.step;
}

JobSpec EvaluationJobSpec(const JobStatus& job, int64_t step, const std::vector<EvalTask>& tasks,
                          const std::vector<GenerationPrompt>& prompts) {
  JobSpec spec = job.spec();
  spec.set_name(
      absl::StrCat(job.job_id(), tasks.empty() ? kGenerationJobInfix : kEvalJobInfix, step));
  ParallelSpec& parallel = *spec.mutable_parallel();
  // One replica evaluates; one microbatch a stage keeps every stage busy once.
  parallel.set_data(1);
  parallel.set_min_data(1);
  parallel.set_virtual_stages(1);
  parallel.set_schedule(SCHEDULE_1F1B);
  parallel.set_global_batch_size(parallel.micro_batch_size() * parallel.pipeline());
  parallel.set_zero_stage(0);
  parallel.set_auto_(false);
  parallel.set_replan(false);
  parallel.set_replan_on_join_gain(0);
  TrainSpec& train = *spec.mutable_train();
  train.set_steps(1);
  train.set_checkpoint_every(0);
  train.set_eval_interval(0);
  train.set_max_restarts(0);
  train.clear_eval_tasks();
  for (const EvalTask& task : tasks) *train.add_eval_tasks() = task;
  train.clear_generate();
  for (const GenerationPrompt& prompt : prompts) *train.add_generate() = prompt;
  train.set_evaluate_only(true);
  train.set_init_from(absl::StrCat("checkpoint of ", job.job_id(), " at step ", step));
  return spec;
}

absl::StatusOr<std::map<std::string, FullTensor>> ReadInitialWeights(const std::string& path,
                                                                     const JobSpec& spec) {
  absl::StatusOr<std::map<std::string, FullTensor>> weights = ImportHuggingFace(path, spec.model());
  if (!weights.ok()) {
    return absl::Status(weights.status().code(),
                        absl::StrCat("train.init_from: ", path, ": ", weights.status().message()));
  }
  return weights;
}

absl::Status UploadInitialWeights(Coordinator::Stub* stub, const PrepareContext& prepare,
                                  const std::string& job_id, const JobSpec& spec,
                                  const std::map<std::string, FullTensor>& weights) {
  ASSIGN_OR_RETURN(ScratchDir scratch, ScratchDir::Create("init"));
  ASSIGN_OR_RETURN(
      const CheckpointManifest manifest,
      WriteParameterCheckpoint(scratch.path(), job_id, 0, weights, spec.train().seed()));
  for (const FileChecksum& file : manifest.files()) {
    RETURN_IF_ERROR(UploadCheckpointFile(stub, prepare, job_id, /*generation=*/0, /*step=*/0,
                                         file.file(),
                                         absl::StrCat(scratch.path(), "/", file.file())));
  }
  return UploadCheckpointBytes(stub, prepare, job_id, 0, 0, kManifestFileName,
                               SerializeManifest(manifest));
}

}  // namespace mtrain
