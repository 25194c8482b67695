#include "coordinator/cli/plan_report.h"

#include <algorithm>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "model/parameter_table.h"
#include "model/transformer_config.h"

namespace mtrain {
namespace {

std::string Duration(double seconds) {
  if (seconds < 120) return absl::StrFormat("%.1f s", seconds);
  if (seconds < 7200) return absl::StrFormat("%.1f min", seconds / 60);
  if (seconds < 172800) return absl::StrFormat("%.1f h", seconds / 3600);
  return absl::StrFormat("%.1f days", seconds / 86400);
}

// "does not fit" / "not valid": the reason up to its first colon.
std::string ReasonKind(const std::string& reason) {
  const size_t colon = reason.find(':');
  return colon == std::string::npos ? reason : reason.substr(0, colon);
}

}  // namespace

double ModelParameters(const JobSpec& spec) {
  TransformerConfig config = TransformerConfigOf(spec);
  config.padded_vocab = config.vocab;  // the model's own count, without the layout's padding
  return ModelParameterCount(config);
}

// Why #1 runs its pipeline schedule: the fastest layout of each schedule with #1's tensor,
// pipeline and data degrees and micro batch, each with its bubble (and the zero-bubble
// schedules' split-backward overhead, priced as elementwise time); empty without a
// pipeline or without a second schedule to compare.
namespace {

std::string ScheduleComparison(const LayoutSearch& search) {
  const ParallelSpec& best = search.feasible.front().spec.parallel();
  if (best.pipeline() < 2) return "";
  std::map<std::string, const PricedLayout*> fastest;   // by schedule (and v)
  for (const PricedLayout& layout : search.feasible) {  // fastest first
    const ParallelSpec& par = layout.spec.parallel();
    if (par.tensor() != best.tensor() || par.pipeline() != best.pipeline() ||
        par.data() != best.data() || par.micro_batch_size() != best.micro_batch_size()) {
      continue;
    }
    const Schedule schedule =
        par.schedule() == SCHEDULE_UNSPECIFIED ? SCHEDULE_1F1B : par.schedule();
    std::string name =
        absl::AsciiStrToLower(absl::StripPrefix(Schedule_Name(schedule), "SCHEDULE_"));
    if (par.virtual_stages() > 1) absl::StrAppend(&name, " v=", par.virtual_stages());
    fastest.try_emplace(name, &layout);
  }
  if (fastest.size() < 2) return "";
  std::vector<std::pair<std::string, const PricedLayout*>> sorted(fastest.begin(), fastest.end());
  std::stable_sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) {
    return a.second->cost.step_seconds < b.second->cost.step_seconds;
  });
  std::vector<std::string> parts;
  for (const auto& [name, layout] : sorted) {
    // What else the schedule's fastest layout needed to fit (LayoutName's suffixes).
    const std::string full = LayoutName(layout->spec);
    std::string needs;
    if (absl::StrContains(full, " sp")) absl::StrAppend(&needs, " with sequence parallelism");
    if (absl::EndsWith(full, " recompute")) absl::StrAppend(&needs, " with full recompute");
    if (absl::EndsWith(full, " selective")) absl::StrAppend(&needs, " with selective recompute");
    parts.push_back(absl::StrFormat("%s%s %.4g s (bubble %.1f%%)", name, needs,
                                    layout->cost.step_seconds, 100 * layout->cost.bubble_fraction));
  }
  return absl::StrCat("schedules at t=", best.tensor(), " p=", best.pipeline(), " d=", best.data(),
                      " b=", best.micro_batch_size(), ": ", absl::StrJoin(parts, ", "),
                      " (zero-bubble schedules pay for their split backward in elementwise "
                      "time)\n");
}

}  // namespace

std::string FormatPlanReport(const JobSpec& spec, const ClusterDescription& cluster,
                             const LayoutSearch& search, const PlanReportOptions& options) {
  std::string out = absl::StrFormat("cluster: %s: %d node(s) x %d device(s), %s\nsource: %s\n",
                                    cluster.name(), cluster.nodes(), cluster.devices_per_node(),
                                    cluster.device().name(), cluster.source());
  absl::StrAppendFormat(&out,
                        "job: %d layers, hidden %d, %d heads, sequence %d, vocabulary %d, "
                        "global batch %d (%.3g parameters)\n",
                        spec.model().num_layers(), spec.model().hidden_size(),
                        spec.model().num_heads(), spec.model().seq_length(),
                        spec.model().vocab_size(), spec.parallel().global_batch_size(),
                        ModelParameters(spec));
  if (search.feasible.empty()) {
    absl::StrAppend(&out, "no layout fits\n");
  } else {
    constexpr const char* kRow = "%-3s %-40s %10s %11s %12s %6s %12s %7s\n";
    absl::StrAppend(&out, "\n",
                    absl::StrFormat(kRow, "#", "LAYOUT", "STEP", "TOKENS/S", "TFLOP/S/DEV", "MFU",
                                    "MEMORY/DEV", "BUBBLE"));
    for (int i = 0; i < options.top && i < static_cast<int>(search.feasible.size()); ++i) {
      const PricedLayout& layout = search.feasible[i];
      absl::StrAppend(
          &out, absl::StrFormat(kRow, absl::StrCat(i + 1), LayoutName(layout.spec),
                                absl::StrFormat("%.4g s", layout.cost.step_seconds),
                                absl::StrFormat("%.4g", layout.cost.tokens_per_second),
                                absl::StrFormat("%.3g", layout.cost.model_flops_per_device / 1e12),
                                absl::StrFormat("%.1f%%", 100 * layout.cost.mfu),
                                FormatMemoryBytes(layout.memory.total_bytes),
                                absl::StrFormat("%.1f%%", 100 * layout.cost.bubble_fraction)));
    }
    const PricedLayout& best = search.feasible.front();
    absl::StrAppendFormat(
        &out,
        "#1 step: matmuls %.3g s, attention %.3g s, elementwise %.3g s, tensor comm %.3g s, "
        "pipeline comm %.3g s, bubble %.3g s, data comm %.3g s, optimizer %.3g s\n",
        best.cost.matmul_seconds, best.cost.attention_seconds, best.cost.elementwise_seconds,
        best.cost.tensor_comm_seconds, best.cost.pipeline_comm_seconds, best.cost.bubble_seconds,
        best.cost.data_comm_seconds, best.cost.optimizer_seconds);
    absl::StrAppend(&out, ScheduleComparison(search));
    if (options.tokens > 0 && best.cost.tokens_per_second > 0) {
      // Megatron-LM's estimate: 8 T P / (n X), X the FLOP/s each device achieves (with
      // recompute counted as it runs).
      const double megatron = 8 * options.tokens * ModelParameters(spec) /
                              (best.cost.devices * best.cost.hardware_flops_per_device);
      absl::StrAppendFormat(&out,
                            "time to train %.3g tokens with #1: %s (cost model), %s (Megatron's "
                            "8 T P / (n X))\n",
                            options.tokens, Duration(options.tokens / best.cost.tokens_per_second),
                            Duration(megatron));
    }
  }
  if (!search.rejected.empty()) {
    std::map<std::string, std::vector<const RejectedLayout*>> by_kind;
    for (const RejectedLayout& rejected : search.rejected) {
      by_kind[ReasonKind(rejected.reason)].push_back(&rejected);
    }
    absl::StrAppendFormat(&out, "\nrejected: %d layout(s)\n", search.rejected.size());
    for (const auto& [kind, layouts] : by_kind) {
      absl::StrAppendFormat(&out, "  %s: %d\n", kind, layouts.size());
      for (int i = 0; i < options.examples && i < static_cast<int>(layouts.size()); ++i) {
        absl::StrAppendFormat(&out, "    %s -- %s\n", LayoutName(layouts[i]->spec),
                              layouts[i]->reason);
      }
    }
  }
  if (search.feasible.size() > 1) {
    absl::StrAppendFormat(
        &out, "slower: %d other layout(s) fit\n",
        search.feasible.size() - std::min<size_t>(search.feasible.size(), options.top));
  }
  return out;
}

}  // namespace mtrain
