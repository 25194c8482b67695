// Peak memory of importing a HuggingFace GPT-2 (issue 20's "the import streams tensors"):
// --mode=streaming is ImportHuggingFace (one tensor's bytes at a time), --mode=whole
// the earlier path (the whole file read, then converted). Prints the peak RSS
// (VmHWM) beside the file's size.
//
//   bazel build //checkpoint:hf_import_bench
//   python3 tests/bench/hf_import_memory.py   # makes a GPT-2 124M file, runs both modes

#include <cstdio>
#include <filesystem>
#include <set>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "checkpoint/hf_import.h"
#include "checkpoint/hf_interchange.h"
#include "checkpoint/safetensors.h"
#include "model/parameter_table.h"
#include "model/transformer_config.h"
#include "proto/job_spec.pb.h"

ABSL_FLAG(std::string, path, "", "a HuggingFace GPT-2 (file, directory or index)");
ABSL_FLAG(std::string, mode, "streaming", "streaming or whole");
ABSL_FLAG(int, num_layers, 12, "");
ABSL_FLAG(int, num_heads, 12, "");
ABSL_FLAG(int, hidden_size, 768, "");
ABSL_FLAG(int, seq_length, 1024, "");
ABSL_FLAG(int, vocab_size, 50257, "");
ABSL_FLAG(int, stage_layers, 0,
          "streaming: keep only the embeddings and the layers below this (a first pipeline "
          "stage's tensors); 0 keeps everything");

ABSL_FLAG(int, tensor, 1,
          "streaming: keep 1/t of each tensor as it is read (what a tensor-parallel rank "
          "keeps of train.init_from)");

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  mtrain::ModelSpec model;
  model.set_num_layers(absl::GetFlag(FLAGS_num_layers));
  model.set_num_heads(absl::GetFlag(FLAGS_num_heads));
  model.set_hidden_size(absl::GetFlag(FLAGS_hidden_size));
  model.set_seq_length(absl::GetFlag(FLAGS_seq_length));
  model.set_vocab_size(absl::GetFlag(FLAGS_vocab_size));
  const std::string path = absl::GetFlag(FLAGS_path);
  absl::StatusOr<std::map<std::string, mtrain::FullTensor>> params;
  std::map<std::string, mtrain::FullTensor> kept;
  if (absl::GetFlag(FLAGS_mode) == "whole") {
    absl::StatusOr<mtrain::SafetensorsFile> file = mtrain::ReadSafetensors(path);
    if (!file.ok()) {
      std::fprintf(stderr, "%s\n", file.status().ToString().c_str());
      return 1;
    }
    params = mtrain::FromHuggingFace(*file, model);
  } else {
    std::set<std::string> stage;
    const int layers = absl::GetFlag(FLAGS_stage_layers);
    if (layers > 0) {
      // A first pipeline stage's tensors, from the model's parameter table.
      mtrain::JobSpec spec;
      *spec.mutable_model() = model;
      for (const mtrain::ParameterEntry& entry :
           mtrain::ParameterTable(mtrain::TransformerConfigOf(spec))) {
        const bool first_stage = entry.holder == mtrain::ParameterHolder::kFirstStage ||
                                 entry.holder == mtrain::ParameterHolder::kFirstAndLastStage;
        const bool early_layer =
            entry.holder == mtrain::ParameterHolder::kLayer && entry.layer < layers;
        if (first_stage || early_layer) stage.insert(entry.name);
      }
    }
    // A tensor-parallel rank keeps 1/t of each tensor as it is read (the size of its
    // slice; which elements does not change the memory).
    const int tensor = absl::GetFlag(FLAGS_tensor);
    const mtrain::HfTensorSink keep_share = [&](const std::string& name, mtrain::FullTensor full) {
      full.values.resize(full.values.size() / tensor);
      full.values.shrink_to_fit();
      kept[name] = std::move(full);
      return absl::OkStatus();
    };
    params = mtrain::ImportHuggingFace(path, model, layers > 0 ? &stage : nullptr,
                                       tensor > 1 ? &keep_share : nullptr);
    if (params.ok() && tensor > 1) params = std::move(kept);
  }
  if (!params.ok()) {
    std::fprintf(stderr, "%s\n", params.status().ToString().c_str());
    return 1;
  }
  int64_t floats = 0;
  for (const auto& [name, tensor] : *params) floats += static_cast<int64_t>(tensor.values.size());
  // VmHWM, this process's own peak: getrusage's ru_maxrss survives exec, so it would report
  // the forked parent's size (a Python harness's hundreds of MiB) when that is larger.
  long peak_kib = -1;
  if (FILE* status = std::fopen("/proc/self/status", "r")) {
    char line[256];
    while (std::fgets(line, sizeof line, status) != nullptr) {
      if (std::sscanf(line, "VmHWM: %ld kB", &peak_kib) == 1) break;
    }
    std::fclose(status);
  }
  std::printf(
      "{\"mode\": \"%s\", \"parameters\": %lld, \"result_mib\": %.1f, \"peak_rss_mib\": %.1f}\n",
      absl::GetFlag(FLAGS_mode).c_str(), static_cast<long long>(floats), floats * 4.0 / (1 << 20),
      peak_kib / 1024.0);
  return 0;
}
