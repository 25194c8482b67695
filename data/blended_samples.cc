#include "data/blended_samples.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"

namespace mtrain {
namespace {

// numpy's sum of a float64 array (pairwise_sum in its umath loops): sequential below 8
// values, eight interleaved accumulators up to 128, halves (at a multiple of 8) above.
// Megatron divides by this sum, so the last bit of every weight depends on its order.
double NumpyPairwiseSum(const double* values, int64_t n) {
  constexpr int64_t kBlock = 128;
  if (n < 8) {
    double sum = 0.0;
    for (int64_t i = 0; i < n; ++i) sum += values[i];
    return sum;
  }
  if (n <= kBlock) {
    double r[8];
    for (int k = 0; k < 8; ++k) r[k] = values[k];
    int64_t i = 8;
    for (; i < n - (n % 8); i += 8) {
      for (int k = 0; k < 8; ++k) r[k] += values[i + k];
    }
    double sum = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
    for (; i < n; ++i) sum += values[i];
    return sum;
  }
  int64_t half = n / 2;
  half -= half % 8;
  return NumpyPairwiseSum(values, half) + NumpyPairwiseSum(values + half, n - half);
}

// Megatron-Core's default mid_level_dataset_surplus.
constexpr double kMidLevelSurplus = 0.005;

}  // namespace

std::vector<double> MegatronNormalize(const std::vector<double>& weights) {
  const double sum = NumpyPairwiseSum(weights.data(), static_cast<int64_t>(weights.size()));
  std::vector<double> normalized;
  normalized.reserve(weights.size());
  for (double weight : weights) normalized.push_back(weight / sum);
  return normalized;
}

std::vector<int64_t> MegatronSizesPerDataset(const std::vector<double>& normalized_weights,
                                             int64_t target_samples) {
  // int(math.ceil(math.ceil(target_size * weight) * (1 + surplus))), in the same doubles.
  const double factor = 1.0 + kMidLevelSurplus;
  std::vector<int64_t> sizes;
  sizes.reserve(normalized_weights.size());
  for (double weight : normalized_weights) {
    sizes.push_back(static_cast<int64_t>(
        std::ceil(std::ceil(static_cast<double>(target_samples) * weight) * factor)));
  }
  return sizes;
}

absl::StatusOr<std::unique_ptr<BlendedSamples>> BlendedSamples::Create(
    std::vector<std::unique_ptr<SampleSource>> sources, std::vector<double> weights,
    std::vector<std::string> names) {
  if (sources.empty()) return absl::InvalidArgumentError("data.paths: no dataset to blend");
  if (weights.size() != sources.size() || names.size() != sources.size()) {
    return absl::InvalidArgumentError(absl::StrCat("data.paths: ", sources.size(), " datasets but ",
                                                   weights.size(), " weights and ", names.size(),
                                                   " names"));
  }
  for (size_t i = 0; i < sources.size(); ++i) {
    if (sources[i] == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("data.paths: entry ", i, " (\"", names[i], "\") has no samples"));
    }
    if (!(std::isfinite(weights[i]) && weights[i] > 0)) {
      return absl::InvalidArgumentError(
          absl::StrCat("data.paths: entry ", i, " (\"", names[i], "\") has weight ", weights[i],
                       " [rule: every weight is a finite number > 0]"));
    }
    if (sources[i]->seq_length() != sources[0]->seq_length()) {
      return absl::InvalidArgumentError(
          absl::StrCat("data.paths: entry ", i, " (\"", names[i], "\") has samples of seq_length ",
                       sources[i]->seq_length(), " but entry 0 (\"", names[0], "\") of ",
                       sources[0]->seq_length(), " [rule: blended datasets share one seq_length]"));
    }
  }
  // Megatron normalises twice: the dataset builder, then BlendedDataset itself. The second
  // pass can move a last bit (the first result need not sum to exactly 1).
  std::vector<double> normalized = MegatronNormalize(MegatronNormalize(weights));
  for (double weight : normalized) {
    if (!std::isfinite(weight) || weight <= 0) {
      return absl::InvalidArgumentError(
          "data.paths: the weights do not normalise to finite positive shares (their sum "
          "overflows or they span too many orders of magnitude) [rule: every weight is a "
          "finite number > 0]");
    }
  }
  const int seq_length = sources[0]->seq_length();
  return std::unique_ptr<BlendedSamples>(
      new BlendedSamples(std::move(sources), std::move(normalized), std::move(names), seq_length));
}

BlendedSamples::BlendedSamples(std::vector<std::unique_ptr<SampleSource>> sources,
                               std::vector<double> weights, std::vector<std::string> names,
                               int seq_length)
    : sources_(std::move(sources)),
      weights_(std::move(weights)),
      names_(std::move(names)),
      seq_length_(seq_length) {
  MutexLock lock(&mutex_);
  checkpoints_.assign(sources_.size(), 0);  // before sample 0: nothing given
}

int BlendedSamples::Choose(int64_t index, const int64_t* counts) const {
  // Exactly build_blending_indices' doubles (the build forbids FMA contraction, which
  // would round differently).
  const double position = std::max(static_cast<double>(index), 1.0);
  int best = 0;
  double best_error = weights_[0] * position - static_cast<double>(counts[0]);
  for (size_t d = 1; d < weights_.size(); ++d) {
    const double error = weights_[d] * position - static_cast<double>(counts[d]);
    if (error > best_error) {  // strict: ties go to the first
      best_error = error;
      best = static_cast<int>(d);
    }
  }
  return best;
}

void BlendedSamples::EnsureCheckpoint(int64_t block) const {
  const size_t width = sources_.size();
  std::vector<int64_t> counts;
  for (int64_t have = static_cast<int64_t>(checkpoints_.size() / width) - 1; have < block; ++have) {
    counts.assign(checkpoints_.end() - width, checkpoints_.end());
    const int64_t begin = have * kCheckpointInterval;
    for (int64_t i = begin; i < begin + kCheckpointInterval; ++i)
      ++counts[Choose(i, counts.data())];
    checkpoints_.insert(checkpoints_.end(), counts.begin(), counts.end());
  }
}

void BlendedSamples::ReplayBlock(int64_t block) const {
  EnsureCheckpoint(block);
  const size_t width = sources_.size();
  std::vector<int64_t> counts(checkpoints_.begin() + block * width,
                              checkpoints_.begin() + (block + 1) * width);
  cached_assignments_.resize(kCheckpointInterval);
  const int64_t begin = block * kCheckpointInterval;
  for (int64_t j = 0; j < kCheckpointInterval; ++j) {
    const int d = Choose(begin + j, counts.data());
    cached_assignments_[j] = Assignment{d, counts[d]++};
  }
  cached_block_ = block;
}

BlendedSamples::Assignment BlendedSamples::Assign(int64_t index) const {
  MutexLock lock(&mutex_);
  const int64_t block = index / kCheckpointInterval;
  if (cached_block_ != block) ReplayBlock(block);
  return cached_assignments_[index % kCheckpointInterval];
}

std::vector<int64_t> BlendedSamples::CountsBefore(int64_t n) const {
  MutexLock lock(&mutex_);
  const int64_t block = n / kCheckpointInterval;
  EnsureCheckpoint(block);
  const size_t width = sources_.size();
  std::vector<int64_t> counts(checkpoints_.begin() + block * width,
                              checkpoints_.begin() + (block + 1) * width);
  for (int64_t i = block * kCheckpointInterval; i < n; ++i) ++counts[Choose(i, counts.data())];
  return counts;
}

absl::Status BlendedSamples::Fill(int64_t index, absl::Span<int32_t> tokens) {
  if (index < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("blended samples: sample index ", index, " is negative"));
  }
  if (static_cast<int64_t>(tokens.size()) != int64_t{seq_length_} + 1) {
    return absl::InvalidArgumentError(absl::StrCat("blended samples: a sample is ",
                                                   int64_t{seq_length_} + 1,
                                                   " tokens; the buffer holds ", tokens.size()));
  }
  const Assignment assignment = Assign(index);
  return sources_[assignment.dataset]->Fill(assignment.index, tokens);
}

std::string BlendedSamples::Describe() const {
  std::string text = absl::StrCat("blend of ", sources_.size(), " datasets:");
  for (size_t d = 0; d < sources_.size(); ++d) {
    absl::StrAppend(&text, d == 0 ? " " : "; ", "weight ", weights_[d], " \"", names_[d],
                    "\": ", sources_[d]->Describe());
  }
  return text;
}

}  // namespace mtrain
