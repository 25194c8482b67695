#include "plan/megatron_weak_scaling.h"

#include <algorithm>

#include "spec/job_spec_defaults.h"

namespace mtrain {

const std::vector<MegatronRow>& MegatronWeakScalingRows() {
  static const auto* rows = new std::vector<MegatronRow>{
      {"1.7B", 24, 2304, 24, 1, 1, 32, 512, 137},
      {"3.6B", 32, 3072, 30, 2, 1, 64, 512, 138},
      {"7.5B", 32, 4096, 36, 4, 1, 128, 512, 142},
      {"18.4B", 48, 6144, 40, 8, 1, 256, 1024, 135},
      {"39.1B", 64, 8192, 48, 8, 2, 512, 1536, 138},
      {"76.1B", 80, 10240, 60, 8, 4, 1024, 1792, 140},
      {"145.6B", 96, 12288, 80, 8, 8, 1536, 2304, 148},
      {"310.1B", 128, 16384, 96, 8, 16, 1920, 2160, 155},
      {"529.6B", 128, 20480, 105, 8, 35, 2520, 2520, 163},
      {"1008B", 160, 25600, 128, 8, 64, 3072, 3072, 163},
  };
  return *rows;
}

StepCostOptions MegatronLm2021Options() {
  StepCostOptions options;
  options.attention = AttentionKernel::kUnfused;
  options.gradient_bytes = 2;
  options.data_parallel_overlap = 0;
  options.scatter_gather = true;
  options.dropout = true;
  // Megatron-LM's 2021 local DDP added each microbatch's fp16 weight gradients into its
  // contiguous reduction buffer in a backward hook (main_grad.add_(grad)): read both,
  // write one. The fused weight-gradient accumulation came later.
  options.gradient_accumulation_bytes = 6;
  return options;
}

JobSpec MegatronRowSpec(const MegatronRow& row, int virtual_stages) {
  JobSpec spec;
  spec.set_name("megatron-" + row.parameters);
  ModelSpec* model = spec.mutable_model();
  model->set_num_layers(row.layers);
  model->set_num_heads(row.heads);
  model->set_hidden_size(row.hidden);
  model->set_seq_length(2048);
  model->set_vocab_size(51200);
  ParallelSpec* par = spec.mutable_parallel();
  par->set_tensor(row.tensor);
  par->set_pipeline(row.pipeline);
  par->set_data(row.gpus / (row.tensor * row.pipeline));
  par->set_virtual_stages(virtual_stages);
  par->set_micro_batch_size(1);
  par->set_global_batch_size(row.batch);
  par->set_schedule(virtual_stages > 1 ? SCHEDULE_INTERLEAVED_1F1B : SCHEDULE_1F1B);
  spec.set_precision(PRECISION_FP16);
  spec.set_device(DEVICE_CUDA);
  spec.mutable_train()->set_recompute(true);
  spec.mutable_train()->set_dropout(0.1f);
  ApplyJobSpecDefaults(&spec);
  return spec;
}

MegatronPrediction PredictMegatronRow(const MegatronRow& row, const ClusterDescription& cluster,
                                      int max_virtual_stages) {
  const StepCostOptions options = MegatronLm2021Options();
  MegatronPrediction prediction;
  const int stage_layers = row.layers / row.pipeline;
  const int microbatches = row.batch / (row.gpus / (row.tensor * row.pipeline));
  bool first = true;
  const int v_limit =
      max_virtual_stages > 0 ? std::min(max_virtual_stages, stage_layers) : stage_layers;
  for (int v = 1; v <= v_limit; ++v) {
    if (stage_layers % v != 0 || (v > 1 && (row.pipeline == 1 || microbatches % row.pipeline))) {
      continue;
    }
    JobSpec spec = MegatronRowSpec(row, v);
    const StepCost cost = PredictStepCost(spec, cluster, options);
    if (first || cost.step_seconds < prediction.cost.step_seconds) {
      prediction.spec = std::move(spec);
      prediction.cost = cost;
      first = false;
    }
  }
  prediction.memory = EstimateRankMemory(prediction.spec, {ActivationModel::kMegatronLm});
  prediction.error =
      prediction.cost.hardware_flops_per_device / (row.published_tflops_per_gpu * 1e12) - 1;

  LayoutSearchOptions search_options;
  search_options.devices = row.gpus;
  search_options.cost = options;
  search_options.memory.activations = ActivationModel::kMegatronLm;
  search_options.micro_batch_sizes = {1, 2, 4};
  search_options.enforce_service_limits = false;
  LayoutSearch search = SearchLayouts(MegatronRowSpec(row, 1), cluster, search_options);
  if (!search.feasible.empty()) {
    prediction.has_choice = true;
    prediction.choice = std::move(search.feasible.front());
  }
  search_options.try_zero_bubble = true;
  search_options.cost.backward_input_share = search_options.cost.backward_weight_share = 0.5;
  LayoutSearch zero_bubble = SearchLayouts(MegatronRowSpec(row, 1), cluster, search_options);
  if (!zero_bubble.feasible.empty()) {
    prediction.has_zero_bubble_choice = true;
    prediction.zero_bubble_choice = std::move(zero_bubble.feasible.front());
  }
  return prediction;
}

}  // namespace mtrain
