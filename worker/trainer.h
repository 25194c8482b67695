// Training of one rank of a job under any (tensor, pipeline, data) layout: the data of its
// replica, its model chunks, its pipeline schedule, the tied-embedding and data-parallel
// gradient reductions, gradient clipping over the whole model, AdamW (optionally ZeRO-1).
// `train` (static mode) and the worker daemon drive it step by step from an Assignment.
//
// One optimizer step on this rank:
//   1. the replica's microbatches (global batch indices, so every layout sees the same
//      samples and dropout masks: sequence j of step s is sample (s - 1) * global_batch + j
//      of the train split, data_source.h), run through the pipeline schedule;
//   2. the tied embedding's gradient all-reduced between the first and last stage;
//   3. data-parallel buckets all-reduced (started during the last backward);
//   4. loss summed over the data group; gradient norm over the model-parallel group,
//      counting each parameter once (tensor-replicated ones on tensor rank 0 only, the tied
//      embedding on the first stage only);
//   5. AdamW on the whole buffer, or on this rank's 1/d of it followed by an all-gather
//      of the parameters (ZeRO-1).
//
// The engine that runs these steps (training_engine.h: CPU or CUDA) is chosen once, by
// the caller, and the step is the same code for both.
//
//   ASSIGN_OR_RETURN(RankGroups groups, ConnectRankGroups(grid, rank, transport));
//   TrainerOptions options;
//   ASSIGN_OR_RETURN(options.engine, ChooseEngine(spec, QueryCudaDevices().status(),
//                                             cpu::CpuBf16Support(cpu::CpuFeaturesOfThisMachine())));
//   ASSIGN_OR_RETURN(auto trainer, Trainer::Create(assignment, std::move(groups), options));
//   while (trainer->completed_steps() < steps) ASSIGN_OR_RETURN(auto m, trainer->Step());
#ifndef MTRAIN_WORKER_TRAINER_H_
#define MTRAIN_WORKER_TRAINER_H_

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "checkpoint/full_tensor.h"
#include "data/bert_split_samples.h"
#include "data/data_source.h"
#include "data/sample_source.h"
#include "kernels/lr_schedule.h"
#include "proto/assignment.pb.h"
#include "proto/checkpoint.pb.h"
#include "proto/coordinator.pb.h"
#include "worker/engine/engine_choice.h"
#include "worker/engine/loss_scaler.h"
#include "worker/engine/memory_limits.h"
#include "worker/engine/rank_allocation_estimate.h"
#include "worker/engine/training_engine.h"
#include "worker/parallel/grad_buckets.h"
#include "worker/parallel/pipeline_executor.h"
#include "worker/parallel/rank_groups.h"

namespace mtrain {

struct TrainerOptions {
  // The engine that trains the rank, chosen once by the caller (ChooseEngine in
  // engine_choice.h, which also refuses a spec this machine cannot train); the default is
  // the CPU engine. For the CUDA engine, `cuda_device` is the GPU (CudaDeviceForRank).
  EngineChoice engine;
  int cuda_device = 0;
  // The CPU engine's data-parallel gradient buckets (grad_buckets.h).
  size_t bucket_elements = kDefaultBucketElements;
  // Threads of this rank's CPU kernels (0: every available core): with the ranks the
  // assignment places on this rank's host, the cores its MFU counts (CpuRankPeakFlops).
  int cpu_threads = 0;
  // What Create checks the rank's estimated memory against; unset: this machine's
  // (memory_limits.h).
  std::optional<MemoryLimits> memory_limits;
};

// Where a checkpoint's files go besides the local directory: the coordinator's store.
class CheckpointUploader {
 public:
  virtual ~CheckpointUploader() = default;
  // Each writing rank, once its shard file `file` is complete in `dir`.
  virtual absl::Status UploadShard(int64_t step, const std::string& dir,
                                   const std::string& file) = 0;
  // Global rank 0, once every writer's UploadShard has returned: commits the checkpoint
  // (in place of writing the MANIFEST locally).
  virtual absl::Status CommitManifest(int64_t step, const CheckpointManifest& manifest) = 0;
};

class Trainer {
 public:
  // `assignment.spec` must be resolved. Opens the data, builds the engine options.engine
  // names and initialises the rank's model chunks from train.seed. INVALID_ARGUMENT for an
  // assignment inconsistent with its spec or a dimension beyond the engine's int32 range;
  // RESOURCE_EXHAUSTED, before allocating, when the rank's estimated memory
  // (rank_allocation_estimate.h) exceeds options.memory_limits.
  static absl::StatusOr<std::unique_ptr<Trainer>> Create(const Assignment& assignment,
                                                         RankGroups groups,
                                                         const TrainerOptions& options);
  ~Trainer();

  // Runs the next optimizer step (collective: every rank of the job calls it). After steps
  // that train.eval_interval divides, and after the last, also the validation loss
  // (StepMetrics.validation_loss on ranks that compute the loss).
  absl::StatusOr<StepMetrics> Step();

  // Evaluation (collective): runs `sequences` (each 2 to seq_length + 1 token ids) forward
  // without dropout, global_batch_size at a time (the last batch padded), and returns
  // each sequence's per-token outputs (size - 1 losses and argmax flags) on the ranks that
  // compute the loss of data-parallel replica 0, nothing elsewhere (the other replicas
  // return at once: replica 0 alone runs the sequences). INVALID_ARGUMENT for a sequence
  // of another length or an id outside model.vocab_size.
  absl::StatusOr<std::vector<TokenOutputs>> ForwardSequences(
      const std::vector<std::vector<int32_t>>& sequences);

  // BERT's multiple-choice head over every question of `questions` (race_dataset.h, file
  // order), forward only (collective, as ForwardSequences: data-parallel replica 0 runs
  // them, the last batch padded with questions that count nothing). On the ranks that
  // compute the loss of replica 0: the questions, their summed cross-entropy and how many
  // were answered right; zeros elsewhere. FAILED_PRECONDITION without that head.
  struct ChoiceEvaluation {
    int64_t questions = 0;
    double loss_sum = 0;
    int64_t correct = 0;
  };
  absl::StatusOr<ChoiceEvaluation> EvaluateMultipleChoice(RaceSamples& questions);

  // Whether this rank holds the last virtual stage (and so reports the loss).
  bool computes_loss() const;
  long long completed_steps() const { return step_; }
  // The engine that trains this rank (its layout, and its state through host_state()).
  TrainingEngine& engine() { return *engine_; }
  const RankCoordinates& coordinates() const { return assignment_.rank(); }
  const PipelineTimings& last_pipeline_timings() const { return executor_->last_timings(); }

  // Collective over the world: global rank 0 receives every tensor in full under its
  // global name; other ranks get an empty map. INTERNAL if two copies of a replicated
  // tensor disagree (they must be bit-identical).
  absl::StatusOr<std::map<std::string, FullTensor>> GatherWeights();
  // GatherWeights, then rank 0 writes them as safetensors.
  absl::Status SaveWeights(const std::string& path);

  // Collective over the world: writes the checkpoint of the steps completed so far into
  // `root`/step-NNNNNNNN (docs/CHECKPOINT_FORMAT.md). Data-parallel rank 0 of every
  // (tensor, pipeline) position writes its shard file (parameters and AdamW moments,
  // gathered first under ZeRO-1); global rank 0 then writes the manifest, last. Returns
  // the checkpoint's directory. With an `uploader`, every shard file is uploaded (then
  // deleted locally) before rank 0 commits the manifest through it instead of writing it.
  absl::StatusOr<std::string> SaveCheckpoint(const std::string& root,
                                             CheckpointUploader* uploader = nullptr);
  // Loads a checkpoint written under any layout (re-sliced for this one): parameters,
  // AdamW moments and the step count, so the next Step() continues exactly where the
  // saved run was. INVALID_ARGUMENT if it was trained with another seed or holds a tensor
  // this model lacks (a deeper model, say: it is refused, not truncated). A
  // parameters-only checkpoint (initial weights, train.init_from) sets the parameters and
  // leaves the optimizer fresh (one without BERT's multiple-choice classifier, a pretrained
  // BERT's, leaves the classifier as initialised). `subset`: the directory holds only the files
  // this rank's tensors overlap (FilesOverlapping), as a resuming rank downloads them.
  absl::Status LoadCheckpoint(const std::string& dir, bool subset = false);
  // Initial weights written straight into this rank's parameters (train.init_from read
  // without a checkpoint in between): `fill` gets the host copy of the flat parameter
  // buffer (every tensor of engine().layout() at its offset), then the engine takes it;
  // the optimizer stays fresh and the step is 0.
  absl::Status LoadInitialParameters(const std::function<absl::Status(float* params)>& fill);
  // The checkpoint files this rank needs from a checkpoint with `manifest`.
  std::vector<std::string> CheckpointFilesNeeded(const CheckpointManifest& manifest) const;

  // Which engine trains this rank and why (engine_choice.h), for the rank's log.
  const std::string& engine_note() const { return engine_note_; }
  // What the samples are drawn from, for the rank's log: "data: " and each split's
  // SampleSource::Describe(), "; "-separated.
  std::string data_note() const;
  bool uses_cuda() const { return uses_cuda_; }
  // What Create estimated this rank holds in host memory (checked before allocating).
  const RankAllocationEstimate& memory_estimate() const { return memory_estimate_; }
  // Steps skipped so far because fp16 gradients overflowed (0 without fp16).
  long long skipped_steps() const { return scaler_ != nullptr ? scaler_->skipped_steps() : 0; }

  // Unblocks a step in progress (another thread; the job is being torn down).
  void Abort() { groups_.AbortAll(); }

 private:
  // Bytes this rank has sent on each kind of link (CountingCommunicator), so far.
  struct LinkBytes {
    int64_t tensor = 0, pipeline = 0, data = 0;
  };
  LinkBytes BytesSent() const;
  Trainer() = default;
  // This replica's microbatches of one global batch whose sample j is sample
  // first_sample + j of `source`; ids carry `step` (dropout masks) and `evaluation`.
  absl::StatusOr<std::vector<Microbatch>> LoadMicrobatches(SampleSource& source,
                                                           int64_t first_sample, long long step,
                                                           bool evaluation) const;
  // This replica's microbatches of one global batch of the train or validation split,
  // whatever the family (BERT's from bert_samples_, the decoders' from samples_).
  absl::StatusOr<std::vector<Microbatch>> LoadSplit(bool validation, int64_t first_sample,
                                                    long long step, bool evaluation);
  // BERT (trainer_bert.cc): the microbatches of BertSamples, and the loss's normalisation:
  // the step's loss is the masked-LM mean over the global batch's masked positions plus
  // the sentence-order mean over its sequences. Sets each microbatch's sentence-order seed
  // (loss_scale / global batch) and where its heads' totals add up (`totals`),
  // and returns the global batch's masked positions (collective over the data group).
  absl::StatusOr<std::vector<Microbatch>> LoadBertMicrobatches(BertSampleSource& samples,
                                                               int64_t first_sample, long long step,
                                                               bool evaluation) const;
  // The multiple-choice head: the loss is the mean over the global batch's questions (the
  // count returned; padding questions excluded).
  absl::StatusOr<double> PrepareBertLoss(std::vector<Microbatch>* microbatches, double loss_scale,
                                         BertHeadTotals* totals);
  bool is_bert() const { return shape_.family == ArchitectureFamily::kBert; }
  bool is_multiple_choice() const {
    return is_bert() && shape_.bert_head == BertHeadKind::kMultipleChoice;
  }
  // The validation loss: train.eval_iters global batches of the validation split, forward
  // only (collective). The mean per-token loss (BERT: the masked-LM mean plus the
  // sentence-order mean, each with its accuracy in `metrics`) on ranks that compute the
  // loss, 0 elsewhere.
  absl::StatusOr<double> Validate(StepMetrics* metrics);
  bool IsTiedCopyElsewhere(const ParamTensor& tensor) const;
  // Whether the global gradient norm counts this rank's copy of `tensor` (each parameter
  // is counted once over the model-parallel group).
  bool IsCountedInNorm(const ParamTensor& tensor) const;
  // The AdamW moments over the whole flat buffer (all-gathered under ZeRO-1), from the
  // engine's host state (synced by the caller).
  absl::Status FullMoments(std::vector<float>* m, std::vector<float>* v);

  Assignment assignment_;
  RankGroups groups_;  // before engine_ and executor_: they use the groups until destroyed
  ModelShape shape_;
  int micro_batch_ = 0;
  int microbatches_ = 0;           // per replica per step
  SplitSamples samples_;           // train and validation samples (data_source.h); decoders
  BertSplitSamples bert_samples_;  // BERT's (bert_split_samples.h)
  std::unique_ptr<TrainingEngine> engine_;
  std::unique_ptr<PipelineExecutor> executor_;  // drives engine_->stages()
  std::vector<ParamTensor> counted_in_norm_;    // engine_'s tensors that IsCountedInNorm
  cpu::LrSchedule lr_schedule_;
  std::unique_ptr<DynamicLossScaler> scaler_;  // fp16 only
  std::string engine_note_;
  bool uses_cuda_ = false;
  RankAllocationEstimate memory_estimate_;
  bool engine_reported_ = false;  // engine_note_ sent in a StepMetrics
  double flops_per_step_ = 0;
  double peak_flops_ = 0;  // of every device of the job
  long long step_ = 0;
};

}  // namespace mtrain

#endif  // MTRAIN_WORKER_TRAINER_H_
