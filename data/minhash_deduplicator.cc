#include "data/minhash_deduplicator.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>

#include "absl/strings/ascii.h"

namespace mtrain {
namespace {

constexpr uint64_t kMersenne61 = (uint64_t{1} << 61) - 1;

// (a * x) mod 2^61 - 1, without overflow.
uint64_t MulMod61(uint64_t a, uint64_t x) {
  const unsigned __int128 product = static_cast<unsigned __int128>(a) * x;
  const uint64_t low = static_cast<uint64_t>(product) & kMersenne61;
  const uint64_t high = static_cast<uint64_t>(product >> 61);
  uint64_t sum = low + high;
  if (sum >= kMersenne61) sum -= kMersenne61;
  return sum;
}

// Calls `shingle` with each shingle's bytes hash.
template <typename Fn>
void ForEachShingle(absl::string_view text, ShingleKind kind, int ngram, Fn shingle) {
  const size_t n = static_cast<size_t>(std::max(1, ngram));
  if (kind == ShingleKind::kCharacters) {
    if (text.size() <= n) {
      shingle(StableHash(text));
      return;
    }
    for (size_t i = 0; i + n <= text.size(); ++i) shingle(StableHash(text.substr(i, n)));
    return;
  }
  // Words: runs of non-space bytes, lower-cased ASCII; a shingle is n consecutive words.
  std::vector<absl::string_view> words;
  size_t i = 0;
  while (i < text.size()) {
    while (i < text.size() && absl::ascii_isspace(static_cast<unsigned char>(text[i]))) ++i;
    const size_t start = i;
    while (i < text.size() && !absl::ascii_isspace(static_cast<unsigned char>(text[i]))) ++i;
    if (i > start) words.push_back(text.substr(start, i - start));
  }
  std::string joined;
  const size_t count = words.size() <= n ? 1 : words.size() - n + 1;
  for (size_t w = 0; w < count; ++w) {
    joined.clear();
    for (size_t k = w; k < std::min(words.size(), w + n); ++k) {
      for (char c : words[k]) joined.push_back(absl::ascii_tolower(static_cast<unsigned char>(c)));
      joined.push_back(' ');
    }
    shingle(StableHash(joined));
  }
}

// Integral of f over [a, b] by the midpoint rule.
template <typename Fn>
double Integrate(Fn f, double a, double b) {
  const int steps = 200;
  const double h = (b - a) / steps;
  double sum = 0;
  for (int i = 0; i < steps; ++i) sum += f(a + (i + 0.5) * h);
  return sum * h;
}

}  // namespace

uint64_t StableHash(absl::string_view bytes) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 0x100000001b3ULL;
  }
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdULL;
  h ^= h >> 33;
  return h;
}

std::pair<int, int> OptimalBandsAndRows(double threshold, int permutations) {
  double best = std::numeric_limits<double>::infinity();
  std::pair<int, int> choice = {1, 1};
  for (int bands = 1; bands <= permutations; ++bands) {
    for (int rows = 1; bands * rows <= permutations; ++rows) {
      auto candidate = [&](double j) { return 1 - std::pow(1 - std::pow(j, rows), bands); };
      const double false_positive = Integrate(candidate, 0, threshold);
      const double false_negative =
          Integrate([&](double j) { return 1 - candidate(j); }, threshold, 1);
      if (false_positive + false_negative < best) {
        best = false_positive + false_negative;
        choice = {bands, rows};
      }
    }
  }
  return choice;
}

MinHashDeduplicator::MinHashDeduplicator(const MinHashOptions& options)
    : options_(options), seen_(static_cast<size_t>(std::max(1, options.bands))) {
  options_.bands = std::max(1, options_.bands);
  options_.rows = std::max(1, options_.rows);
  std::mt19937_64 rng(options_.seed);
  const int permutations = options_.bands * options_.rows;
  for (int i = 0; i < permutations; ++i) {
    a_.push_back(1 + rng() % (kMersenne61 - 1));
    b_.push_back(rng() % kMersenne61);
  }
}

MinHashSignature MinHashDeduplicator::Signature(absl::string_view text) const {
  const size_t permutations = a_.size();
  std::vector<uint64_t> minimum(permutations, kMersenne61);
  ForEachShingle(text, options_.shingles, options_.ngram, [&](uint64_t shingle) {
    const uint64_t x = shingle % kMersenne61;
    for (size_t p = 0; p < permutations; ++p) {
      uint64_t h = MulMod61(a_[p], x) + b_[p];
      if (h >= kMersenne61) h -= kMersenne61;
      minimum[p] = std::min(minimum[p], h);
    }
  });
  MinHashSignature bands(static_cast<size_t>(options_.bands));
  for (int band = 0; band < options_.bands; ++band) {
    uint64_t h = 0x9e3779b97f4a7c15ULL * static_cast<uint64_t>(band + 1);
    for (int r = 0; r < options_.rows; ++r) {
      h ^= minimum[static_cast<size_t>(band * options_.rows + r)] + 0x9e3779b97f4a7c15ULL +
           (h << 6) + (h >> 2);
    }
    bands[static_cast<size_t>(band)] = h;
  }
  return bands;
}

bool MinHashDeduplicator::IsNearDuplicateAndRemember(const MinHashSignature& signature) {
  bool duplicate = false;
  for (size_t band = 0; band < signature.size() && band < seen_.size(); ++band) {
    duplicate |= !seen_[band].insert(signature[band]).second;
  }
  return duplicate;
}

size_t MinHashDeduplicator::memory_bytes() const {
  size_t bytes = 0;
  for (const auto& set : seen_) bytes += set.capacity() * (sizeof(uint64_t) + 1);
  return bytes;
}

double ShingleJaccard(absl::string_view a, absl::string_view b, ShingleKind kind, int ngram) {
  absl::flat_hash_set<uint64_t> sa, sb;
  ForEachShingle(a, kind, ngram, [&](uint64_t h) { sa.insert(h); });
  ForEachShingle(b, kind, ngram, [&](uint64_t h) { sb.insert(h); });
  size_t common = 0;
  for (uint64_t h : sa) common += sb.contains(h) ? 1 : 0;
  const size_t all = sa.size() + sb.size() - common;
  return all == 0 ? 1.0 : static_cast<double>(common) / static_cast<double>(all);
}

}  // namespace mtrain
