#include "plan/placement.h"

#include <algorithm>
#include <map>

#include "spec/job_spec_arithmetic.h"

namespace mtrain {

std::vector<DeviceKind> EligibleDeviceKinds(const JobSpec& spec) {
  if (spec.device() == DEVICE_CUDA) return {DEVICE_KIND_CUDA};
  if (spec.device() == DEVICE_CPU) return {DEVICE_KIND_CPU};
  // Llama-style and BERT layers have CPU kernels only so far (spec/ refuses DEVICE_CUDA for
  // them).
  if (spec.model().family() == MODEL_FAMILY_LLAMA || spec.model().family() == MODEL_FAMILY_BERT) {
    return {DEVICE_KIND_CPU};
  }
  // So does the split backward of the zero-bubble schedules.
  if (spec.parallel().schedule() == SCHEDULE_ZB_H1 || spec.parallel().schedule() == SCHEDULE_ZB_V) {
    return {DEVICE_KIND_CPU};
  }
  if (spec.precision() != PRECISION_FP32 && spec.precision() != PRECISION_UNSPECIFIED) {
    return {DEVICE_KIND_CUDA};
  }
  return {DEVICE_KIND_CUDA, DEVICE_KIND_CPU};
}

std::vector<int> ShrunkDataDegrees(const JobSpec& spec) {
  const ParallelSpec& p = spec.parallel();
  std::vector<int> degrees;
  for (int d = p.data() - 1; d >= std::max(1, p.min_data()); --d) {
    // Multiples of min_data only: the rank validates its spec again, and min_data must
    // divide data (job_spec_validation).
    if (d % std::max(1, p.min_data()) != 0) continue;
    if (!GlobalBatchSplitsEvenly(p, d)) continue;
    if (p.schedule() == SCHEDULE_INTERLEAVED_1F1B &&
        MicrobatchesPerReplica(p, d) % p.pipeline() != 0) {
      continue;
    }
    degrees.push_back(d);
  }
  return degrees;
}

std::optional<std::vector<std::string>> PackRanks(const JobSpec& spec,
                                                  const std::vector<FreeWorker>& free) {
  const size_t t = static_cast<size_t>(spec.parallel().tensor());
  const size_t groups_needed =
      static_cast<size_t>(spec.parallel().pipeline()) * static_cast<size_t>(spec.parallel().data());
  for (DeviceKind kind : EligibleDeviceKinds(spec)) {
    std::map<std::string, std::vector<std::string>> by_host;
    for (const FreeWorker& worker : free) {
      if (worker.kind == kind) by_host[worker.host].push_back(worker.worker_id);
    }
    std::vector<std::string> ranks;
    for (const auto& [host, ids] : by_host) {
      for (size_t g = 0; g + t <= ids.size() && ranks.size() < groups_needed * t; g += t) {
        ranks.insert(ranks.end(), ids.begin() + g, ids.begin() + g + t);
      }
    }
    if (ranks.size() >= groups_needed * t) return ranks;
  }
  return std::nullopt;
}

}  // namespace mtrain
