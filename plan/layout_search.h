// The planner's search: every layout (t, p, d, v, micro batch, recompute, and where the
// options allow selective recomputation and sequence parallelism) of a job spec on
// a cluster's devices, priced by the cost model (step_cost_model.h) and checked against the
// device memory by the memory model (rank_memory_estimate.h). Returns the layouts that run,
// fastest first, and every other candidate with the reason it was rejected (the spec
// validator's message when it does not divide, the estimate when it does not fit).
//
//   LayoutSearch search = SearchLayouts(spec, cluster, options);  // options.devices = 8
//   if (search.feasible.empty()) ... // search.rejected says why
//   const JobSpec& best = search.feasible.front().spec;
#ifndef MTRAIN_PLAN_LAYOUT_SEARCH_H_
#define MTRAIN_PLAN_LAYOUT_SEARCH_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "plan/rank_memory_estimate.h"
#include "plan/step_cost_model.h"
#include "proto/cluster.pb.h"
#include "proto/job_spec.pb.h"

namespace mtrain {

struct LayoutSearchOptions {
  // Devices to use (t p d = devices). 0 means every device of the cluster.
  int devices = 0;
  // Also try fewer devices, down to this many (0: exactly `devices`): a job may run
  // faster, or only fit the divisibility rules, on fewer. Above 64 device counts, only the
  // 32 largest and the powers of two are tried.
  int min_devices = 0;
  // Micro batch sizes tried (each must divide the global batch per replica).
  std::vector<int> micro_batch_sizes = {1, 2, 4, 8};
  // Whether layouts with full recompute are tried beside those without; the spec's own
  // train.recompute is tried either way.
  bool try_recompute = true;
  // Techniques only some engines have (this project's CPU engine has both; its CUDA
  // engine neither yet): selective recomputation as a further choice beside none and
  // full, and sequence parallelism (t > 1, seq_length % t == 0) for layouts that do not
  // fit without it.
  bool try_selective_recompute = false;
  bool try_sequence_parallel = false;
  // The zero-bubble schedules beside the others for every pipelined layout: ZB-H1 where
  // v = 1, ZB-V where v = 2 (this project's CPU engine runs both in fp32; its CUDA engine
  // neither yet). Priced at cost.backward_input_share / backward_weight_share.
  bool try_zero_bubble = false;
  // Largest interleaving tried (v <= this and v divides layers / p).
  int max_virtual_stages = 8;
  StepCostOptions cost;
  // How the implementation keeps activations (this project's engines by default).
  RankMemoryOptions memory;
  // Whether candidates must also pass this service's own limits (spec/job_spec_limits.h:
  // world size, scheduled microbatches, rank memory), i.e. be submittable here. Off for
  // describing other clusters, such as the paper's 3072 GPUs.
  bool enforce_service_limits = true;
};

struct PricedLayout {
  JobSpec spec;  // the input spec with this layout's parallel fields and train.recompute
  StepCost cost;
  RankMemoryEstimate memory;
};

struct RejectedLayout {
  JobSpec spec;
  std::string reason;  // "not valid: <the validator's message>", "does not fit: needs ..."
};

struct LayoutSearch {
  std::vector<PricedLayout> feasible;  // fastest first (ties: fewer pipeline stages first)
  std::vector<RejectedLayout> rejected;
};

// "t=8 p=4 d=32 v=5 b=1 recompute" for a spec's layout ("sp" after b=N under sequence
// parallelism, "selective" at the end under selective recomputation, "zb-h1" or "zb-v"
// after v=N under a zero-bubble schedule).
std::string LayoutName(const JobSpec& spec);

// "t=2 p=1 d=2 v=1 b=1: predicted 0.31 s a step, 1650 tokens/s, MFU 41.2%, 210 MiB a rank":
// how the coordinator's `planned` and `replanned` events state a choice.
std::string PredictionText(const PricedLayout& layout);

// The step time a PredictionText states ("predicted X s a step"), if `text` holds one.
std::optional<double> PredictedStepSeconds(absl::string_view text);

// `spec` must be resolved; its parallel fields other than global_batch_size, schedule
// preference and zero_stage are replaced by each candidate's.
LayoutSearch SearchLayouts(const JobSpec& spec, const ClusterDescription& cluster,
                           const LayoutSearchOptions& options = {});

}  // namespace mtrain

#endif  // MTRAIN_PLAN_LAYOUT_SEARCH_H_
