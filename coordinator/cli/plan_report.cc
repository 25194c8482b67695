#include "coordinator/cli/plan_report.h"

#include <map>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
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
    constexpr const char* kRow = "%-3s %-34s %10s %11s %12s %6s %12s %7s\n";
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
