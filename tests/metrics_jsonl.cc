#include "tests/metrics_jsonl.h"

#include <cmath>
#include <fstream>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace mtrain {

absl::StatusOr<std::vector<MetricsLine>> ReadMetricsJsonl(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", path));
  std::vector<MetricsLine> lines;
  std::string text;
  int number = 0;
  while (std::getline(in, text)) {
    ++number;
    absl::string_view body = text;
    if (!absl::ConsumePrefix(&body, "{") || !absl::ConsumeSuffix(&body, "}")) {
      return absl::InvalidArgumentError(absl::StrCat(path, ":", number, ": not an object"));
    }
    MetricsLine line;
    for (absl::string_view field : absl::StrSplit(body, ',')) {
      std::pair<std::string, std::string> kv = absl::StrSplit(field, absl::MaxSplits(':', 1));
      std::string key(absl::StripSuffix(absl::StripPrefix(kv.first, "\""), "\""));
      double value = NAN;
      if (kv.second != "null" && !absl::SimpleAtod(kv.second, &value)) {
        return absl::InvalidArgumentError(
            absl::StrCat(path, ":", number, ": field ", key, " is not a number"));
      }
      line[key] = value;
    }
    lines.push_back(std::move(line));
  }
  return lines;
}

absl::StatusOr<std::vector<double>> LossesOfRank(const std::vector<MetricsLine>& lines, int rank) {
  std::map<int, double> by_step;
  for (const MetricsLine& line : lines) {
    if (line.count("rank") == 0 || static_cast<int>(line.at("rank")) != rank) continue;
    if (line.count("loss") == 0) continue;
    const int step = static_cast<int>(line.at("step"));
    if (!by_step.emplace(step, line.at("loss")).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("rank ", rank, " reported step ", step, " twice"));
    }
  }
  std::vector<double> losses;
  for (const auto& [step, loss] : by_step) {
    if (step != static_cast<int>(losses.size()) + 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("rank ", rank, " skipped step ", losses.size() + 1));
    }
    losses.push_back(loss);
  }
  return losses;
}

}  // namespace mtrain
