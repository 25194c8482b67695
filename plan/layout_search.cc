#include "plan/layout_search.h"

#include <algorithm>
#include <optional>
#include <tuple>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "spec/job_spec_arithmetic.h"
#include "spec/job_spec_validation.h"

namespace mtrain {
namespace {

std::vector<int> Divisors(int value, int limit) {
  std::vector<int> divisors;
  for (int candidate = 1; candidate <= std::min(value, limit); ++candidate) {
    if (value % candidate == 0) divisors.push_back(candidate);
  }
  return divisors;
}

// How a candidate recomputes activations.
enum class Recompute {
  kSpecs,      // the spec's own choice (none, selective, or its full method)
  kFull,       // every layer's forward again
  kSelective,  // the attention core again
};

JobSpec WithLayout(const JobSpec& spec, int t, int p, int d, int v, int b, Recompute recompute) {
  JobSpec candidate = spec;
  ParallelSpec* par = candidate.mutable_parallel();
  par->set_tensor(t);
  par->set_pipeline(p);
  par->set_data(d);
  par->set_virtual_stages(v);
  par->set_micro_batch_size(b);
  par->set_min_data(d);
  par->set_schedule(
      v > 1 ? SCHEDULE_INTERLEAVED_1F1B
            : (spec.parallel().schedule() == SCHEDULE_GPIPE ? SCHEDULE_GPIPE : SCHEDULE_1F1B));
  // Sequence parallelism needs a tensor group; the spec's choice stands where there is one.
  if (t == 1) par->clear_sequence_parallel();
  if (recompute != Recompute::kSpecs) {
    TrainSpec& train = *candidate.mutable_train();
    train.clear_recompute_granularity();
    train.clear_recompute_method();
    train.clear_recompute_num_layers();
    train.set_recompute(recompute == Recompute::kFull);
    if (recompute == Recompute::kSelective) train.set_recompute_granularity("selective");
  }
  return candidate;
}

// What makes a layout impossible for the model whatever the service's limits: the rules of
// spec/job_spec_validation.cc that involve the layout fields.
std::string LayoutProblem(const JobSpec& spec) {
  const ParallelSpec& par = spec.parallel();
  const int layers = spec.model().num_layers();
  const int64_t replicas_batch = int64_t{par.micro_batch_size()} * par.data();
  if (layers % (par.pipeline() * par.virtual_stages()) != 0) {
    return absl::StrCat("model.num_layers ", layers,
                        " is not divisible by pipeline * virtual_stages ",
                        par.pipeline() * par.virtual_stages());
  }
  if (par.global_batch_size() % replicas_batch != 0) {
    return absl::StrCat("parallel.global_batch_size ", par.global_batch_size(),
                        " is not divisible by micro_batch_size * data ", replicas_batch);
  }
  if (par.sequence_parallel() && spec.model().seq_length() % par.tensor() != 0) {
    return absl::StrCat("sequence parallelism needs model.seq_length ", spec.model().seq_length(),
                        " divisible by tensor ", par.tensor());
  }
  const int64_t microbatches = par.global_batch_size() / replicas_batch;
  if (par.schedule() == SCHEDULE_INTERLEAVED_1F1B && microbatches % par.pipeline() != 0) {
    return absl::StrCat("the interleaved schedule needs microbatches (", microbatches,
                        ") divisible by pipeline ", par.pipeline());
  }
  return "";
}

}  // namespace

// Adds the candidates of exactly `devices` devices to `out` (unsorted).
static void SearchDeviceCount(const JobSpec& spec, const ClusterDescription& cluster,
                              const LayoutSearchOptions& options, int devices, LayoutSearch* out);

std::string PredictionText(const PricedLayout& layout) {
  return absl::StrCat(
      LayoutName(layout.spec), ": predicted ",
      absl::StrFormat("%.4g s a step, %.4g tokens/s, MFU %.1f%%", layout.cost.step_seconds,
                      layout.cost.tokens_per_second, 100 * layout.cost.mfu),
      ", ", FormatMemoryBytes(layout.memory.total_bytes), " a rank");
}

std::optional<double> PredictedStepSeconds(absl::string_view text) {
  constexpr absl::string_view kPrefix = "predicted ";
  const size_t at = text.rfind(kPrefix);
  if (at == absl::string_view::npos) return std::nullopt;
  absl::string_view rest = text.substr(at + kPrefix.size());
  const size_t end = rest.find(" s a step");
  double seconds = 0;
  if (end == absl::string_view::npos || !absl::SimpleAtod(rest.substr(0, end), &seconds)) {
    return std::nullopt;
  }
  return seconds;
}

std::string LayoutName(const JobSpec& spec) {
  const ParallelSpec& par = spec.parallel();
  const RecomputeChoice recompute = RecomputeChoiceOf(spec.train());
  const char* zero_bubble = par.schedule() == SCHEDULE_ZB_H1  ? " zb-h1"
                            : par.schedule() == SCHEDULE_ZB_V ? " zb-v"
                                                              : "";
  return absl::StrCat("t=", par.tensor(), " p=", par.pipeline(), " d=", par.data(),
                      " v=", par.virtual_stages(), zero_bubble, " b=", par.micro_batch_size(),
                      par.sequence_parallel() && par.tensor() > 1 ? " sp" : "",
                      recompute.full ? " recompute" : "", recompute.selective ? " selective" : "");
}

LayoutSearch SearchLayouts(const JobSpec& spec, const ClusterDescription& cluster,
                           const LayoutSearchOptions& options) {
  LayoutSearch search;
  const int most =
      options.devices > 0 ? options.devices : cluster.nodes() * cluster.devices_per_node();
  std::vector<int> device_counts = {most};
  if (options.min_devices > 0) {
    device_counts.clear();
    for (int n = most; n >= std::max(1, options.min_devices); --n) {
      const bool power_of_two = (n & (n - 1)) == 0;
      if (most - n < 32 || most - options.min_devices < 64 || power_of_two)
        device_counts.push_back(n);
    }
  }
  for (int devices : device_counts) SearchDeviceCount(spec, cluster, options, devices, &search);
  std::stable_sort(search.feasible.begin(), search.feasible.end(),
                   [](const PricedLayout& a, const PricedLayout& b) {
                     return std::make_tuple(a.cost.step_seconds, a.spec.parallel().pipeline()) <
                            std::make_tuple(b.cost.step_seconds, b.spec.parallel().pipeline());
                   });
  return search;
}

void SearchDeviceCount(const JobSpec& spec, const ClusterDescription& cluster,
                       const LayoutSearchOptions& options, int devices, LayoutSearch* out) {
  LayoutSearch& search = *out;
  const int heads = std::max(1, spec.model().num_heads());
  const int layers = std::max(1, spec.model().num_layers());
  const RecomputeChoice specs_recompute = RecomputeChoiceOf(spec.train());
  // The spec's own recomputation, then full recomputation of every layer and selective
  // recomputation where the spec does neither and the options allow them.
  std::vector<Recompute> recompute_choices = {Recompute::kSpecs};
  if (options.try_recompute && !specs_recompute.full) recompute_choices.push_back(Recompute::kFull);
  if (options.try_selective_recompute && !specs_recompute.full && !specs_recompute.selective) {
    recompute_choices.push_back(Recompute::kSelective);
  }

  // Prices `candidate`, or records why it cannot run; returns whether it was too big.
  auto consider = [&](JobSpec candidate) {
    if (std::string problem = LayoutProblem(candidate); !problem.empty()) {
      search.rejected.push_back({std::move(candidate), absl::StrCat("not valid: ", problem)});
      return false;
    }
    if (options.enforce_service_limits) {
      if (absl::Status valid = ValidateJobSpec(candidate); !valid.ok()) {
        search.rejected.push_back(
            {std::move(candidate), absl::StrCat("not valid: ", valid.message())});
        return false;
      }
    }
    RankMemoryEstimate memory = EstimateRankMemory(candidate, options.memory);
    if (memory.total_bytes > cluster.device().memory_bytes()) {
      search.rejected.push_back(
          {std::move(candidate),
           absl::StrCat("does not fit: needs ", memory.ToString(), "; a device has ",
                        FormatMemoryBytes(cluster.device().memory_bytes()))});
      return true;
    }
    StepCost cost = PredictStepCost(candidate, cluster, options.cost);
    search.feasible.push_back({std::move(candidate), cost, memory});
    return false;
  };

  for (int t : Divisors(devices, devices)) {
    if (heads % t != 0) continue;  // not a candidate at all: heads cannot split
    for (int p : Divisors(devices / t, layers)) {
      if (layers % p != 0) continue;
      const int d = devices / (t * p);
      for (int v : Divisors(layers / p, p > 1 ? options.max_virtual_stages : 1)) {
        for (int b : options.micro_batch_sizes) {
          for (Recompute recompute : recompute_choices) {
            JobSpec candidate = WithLayout(spec, t, p, d, v, b, recompute);
            const bool sequence_parallel_candidate = options.try_sequence_parallel && t > 1 &&
                                                     !candidate.parallel().sequence_parallel() &&
                                                     spec.model().seq_length() % t == 0;
            std::optional<JobSpec> split;
            if (sequence_parallel_candidate) {
              split = candidate;
              split->mutable_parallel()->set_sequence_parallel(true);
            }
            // The same layout under the zero-bubble schedule of its chunk count.
            std::optional<JobSpec> zero_bubble;
            if (options.try_zero_bubble && p > 1 && v <= 2) {
              zero_bubble = candidate;
              zero_bubble->mutable_parallel()->set_schedule(v == 1 ? SCHEDULE_ZB_H1
                                                                   : SCHEDULE_ZB_V);
            }
            // Sequence parallelism as a memory technique: tried where the layout does not
            // fit without it (its step time on this project's CPU engine is higher than
            // the cost model's, docs/PERFORMANCE.md).
            if (consider(std::move(candidate)) && split.has_value()) consider(std::move(*split));
            if (zero_bubble.has_value()) consider(std::move(*zero_bubble));
          }
        }
      }
    }
  }
}

}  // namespace mtrain
