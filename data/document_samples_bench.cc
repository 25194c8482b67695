// Times the Megatron-style sample index on an existing indexed dataset: building an
// epoch's index (document shuffle, stream offsets, sample shuffle) and writing it beside
// the dataset, loading it back, building it in memory alone, and drawing samples.
// tests/bench/sample_index_bench.py runs it beside Megatron-Core's GPTDataset on the same
// files.
//
//   bazel run //data:document_samples_bench --
//       --prefix=/data/web --seq_length=2048 --samples=100000
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "data/document_samples.h"
#include "data/indexed_dataset.h"
#include "spec/data_split.h"

ABSL_FLAG(std::string, prefix, "", "the dataset's .bin/.idx prefix");
ABSL_FLAG(int, seq_length, 2048, "tokens a sample (plus one)");
ABSL_FLAG(int64_t, samples, 100000, "samples drawn for the throughput figure");
ABSL_FLAG(std::string, cache_dir, "", "where the index goes (default: beside the dataset)");

namespace mtrain {
namespace {

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

int Run() {
  absl::StatusOr<std::unique_ptr<IndexedDataset>> data =
      IndexedDataset::Open(absl::GetFlag(FLAGS_prefix));
  if (!data.ok()) {
    std::fprintf(stderr, "%s\n", data.status().ToString().c_str());
    return 1;
  }
  DocumentSamplesOptions options;
  options.seq_length = absl::GetFlag(FLAGS_seq_length);
  options.seed = 1234;
  options.documents = {0, (*data)->num_sequences()};
  options.cache_dir = absl::GetFlag(FLAGS_cache_dir);
  std::vector<int32_t> sample(options.seq_length + 1);

  // Each instance's first Fill builds (or loads) epoch 0.
  const auto time_first_fill = [&](const DocumentSamplesOptions& o, const char* what,
                                   std::unique_ptr<DocumentSamples>* out) -> double {
    const auto start = std::chrono::steady_clock::now();
    absl::StatusOr<std::unique_ptr<DocumentSamples>> samples =
        DocumentSamples::Create(data->get(), o);
    if (!samples.ok() || !(*samples)->Fill(0, absl::MakeSpan(sample)).ok()) {
      std::fprintf(stderr, "%s failed: %s\n", what,
                   samples.ok() ? "fill" : samples.status().ToString().c_str());
      return -1;
    }
    const double seconds = SecondsSince(start);
    if (out != nullptr) *out = *std::move(samples);
    return seconds;
  };

  DocumentSamplesOptions memory = options;
  memory.use_cache = false;
  const double in_memory = time_first_fill(memory, "in memory", nullptr);
  std::unique_ptr<DocumentSamples> first;
  // A fresh cache: remove what an earlier run left.
  if (options.cache_dir.empty()) {
    std::filesystem::remove_all(absl::GetFlag(FLAGS_prefix) + ".mtrain-index");
  } else {
    std::filesystem::remove_all(options.cache_dir);
  }
  const double built = time_first_fill(options, "build", &first);
  std::unique_ptr<DocumentSamples> second;
  const double loaded = time_first_fill(options, "load", &second);
  if (in_memory < 0 || built < 0 || loaded < 0) return 1;

  const int64_t n = absl::GetFlag(FLAGS_samples);
  const auto start = std::chrono::steady_clock::now();
  for (int64_t k = 0; k < n; ++k) {
    if (!second->Fill(k, absl::MakeSpan(sample)).ok()) return 1;
  }
  const double draw = SecondsSince(start);
  std::printf("%s\n", second->Describe().c_str());
  std::printf(
      "{\"documents\": %lld, \"tokens\": %lld, \"samples_per_epoch\": %lld, "
      "\"epoch_in_memory_s\": %.4f, \"epoch_build_and_write_s\": %.4f, "
      "\"epoch_load_s\": %.4f, \"samples_per_s\": %.0f, \"draw_mb_per_s\": %.1f}\n",
      static_cast<long long>(second->num_documents()), static_cast<long long>(second->num_tokens()),
      static_cast<long long>(second->samples_per_epoch()), in_memory, built, loaded, n / draw,
      n * (options.seq_length + 1) * 4.0 / draw / 1e6);
  return 0;
}

}  // namespace
}  // namespace mtrain

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return mtrain::Run();
}
